//! I/O counts, which are deterministic (timings are not asserted anywhere).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::small_nodes;
use wodfs_device::{CountingDevice, MemDevice};
use wodfs_engine::{BackgroundConfig, Config, Tree};

type Dev = Arc<CountingDevice<MemDevice>>;

fn key(i: u64) -> Vec<u8> {
    format!("/data/file{:03}/{:010}", i % 7, i).into_bytes()
}

/// A tree of `n` 4 KiB values, checkpointed, then reopened cold.
fn cold_tree(cfg: &Config, n: u64) -> (Dev, Tree) {
    let dev: Dev = Arc::new(CountingDevice::new(MemDevice::new(512 << 20)));
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    for i in 0..n {
        tree.insert(&key(i), &vec![(i % 251) as u8; 4096]).unwrap();
    }
    tree.close().unwrap();
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    (dev, tree)
}

/// A closed store of keys `0..n` inserted in a fixed permutation order
/// (`i * stride % n`, `stride` prime to `n`: no two neighbours arrive
/// together) with `value_len` bytes of incompressible values each.
fn scattered_tree(cfg: &Config, n: u64, stride: u64, value_len: usize) -> Dev {
    let dev: Dev = Arc::new(CountingDevice::new(MemDevice::new(512 << 20)));
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let mut rng = common::Rng(stride);
    for i in 0..n {
        let value = common::incompressible(&mut rng, value_len);
        tree.insert(&key(i * stride % n), &value).unwrap();
    }
    tree.close().unwrap();
    dev
}

/// Entries a full scan of `tree` visits.
fn count_all(tree: &Tree) -> u64 {
    let mut entries = 0;
    tree.visit_range(b"", None, |_, _| {
        entries += 1;
        true
    })
    .unwrap();
    entries
}

#[test]
fn patch_into_cold_values_reads_nothing() {
    let (dev, tree) = cold_tree(&small_nodes(), 20_000);
    assert!(tree.height() >= 2, "height {}", tree.height());
    let before = dev.counts();
    for i in 0..100u64 {
        let k = key((i * 7919) % 20_000);
        tree.patch(&k, (i % 4000) as u32, b"abcd").unwrap();
    }
    let reads = dev.counts().since(&before).reads;
    assert_eq!(reads, 0, "blind patches must not read the device");
    // And the patches are there.
    let k = key(0);
    let mut want = vec![0u8; 4096];
    want[..4].copy_from_slice(b"abcd");
    assert_eq!(tree.get(&k).unwrap().unwrap(), want);
}

#[test]
fn cold_point_query_reads_at_most_one_partition_per_level() {
    let (dev, tree) = cold_tree(&small_nodes(), 20_000);
    let h = u64::from(tree.height());
    assert!(h >= 2);
    for probe in [3u64, 9_999, 19_998] {
        let before = dev.counts();
        let s0 = tree.stats();
        let v = tree.get(&key(probe)).unwrap().unwrap();
        assert_eq!(v, vec![(probe % 251) as u8; 4096]);
        let s = tree.stats();
        let reads = dev.counts().since(&before).reads;
        // Below the (cached) root: one header and one partition per level.
        assert!(reads <= 2 * h, "{reads} reads for height {h}");
        assert_eq!(s.node_reads - s0.node_reads, 0, "no whole-node reads");
        assert!(s.partition_reads - s0.partition_reads <= h);
        // No message for these keys is buffered: the headers' filters let
        // the query skip every buffer and read only the leaf's basement
        // (a false positive may add one).
        assert!(s.partition_reads - s0.partition_reads <= 2, "{s:?}");
    }
}

#[test]
fn scattered_point_queries_read_exactly_their_bytes_and_a_sweep_may_read_ahead() {
    let (dev, tree) = cold_tree(&small_nodes(), 20_000);
    // Keys far apart, walked backwards so that no read lands just after
    // an earlier one: every read is a random one (the device reads no
    // window around it).
    let mut scattered: Vec<u64> = (0..40u64).map(|i| i * 499).collect();
    scattered.sort_by_key(|i| std::cmp::Reverse(key(*i)));
    let before = dev.counts();
    for probe in scattered {
        assert_eq!(
            tree.get(&key(probe)).unwrap().unwrap(),
            vec![(probe % 251) as u8; 4096]
        );
    }
    let scattered = dev.counts().since(&before);
    assert!(scattered.reads >= 40, "{scattered:?}");
    assert_eq!(scattered.random_reads, scattered.reads, "{scattered:?}");

    // One key after another in key order (a file system reading small
    // files as `grep -r` does): each basement lies where the previous
    // read ended, so those reads keep the device's read-ahead. Random are
    // only the headers and, per node reached anew, the first partition.
    // After three leaves in a row the engine reads the next leaves whole
    // ahead of the reader (`tree::sweep`).
    let mut ordered: Vec<u64> = (0..20_000).filter(|i| i % 7 == 3).collect();
    ordered.sort_by_key(|i| key(*i));
    let before = dev.counts();
    let s0 = tree.stats();
    for i in ordered.iter().take(1_000) {
        assert_eq!(
            tree.get(&key(*i)).unwrap().unwrap(),
            vec![(i % 251) as u8; 4096]
        );
    }
    // Read-ahead threads may still be at work: counted once they are done.
    let (counts, s) = settled(&dev, &tree);
    let sweep = counts.since(&before);
    let (headers, parts, segments, nodes) = (
        s.header_reads - s0.header_reads,
        s.partition_reads - s0.partition_reads,
        s.segment_reads - s0.segment_reads,
        s.node_reads - s0.node_reads,
    );
    // The sweep starts read-ahead threads; whether one reads its leaf
    // depends on when it gets a CPU: one that runs after the reader has
    // been through its leaf does nothing (on a loaded machine, every one
    // did in one run in a few dozen).
    let started = s.sweep_reads_ahead - s0.sweep_reads_ahead;
    assert!(started >= 1, "no read-ahead for the sweep: {s:?}");
    assert!(
        nodes <= started,
        "{nodes} leaves read whole, {started} threads: {s:?}"
    );
    assert!(parts >= 100, "{parts} partitions for 1,000 keys of 4 KiB");
    // Every read is a node's header, a leaf's basement, a segment of a
    // buffer whose filter says it may hold the key, or a leaf read ahead.
    assert_eq!(
        sweep.reads,
        headers + parts + segments + nodes,
        "{sweep:?} {s:?}"
    );
    // A leaf read ahead whole continues no read of the reader's (it is
    // still in the leaf before).
    let random_parts = sweep.random_reads - headers;
    assert!(
        random_parts <= headers + nodes,
        "{sweep:?}, {headers} headers, {nodes} leaves read ahead"
    );
    assert!(
        sweep.reads - sweep.random_reads >= parts - headers,
        "{sweep:?}"
    );
}

/// The device's counts and the engine's once no read-ahead thread adds
/// to them any more.
fn settled(dev: &Dev, tree: &Tree) -> (wodfs_device::IoCounts, wodfs_engine::TreeStats) {
    tree.wait_for_read_ahead();
    (dev.counts(), tree.stats())
}

#[test]
fn point_query_decided_by_a_buffered_message_reads_no_leaf() {
    let cfg = small_nodes();
    let (dev, tree) = cold_tree(&cfg, 20_000);
    assert!(tree.height() >= 2);
    // A few updates stay in the root's buffers across a reopen.
    tree.insert(&key(11), b"new").unwrap();
    tree.delete(&key(12)).unwrap();
    tree.delete_range(&key(13), &[key(13), vec![0]].concat())
        .unwrap();
    tree.patch(&key(15), 0, b"pp").unwrap();
    tree.close().unwrap();
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let leaf_reads = |k: u64| {
        let (s0, d0) = (tree.stats(), dev.counts());
        let got = tree.get(&key(k)).unwrap();
        let (s, reads) = (tree.stats(), dev.counts().since(&d0).reads);
        let headers = s.header_reads - s0.header_reads;
        let parts = s.partition_reads - s0.partition_reads;
        assert!(reads <= headers + parts, "{reads} reads");
        (got, headers, parts)
    };
    // The root, with the buffer holding the message, is read whole at
    // open: an insert, delete or range delete there is answered without
    // any read.
    assert_eq!(leaf_reads(11), (Some(b"new".to_vec()), 0, 0));
    assert_eq!(leaf_reads(12), (None, 0, 0));
    assert_eq!(leaf_reads(13), (None, 0, 0));
    // A patch depends on the older value: the descent goes on to the leaf.
    let (got, headers, parts) = leaf_reads(15);
    let mut want = vec![15u8; 4096];
    want[..2].copy_from_slice(b"pp");
    assert_eq!(got, Some(want));
    assert!(
        headers >= 1 && parts >= 1,
        "{headers} headers, {parts} partitions"
    );
    tree.verify().unwrap();
}

#[test]
fn a_buffered_key_is_read_from_one_segment_of_its_buffer() {
    let cfg = small_nodes();
    let (dev, tree) = cold_tree(&cfg, 20_000);
    assert!(tree.height() >= 2);
    // Small overwrites: the root flushes them into the level below, whose
    // buffers grow past a partition's size and are written segmented.
    // About 3 MB of them: the root buffers up to three node sizes.
    let updated: Vec<u64> = (0..6_000u64).map(|i| (i * 7_919) % 20_000).collect();
    let new_value = |i: u64| format!("new{i}-{}", "x".repeat(500)).into_bytes();
    for &i in &updated {
        tree.insert(&key(i), &new_value(i)).unwrap();
    }
    tree.close().unwrap();
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let (mut probed, mut false_positives) = (0, 0);
    for &i in &updated {
        let (d0, s0) = settled(&dev, &tree);
        let got = tree.get(&key(i)).unwrap();
        assert_eq!(got, Some(new_value(i)));
        let (d, s) = settled(&dev, &tree);
        let io = d.since(&d0);
        let segments = s.segment_reads - s0.segment_reads;
        if segments == 0 {
            continue;
        }
        probed += 1;
        // No whole buffer, no leaf: the insert found in a segment decides
        // the value. One segment read, unless a buffer above the one
        // holding the key let it through its Bloom filter (about 1 % of
        // keys not in it): then one segment per buffered level at most.
        assert!(segments < tree.height() as u64, "{s:?}");
        if segments > 1 {
            false_positives += 1;
        }
        assert_eq!(s.partition_reads, s0.partition_reads, "{s:?}");
        // Random point queries arrive in three leaves in a row now and
        // then, and the sweep detector reads the next one ahead
        // (`tree::sweep`, about one query in 6,000 here): counted apart.
        let ahead = s.node_reads - s0.node_reads;
        assert!(ahead <= s.sweep_reads_ahead - s0.sweep_reads_ahead, "{s:?}");
        assert_eq!(
            io.reads,
            segments + s.header_reads - s0.header_reads + ahead,
            "{s:?}"
        );
        // The same query again finds the pieces it read in the segment
        // cache: no read at all.
        assert_eq!(tree.get(&key(i)).unwrap(), Some(new_value(i)));
        let (d1, again) = settled(&dev, &tree);
        assert_eq!(d1.since(&d).reads, 0);
        assert_eq!(again.segment_reads, s.segment_reads, "{again:?}");
        assert_eq!(again.segment_hits - s.segment_hits, segments, "{again:?}");
    }
    assert!(probed >= 100, "only {probed} lookups read a segment");
    assert!(
        false_positives * 50 <= probed,
        "{false_positives} of {probed} lookups read a segment in vain"
    );
    tree.verify().unwrap();
}

#[test]
fn child_covered_by_a_range_delete_is_dropped_unread() {
    covered_children_are_dropped_unread(false);
}

/// With the background threads running, the flush read-ahead thread among
/// them: it must not read a child the flush will prune.
#[test]
fn child_covered_by_a_range_delete_is_not_read_ahead() {
    covered_children_are_dropped_unread(true);
}

fn covered_children_are_dropped_unread(background: bool) {
    // Height 1: a root over leaves, so the root's buffers flush into leaves.
    let cfg = Config {
        fanout: 64,
        ..small_nodes()
    };
    let (dev, tree) = cold_tree(&cfg, 2_000);
    assert_eq!(tree.height(), 1);
    let bg = background.then(|| {
        tree.start_background(BackgroundConfig {
            log_sync_every: Duration::from_secs(3600),
            checkpoint_every: Duration::from_secs(3600),
            ..BackgroundConfig::default()
        })
    });
    let before = dev.counts();
    let s0 = tree.stats();
    // Delete most of the key space, then write into the deleted region until
    // the root flushes: the covered leaves are replaced, not read.
    tree.delete_range(b"/data/file000/", b"/data/file006/")
        .unwrap();
    let mut i = 0u64;
    while tree.stats().flushes == s0.flushes {
        let k = format!("/data/file003/{i:010}x").into_bytes();
        tree.insert(&k, &[1u8; 2000]).unwrap();
        i += 1;
    }
    if let Some(bg) = bg {
        bg.stop().unwrap();
    }
    let s = tree.stats();
    assert!(s.prunes > s0.prunes, "{s:?}");
    assert_eq!(
        s.flush_read_ahead_asks, s0.flush_read_ahead_asks,
        "pruned leaves must not be read ahead"
    );
    assert_eq!(
        dev.counts().since(&before).reads,
        0,
        "pruned leaves must not be read"
    );
    assert_eq!(tree.get(&key(3)).unwrap(), None);
    assert!(tree.get(&key(6)).unwrap().is_some());
    tree.verify().unwrap();
}

#[test]
fn random_inserts_stay_buffered_and_cost_few_node_writes() {
    // The default configuration, with data 8x the cache.
    let cfg = Config {
        cache_bytes: 24 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    };
    let dev: Dev = Arc::new(CountingDevice::new(MemDevice::new(1 << 30)));
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let value = [0x5au8; 100];
    let n: u64 = 1_700_000; // 16-byte keys + 100-byte values: ~200 MB, 8x the cache
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next_key = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x.to_be_bytes()
            .iter()
            .chain(&x.rotate_left(29).to_le_bytes())
            .copied()
            .collect::<Vec<u8>>()
    };
    let warmup = n / 2;
    for _ in 0..warmup {
        tree.insert(&next_key(), &value).unwrap();
    }
    let s0 = tree.stats();
    for _ in warmup..n {
        tree.insert(&next_key(), &value).unwrap();
    }
    let s = tree.stats();
    let per_1000 = (s.node_writes - s0.node_writes) as f64 * 1000.0 / (n - warmup) as f64;
    // Bound (docs/ARCHITECTURE.md, "Cost of random inserts"): a message is
    // flushed once per level, a flush moves at least node_bytes / fanout
    // bytes and costs at most one node write, so node writes per message
    // <= height * message_bytes * fanout / node_bytes, about 0.9 per 1,000
    // inserts of ~136 accounted bytes at height 2; plus evictions of dirty
    // internal nodes. We allow 2.
    eprintln!(
        "height {} node writes per 1000 inserts: {per_1000:.3} {s:?}",
        tree.height()
    );
    assert!(
        per_1000 <= 2.0,
        "{per_1000} node writes per 1000 random inserts"
    );
    let report = tree.verify().unwrap();
    assert!(
        report.buffered_points > 10_000,
        "messages stay buffered: {report:?}"
    );
    assert!(tree.height() >= 1);
}

#[test]
fn the_root_buffers_up_to_three_node_sizes_before_it_flushes() {
    // Small nodes (256 KiB) and a 6 MiB cache: the root may buffer a
    // quarter of the cache, at most three node sizes (768 KiB).
    let cfg = small_nodes();
    let limit = 3 * cfg.node_bytes as u64;
    let tree = Tree::create(Box::new(MemDevice::new(256 << 20)), cfg.clone()).unwrap();
    for i in 0..20_000u64 {
        tree.insert(&key(i), &[1u8; 100]).unwrap();
    }
    // Height 1: every buffer is the root's.
    assert_eq!(tree.height(), 1, "{:?}", tree.stats());
    // Clean children take messages into the root's buffers, not directly.
    tree.checkpoint().unwrap();
    let f0 = tree.stats().flushes;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut most_before_a_flush = 0;
    for _ in 0..100 {
        for _ in 0..100 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            tree.insert(&key(x % 20_000 * 3 + 1), &[2u8; 100]).unwrap();
        }
        if tree.stats().flushes > f0 {
            break;
        }
        most_before_a_flush = tree.verify().unwrap().buffered_bytes;
    }
    assert!(tree.stats().flushes > f0, "{:?}", tree.stats());
    // A root limited to one node size would have flushed at 256 KiB.
    assert!(
        most_before_a_flush > 2 * cfg.node_bytes as u64 && most_before_a_flush <= limit,
        "the root held {most_before_a_flush} bytes before it flushed"
    );
    tree.verify().unwrap();
}

/// A device that records the log's writes (the direct ones), to check
/// they are whole 512-byte sectors: the unit in which a direct-I/O device
/// writes without a read-modify-write.
#[derive(Debug)]
struct SectorChecker {
    inner: MemDevice,
    log: std::sync::Mutex<Vec<(u64, usize)>>,
}

impl wodfs_device::Device for SectorChecker {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.lock().unwrap().push((offset, buf.len()));
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
}

/// Log flushes write whole sectors, and a sync of one small record writes
/// one or two of them (not the 4 KiB pages of a page-cache write).
#[test]
fn log_writes_are_whole_sectors_and_a_small_sync_writes_at_most_two() {
    const SECTOR: u64 = wodfs_device::SECTOR_BYTES;
    let dev = Arc::new(SectorChecker {
        inner: MemDevice::new(256 << 20),
        log: Default::default(),
    });
    let tree = Tree::create(Box::new(dev.clone()), small_nodes()).unwrap();
    for i in 0..3_000u64 {
        if i % 100 == 0 {
            tree.sync().unwrap();
        }
        tree.insert(
            &key(i * 7919 % 3_000),
            &vec![i as u8; 50 + (i % 300) as usize],
        )
        .unwrap();
        if i % 100 == 0 {
            dev.log.lock().unwrap().clear();
            tree.sync().unwrap();
            let writes = dev.log.lock().unwrap().clone();
            let bytes: usize = writes.iter().map(|(_, n)| n).sum();
            assert!(
                writes.len() == 1 && bytes as u64 <= 2 * SECTOR,
                "sync after one small insert wrote {writes:?}"
            );
        }
        if i % 1000 == 999 {
            tree.checkpoint().unwrap();
        }
    }
    tree.close().unwrap();
    let writes = dev.log.lock().unwrap().clone();
    assert!(!writes.is_empty());
    for (offset, len) in writes {
        assert!(
            offset.is_multiple_of(SECTOR) && (len as u64).is_multiple_of(SECTOR),
            "a write of {len} bytes at {offset} is not whole sectors"
        );
    }
}

#[test]
fn a_range_move_deletes_a_few_moved_keys_one_by_one() {
    let tree = Tree::create(Box::new(MemDevice::new(64 << 20)), small_nodes()).unwrap();
    for i in 0..3u64 {
        tree.insert(format!("/few/{i}").as_bytes(), b"v").unwrap();
    }
    for i in 0..200u64 {
        tree.insert(format!("/many/{i:03}").as_bytes(), b"v")
            .unwrap();
    }
    let ranges = |t: &Tree| t.stats().range_deletes;
    let before = ranges(&tree);
    tree.range_move(b"/few/", b"/few2/").unwrap();
    // No range delete: the three source keys were deleted by point
    // messages, and the destination was empty.
    assert_eq!(ranges(&tree) - before, 0);
    let before = ranges(&tree);
    tree.range_move(b"/many/", b"/many2/").unwrap();
    assert_eq!(
        ranges(&tree) - before,
        1,
        "200 keys: one range delete for the source"
    );
    // Onto a destination that holds keys: its range delete clears them.
    tree.insert(b"/few3/old", b"gone").unwrap();
    let before = ranges(&tree);
    tree.range_move(b"/few2/", b"/few3/").unwrap();
    assert_eq!(ranges(&tree) - before, 1, "the destination's range delete");
    assert_eq!(tree.get(b"/few3/old").unwrap(), None);
    tree.range_move(b"/few3/", b"/few2/").unwrap();
    let count = |prefix: &str| {
        // Every prefix ends in '/', and '0' follows '/'.
        let hi = format!("{}0", prefix.trim_end_matches('/'));
        tree.range(prefix.as_bytes(), Some(hi.as_bytes())).count()
    };
    for (from, to, n) in [("/few/", "/few2/", 3), ("/many/", "/many2/", 200)] {
        assert_eq!(count(from), 0, "{from}");
        assert_eq!(count(to), n, "{to}");
    }
    tree.verify().unwrap();
}

/// A move whose destination was deleted by a range delete still in the
/// buffers: the deleted entries are in the leaves, each one hidden. The
/// check for an empty destination gives up after a couple of leaves (and
/// sends the range delete) instead of reading every leaf of the old
/// contents under the write lock.
#[test]
fn a_move_onto_a_range_deleted_destination_reads_few_leaves() {
    let cfg = small_nodes();
    let dev = scattered_tree(&cfg, 4_000, 7, 4096);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    tree.delete_range(b"/data/file003/", b"/data/file0030")
        .unwrap();
    tree.insert(b"/src/x", b"v").unwrap();
    let ranges = tree.stats().range_deletes;
    let before = dev.counts();
    tree.range_move(b"/src/", b"/data/file003/").unwrap();
    let read = dev.counts().since(&before).read_bytes;
    // The old file003 keys are about 570 values of 4 KiB: nine leaves.
    assert!(
        read <= 3 * cfg.node_bytes as u64,
        "the emptiness check read {read} bytes"
    );
    assert_eq!(tree.stats().range_deletes - ranges, 1, "not known empty");
    assert_eq!(
        tree.get(b"/data/file003/x").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(tree.get(&key(3)).unwrap(), None);
    tree.verify().unwrap();
}

/// `Tree::read_ahead` loads the leaves after a reader's position whole,
/// one device read each, on a thread of its own; a scan that reaches them
/// afterwards reads none of them again, and in all the scan and the
/// read-ahead read each leaf of the range exactly once. The range is the
/// tree's last: a scan that sweeps leaf after leaf has the leaf after its
/// range read ahead too (`tree::sweep`), as many or as few as the threads'
/// timing gives, and here there is none.
#[test]
fn read_ahead_loads_the_next_leaves_and_nothing_is_read_twice() {
    let cfg = Config {
        cache_bytes: 64 << 20,
        ..small_nodes()
    };
    let (lo, hi) = (b"/data/file006/".as_slice(), b"/data/file007/".as_slice());
    let scan = |tree: &Tree| {
        let mut n = 0;
        tree.visit_range(lo, Some(hi), |_, _| {
            n += 1;
            true
        })
        .unwrap();
        n
    };
    // How many leaves the range spans: whole-node reads of a cold scan.
    let (_, tree) = cold_tree(&cfg, 7_000);
    let entries = scan(&tree);
    assert_eq!(entries, 1_000);
    let leaves = tree.stats().node_reads;
    assert!(leaves >= 4, "the range spans {leaves} leaves");
    drop(tree);

    let (_, tree) = cold_tree(&cfg, 7_000);
    tree.read_ahead(lo, hi);
    let start = std::time::Instant::now();
    while tree.stats().node_reads < 2 {
        assert!(start.elapsed().as_secs() < 60, "no read-ahead happened");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(scan(&tree), entries);
    let s = tree.stats();
    assert_eq!(s.node_reads, leaves, "{s:?}");
}

/// A cold scan of leaves that lie scattered over the image (written in
/// random key order) reads each whole leaf as a random read, so the
/// device reads no window past it into whatever extent follows. Before,
/// whole-node reads always let the kernel read ahead, and on a real file
/// it read about as much again as the nodes (engine-compare's full scan:
/// 882 MB from the device for 430 MB of leaves). A leaf the scan's
/// read-ahead reads whole, header and partitions in one read
/// (`Device::read_owned`), reads exactly its extent as well.
#[test]
fn a_cold_scan_of_scattered_leaves_reads_them_without_read_ahead() {
    let cfg = small_nodes();
    // Values that do not compress, so a leaf's extent is wider than the
    // distance a read may skip and still continue the one before.
    let n = 6_007;
    let dev = scattered_tree(&cfg, n, 2_689, 1024);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let (before, s0) = (dev.counts(), tree.stats());
    assert_eq!(count_all(&tree), n);
    let (scan, s) = (dev.counts().since(&before), tree.stats());
    let (headers, nodes) = (
        s.header_reads - s0.header_reads,
        s.node_reads - s0.node_reads,
    );
    assert!(nodes >= 20, "{nodes} whole-node reads");
    let random_nodes = scan.random_reads - headers;
    assert!(
        random_nodes * 2 >= nodes,
        "{random_nodes} of {nodes} whole-node reads random: {scan:?}"
    );
}

/// A cold scan reads each leaf it reaches whole, in one device read, and
/// never its header alone first: only internal nodes' headers are read.
/// Reading a leaf's header first cost a device round trip per leaf, and
/// when a read-ahead thread was reading that leaf, the header read
/// waited behind it (session 16: 54 waits of 7 ms in a cold 4 GiB file
/// read).
#[test]
fn a_cold_scan_reads_every_leaf_whole_and_no_leaf_header() {
    let cfg = small_nodes();
    let (_, tree) = cold_tree(&cfg, 7_000);
    let report = tree.verify().unwrap();
    assert!(report.leaves >= 20, "{report:?}");
    let (_, tree) = {
        drop(tree);
        cold_tree(&cfg, 7_000)
    };
    let s0 = tree.stats();
    let mut entries = 0;
    tree.visit_range(b"", None, |_, _| {
        entries += 1;
        true
    })
    .unwrap();
    assert_eq!(entries, 7_000);
    let s = tree.stats();
    let internal = report.nodes - report.leaves;
    assert_eq!(s.node_reads - s0.node_reads, report.leaves, "{s:?}");
    assert!(
        s.header_reads - s0.header_reads <= internal,
        "{} header reads for {internal} internal nodes: {s:?}",
        s.header_reads - s0.header_reads
    );
}

/// A cold scan keeps the basements of a leaf stored uncompressed as slices
/// of the one buffer the leaf was read into: no copy per basement (a sixth
/// of the CPU of a cold 4 GiB file read). A leaf stored compressed is
/// decoded into bytes of its own, and keeps no read buffer. A writer that
/// changes a leaf read that way first gives its basements bytes of their
/// own, so the basements it replaces do not stay in memory behind their
/// siblings; what it wrote reads back.
#[test]
fn a_cold_scan_shares_uncompressed_leaves_and_a_writer_unshares_them() {
    let cfg = small_nodes();
    let n = 6_000;
    let dev = scattered_tree(&cfg, n, 7_919, 700);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let report = tree.verify().unwrap();
    drop(tree);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let s0 = tree.stats();
    assert_eq!(count_all(&tree), n);
    let s = tree.stats();
    assert_eq!(s.node_reads - s0.node_reads, report.leaves, "{s:?}");
    assert_eq!(
        s.shared_node_reads - s0.shared_node_reads,
        report.leaves,
        "every leaf read whole keeps its buffer: {s:?}"
    );
    assert_eq!(s.unshared_leaves, 0, "nothing written yet");
    // Overwrite a run of keys and push the messages down into the cached
    // leaves.
    for i in 0..1_500u64 {
        tree.insert(&key(i), &vec![0xAB; 700]).unwrap();
    }
    tree.checkpoint().unwrap();
    let s = tree.stats();
    assert!(s.unshared_leaves >= 1, "{s:?}");
    assert!(s.unshared_leaves <= report.leaves, "{s:?}");
    for i in [0u64, 777, 1_499] {
        assert_eq!(tree.get(&key(i)).unwrap(), Some(vec![0xAB; 700]));
    }
    assert_eq!(count_all(&tree), n);
    tree.verify().unwrap();

    // Compressible values: stored compressed, nothing shared.
    let (_, tree) = cold_tree(&cfg, 3_000);
    let s0 = tree.stats();
    assert_eq!(count_all(&tree), 3_000);
    let s = tree.stats();
    assert!(s.node_reads > s0.node_reads, "{s:?}");
    assert_eq!(s.shared_node_reads, s0.shared_node_reads, "{s:?}");
}

/// A cold scan with read-ahead reads every leaf once even when internal
/// nodes' buffers (random inserts leave messages there) fill much of the
/// cache. Leaves read ahead and not yet reached used to be evicted before
/// the leaves and buffers the scan had left behind, and read again when
/// the scan got there (engine-compare's full scan: 199 leaf reads for 130
/// leaves, session 17).
#[test]
fn a_cold_scan_through_full_buffers_reads_no_leaf_twice() {
    let cfg = Config {
        // Node budget 2.3 MiB: the buffers (2 MB of messages) and the
        // leaves in flight (three of about 200 KiB ahead) do not all fit.
        cache_bytes: 3_500 << 10,
        ..small_nodes()
    };
    let n = 24_001;
    let dev = scattered_tree(&cfg, n, 7_919, 700);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let report = tree.verify().unwrap();
    assert!(
        report.buffered_bytes * 4 >= cfg.cache_bytes as u64,
        "buffers hold too little to crowd the cache: {report:?}"
    );
    drop(tree);
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let s0 = tree.stats();
    assert_eq!(count_all(&tree), n);
    let s = tree.stats();
    assert_eq!(s.node_reads - s0.node_reads, report.leaves, "{s:?}");
}

/// Opening a cleanly closed store reads the log no further than its first
/// window: the log ends at the checkpoint. The whole region (64 MiB by
/// default) used to be read at every open.
#[test]
fn a_clean_open_reads_one_window_of_the_log() {
    let cfg = Config {
        log_bytes: 32 << 20,
        ..small_nodes()
    };
    let dev: Dev = Arc::new(CountingDevice::new(MemDevice::new(512 << 20)));
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    for i in 0..200 {
        tree.insert(&key(i), b"v").unwrap();
    }
    tree.close().unwrap();
    let before = dev.counts();
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    let read = dev.counts().since(&before).read_bytes;
    // Superblocks, the root (one small node) and one 1 MiB window.
    assert!(read <= (1 << 20) + (512 << 10), "{read} bytes read at open");
    assert_eq!(tree.get(&key(7)).unwrap(), Some(b"v".to_vec()));
}

/// A log buffer that fills while nobody syncs is written out, not synced:
/// the writes reach the device, the device is asked for no sync, and the
/// sync that follows writes only what came after the last write-out (a
/// sector or two) and syncs once. (Until session 46 a full buffer was a
/// whole sync: 151 device syncs in an untar of the Linux tree, 44 now.)
#[test]
fn a_full_log_buffer_is_written_out_without_a_device_sync() {
    let cfg = Config {
        cache_bytes: 64 << 20,
        log_bytes: 8 << 20,
        ..small_nodes()
    };
    let dev: Dev = Arc::new(CountingDevice::new(MemDevice::new(256 << 20)));
    let tree = Tree::create(Box::new(dev.clone()), cfg).unwrap();
    let before = dev.counts();
    // 1,000 batches of 1,000 bytes that do not compress: about 1 MiB of
    // log, eight times the write-out size of an 8 MiB log (1/64 of it),
    // no checkpoint (the log stays under half full) and no eviction.
    let mut rng = common::Rng(46);
    for i in 0..1_000u64 {
        tree.insert(&key(i), &common::incompressible(&mut rng, 1_000))
            .unwrap();
    }
    let filled = dev.counts().since(&before);
    assert_eq!(filled.syncs, 0, "{filled:?}");
    assert!(filled.writes >= 7, "{filled:?}");
    assert!(filled.write_bytes >= 7 * (128 << 10), "{filled:?}");
    tree.sync().unwrap();
    let synced = dev.counts().since(&before);
    let sync = synced.since(&filled);
    assert_eq!(sync.syncs, 1, "{sync:?}");
    assert_eq!(sync.writes, 1, "{sync:?}");
    assert!(sync.write_bytes < 128 << 10, "{sync:?}");
    // Written once: the write-outs and the sync cover the log's bytes, each
    // sector rewritten at most once more where a write-out ended in it.
    let log_bytes = tree.log_bytes_written();
    assert_eq!(synced.write_bytes, log_bytes, "{synced:?}");
    assert!(log_bytes < 1_000 * 1_100 + 16 * 512, "{log_bytes}");
    // The log's own counts (printed at unmount) say the same.
    let (log_syncs, write_outs) = tree.log_syncs_and_write_outs();
    assert_eq!(log_syncs, 1);
    assert_eq!(write_outs, filled.writes);
    drop(tree);
    // What was written out and then synced comes back.
    let tree = Tree::open(Box::new(dev.clone()), 64 << 20).unwrap();
    assert_eq!(count_all(&tree), 1_000);
}
