//! A stream's unbound values are bound in rounds bounded by bytes as well
//! as by count: 4 KiB file blocks reach the count (8,192) only at 32 MiB,
//! and that much unbound data in dirty leaves went past the dirty budget,
//! so write-back wrote those leaves and binding read them back.

use wodfs_device::MemDevice;
use wodfs_engine::{Config, Op, Tree};

const BLOCK: usize = 4096;

/// A tree with a 48 MiB cache on a 512 MiB memory device: a round of
/// binding is 4 MiB of values (a twelfth of the cache).
fn tree_with_48_mib_cache() -> Tree {
    let cfg = Config {
        cache_bytes: 48 << 20,
        ..Config::default()
    };
    Tree::create(Box::new(MemDevice::new(512 << 20)), cfg).unwrap()
}

#[test]
fn a_stream_of_file_blocks_is_bound_before_a_twelfth_of_the_cache_waits() {
    let tree = tree_with_48_mib_cache();
    let batch_blocks = 256u32;
    let mut most = 0;
    for b in 0..40u32 {
        let ops: Vec<Op> = (0..batch_blocks)
            .map(|i| Op::Insert {
                key: format!("/f/{:08}", b * batch_blocks + i).into_bytes(),
                value: vec![(b ^ i) as u8; BLOCK],
            })
            .collect();
        tree.write(&ops).unwrap();
        most = most.max(tree.unbound_pending());
    }
    // No background thread: the writer binds once the values reach a
    // twelfth of the cache (4 MiB), so at most that plus one batch waits.
    let limit = ((48 << 20) / 12 + BLOCK * batch_blocks as usize) / BLOCK;
    assert!(
        most >= batch_blocks as usize,
        "the stream was not late-bound"
    );
    assert!(
        most <= limit,
        "{most} unbound inserts waited (limit {limit})"
    );
    tree.sync().unwrap();
    assert_eq!(tree.unbound_pending(), 0);
    let last = format!("/f/{:08}", 40 * batch_blocks - 1).into_bytes();
    assert_eq!(
        tree.get(&last).unwrap(),
        Some(vec![(39 ^ 255) as u8; BLOCK])
    );
    tree.verify().unwrap();
}

/// A device whose stream writes take 20 ms each and that records how many
/// were under way at once.
#[derive(Debug)]
struct SlowStreams {
    inner: MemDevice,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    writes: std::sync::atomic::AtomicUsize,
}

impl wodfs_device::Device for SlowStreams {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let n = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(n, SeqCst);
        self.writes.fetch_add(1, SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let r = self.inner.write_at(offset, buf);
        self.now.fetch_sub(1, SeqCst);
        r
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
}

/// A binding pass writes the leaves of a stream several at a time, each
/// encoded while the ones before it are on their way, but never more
/// than four nodes' worth at once (`tree::in_flight`).
#[test]
fn a_binding_pass_keeps_several_leaves_in_flight_and_no_more_than_four() {
    let cfg = Config {
        cache_bytes: 256 << 20,
        ..Config::default()
    };
    let dev = std::sync::Arc::new(SlowStreams {
        inner: MemDevice::new(1 << 30),
        now: Default::default(),
        most: Default::default(),
        writes: Default::default(),
    });
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let batch_blocks = 256u32;
    let batches = 60u32;
    for b in 0..batches {
        let ops: Vec<Op> = (0..batch_blocks)
            .map(|i| Op::Insert {
                key: format!("/f/{:08}", b * batch_blocks + i).into_bytes(),
                value: block_value(b * batch_blocks + i),
            })
            .collect();
        tree.write(&ops).unwrap();
    }
    tree.sync().unwrap();
    assert_eq!(tree.unbound_pending(), 0);
    let writes = dev.writes.load(std::sync::atomic::Ordering::SeqCst);
    let most = dev.most.load(std::sync::atomic::Ordering::SeqCst);
    // 60 MiB of blocks fill about fifteen 4 MiB leaves.
    assert!(writes >= 8, "{writes} stream writes");
    assert!((2..=4).contains(&most), "{most} stream writes at once");
    for i in (0..batches * batch_blocks).step_by(997) {
        let key = format!("/f/{i:08}").into_bytes();
        assert_eq!(tree.get(&key).unwrap(), Some(block_value(i)));
    }
    tree.verify().unwrap();
}

/// Block `i`'s bytes: different per block, so a leaf written from the
/// wrong image shows.
fn block_value(i: u32) -> Vec<u8> {
    let mut v = vec![0u8; BLOCK];
    for (j, chunk) in v.chunks_mut(4).enumerate() {
        chunk.copy_from_slice(&(i ^ (j as u32).wrapping_mul(2_654_435_761)).to_le_bytes());
    }
    v
}

/// What a stream's deferred writes still owe after `Tree::catch_up_asking`
/// (a daemon wakes its back-pressure worker only for that): nothing while
/// the unbound values are under a round, the binding itself once they
/// reach one and no background thread runs to be asked for it.
#[test]
fn a_streams_writes_owe_a_catch_up_only_once_a_round_waits() {
    let tree = tree_with_48_mib_cache();
    let batch = |b: u32| -> Vec<Op> {
        (0..256u32)
            .map(|i| Op::Insert {
                key: format!("/f/{:08}", b * 256 + i).into_bytes(),
                value: vec![(b ^ i) as u8; BLOCK],
            })
            .collect()
    };
    // A round is a twelfth of the cache: 4 MiB, four batches.
    let mut owed_at = None;
    for b in 0..8u32 {
        let owed = tree.write_deferred(&batch(b)).unwrap();
        assert!(owed.may_wait(), "batch {b} was not late-bound");
        if tree.catch_up_asking(owed) {
            owed_at = Some(b);
            break;
        }
    }
    assert_eq!(owed_at, Some(3), "the round is owed at its fourth batch");
    assert_eq!(tree.unbound_pending(), 4 * 256, "asking bound nothing");
    tree.catch_up(tree.write_deferred(&batch(4)).unwrap())
        .unwrap();
    let left = tree.unbound_pending();
    assert!(left < 2 * 256, "the catch-up left {left} unbound");
    tree.sync().unwrap();
    let last = format!("/f/{:08}", 5 * 256 - 1).into_bytes();
    assert_eq!(tree.get(&last).unwrap(), Some(vec![(4 ^ 255) as u8; BLOCK]));
    tree.verify().unwrap();
}
