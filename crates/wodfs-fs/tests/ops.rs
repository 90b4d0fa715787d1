//! Targeted tests of single operations: blind writes, truncate, holes,
//! fallocate, SEEK_DATA/SEEK_HOLE, readdir positions, orphans, path
//! limits, statfs.

mod common;

use std::sync::Arc;

use common::{file, new_fs, reopen, root};
use wodfs_device::{Device, MemDevice};
use wodfs_engine::Config;
use wodfs_fs::{
    falloc, Fs, FsPath, KillPriv, Kind, Loc, NewNode, RenameMode, Seek, SetAttr, XattrSet,
};

#[test]
fn small_writes_into_a_cold_file_read_no_blocks() {
    let dev = Arc::new(MemDevice::new(512 << 20));
    let cfg = Config {
        cache_bytes: 64 << 20,
        ..Config::default()
    };
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), cfg, 0, 0).unwrap();
    let f = file(&fs, "big");
    let chunk = vec![0xabu8; 1 << 20];
    for i in 0..32u64 {
        fs.write(&f, i << 20, &chunk, KillPriv::Keep).unwrap();
    }
    fs.checkpoint().unwrap();
    drop(fs);
    let fs = Fs::open(Box::new(Arc::clone(&dev)), 64 << 20, Default::default()).unwrap();
    let f = fs.lookup(&root(), b"big").unwrap().1;
    // The first write reads the file's attributes (one leaf path).
    fs.write(&f, 12345, b"abcd", KillPriv::Keep).unwrap();
    let before = fs.tree().stats();
    let mut x = 1u64;
    for _ in 0..2000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 20) % ((32 << 20) - 4);
        fs.write(&f, off, b"wxyz", KillPriv::Keep).unwrap();
    }
    let after = fs.tree().stats();
    assert_eq!(
        (after.partition_reads + after.node_reads + after.header_reads)
            - (before.partition_reads + before.node_reads + before.header_reads),
        0,
        "4-byte writes must not read blocks"
    );
    assert_eq!(fs.read(&f, 0, 4).unwrap(), vec![0xab; 4]);
}

#[test]
fn truncate_cuts_the_boundary_block_and_extends_with_zeros() {
    let (_, fs) = new_fs(64 << 20);
    let f = file(&fs, "t");
    fs.write(&f, 0, &[0xff; 10000], KillPriv::Keep).unwrap();
    let set = |n| SetAttr {
        size: Some(n),
        ..SetAttr::default()
    };
    fs.setattr(&f, &set(5000)).unwrap();
    fs.setattr(&f, &set(12000)).unwrap();
    let data = fs.read(&f, 0, 20000).unwrap();
    assert_eq!(data.len(), 12000);
    assert!(data[..5000].iter().all(|&b| b == 0xff));
    assert!(
        data[5000..].iter().all(|&b| b == 0),
        "stale bytes after truncate"
    );
    assert!(fs.fsck().unwrap().errors.is_empty());
}

#[test]
fn holes_fallocate_and_seek() {
    let (_, fs) = new_fs(64 << 20);
    let f = file(&fs, "h");
    fs.write(&f, 0, &[1; 4096], KillPriv::Keep).unwrap();
    fs.write(&f, 5 * 4096, &[2; 100], KillPriv::Keep).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 5 * 4096 + 100);
    assert_eq!(fs.seek(&f, 0, Seek::Data).unwrap(), 0);
    assert_eq!(fs.seek(&f, 0, Seek::Hole).unwrap(), 4096);
    assert_eq!(fs.seek(&f, 4096, Seek::Data).unwrap(), 5 * 4096);
    assert_eq!(fs.seek(&f, 5 * 4096, Seek::Hole).unwrap(), 5 * 4096 + 100);
    assert_eq!(
        fs.seek(&f, 1 << 30, Seek::Data).unwrap_err().errno(),
        libc::ENXIO
    );
    // Punch the first block away (and part of the last).
    fs.fallocate(&f, 0, 4096, falloc::PUNCH_HOLE | falloc::KEEP_SIZE)
        .unwrap();
    fs.fallocate(
        &f,
        5 * 4096 + 10,
        10,
        falloc::PUNCH_HOLE | falloc::KEEP_SIZE,
    )
    .unwrap();
    assert_eq!(fs.seek(&f, 0, Seek::Data).unwrap(), 5 * 4096);
    let tail = fs.read(&f, 5 * 4096, 100).unwrap();
    assert_eq!(&tail[..10], &[2; 10]);
    assert_eq!(&tail[10..20], &[0; 10]);
    assert_eq!(&tail[20..], &[2; 80]);
    assert_eq!(fs.read(&f, 0, 4096).unwrap(), vec![0; 4096]);
    // Mode 0 extends; KEEP_SIZE does not.
    fs.fallocate(&f, 0, 1 << 20, 0).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 1 << 20);
    fs.fallocate(&f, 0, 2 << 20, falloc::KEEP_SIZE).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 1 << 20);
    // Zero range beyond the end grows the file.
    fs.fallocate(&f, 0, 3 << 20, falloc::ZERO_RANGE).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 3 << 20);
    assert_eq!(fs.read(&f, 5 * 4096, 100).unwrap(), vec![0; 100]);
    // Anything else is refused, never faked.
    for mode in [0x08, 0x20, 0x40, falloc::PUNCH_HOLE] {
        assert_eq!(
            fs.fallocate(&f, 0, 10, mode).unwrap_err().errno(),
            libc::EOPNOTSUPP,
            "{mode:#x}"
        );
    }
    assert!(fs.fsck().unwrap().errors.is_empty());
}

#[test]
fn readdir_resumes_after_a_name_while_the_directory_changes() {
    let (_, fs) = new_fs(64 << 20);
    for i in 0..100 {
        file(&fs, &format!("f{i:03}"));
    }
    let first = fs.readdir(&root(), None, 10).unwrap();
    assert_eq!(first.len(), 10);
    let last = first.last().unwrap().name.clone();
    // Remove the resume name itself and some later ones; add new ones.
    fs.unlink(&root(), &last).unwrap();
    fs.unlink(&root(), b"f050").unwrap();
    file(&fs, "f0505");
    file(&fs, "a-before");
    let rest = fs.readdir(&root(), Some(&last), usize::MAX).unwrap();
    let mut names: Vec<Vec<u8>> = first.iter().map(|e| e.name.clone()).collect();
    names.extend(rest.iter().map(|e| e.name.clone()));
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "an entry was returned twice");
    for i in 0..100 {
        let n = format!("f{i:03}").into_bytes();
        if n != b"f050" && n != last {
            assert!(
                names.contains(&n),
                "{} missing",
                String::from_utf8_lossy(&n)
            );
        }
    }
    assert!(names.contains(&b"f0505".to_vec()));
}

#[test]
fn open_unlinked_files_live_until_release_or_reopen() {
    let (mem, fs) = new_fs(64 << 20);
    let dev: Arc<dyn Device> = mem;
    let f = file(&fs, "o");
    fs.write(&f, 0, b"still here", KillPriv::Keep).unwrap();
    let ino = fs.getattr(&f).unwrap().ino;
    fs.open_file(ino);
    let removed = fs.unlink(&root(), b"o").unwrap();
    assert!(removed.inode_loc);
    let orphan = Loc::Inode(ino);
    assert_eq!(fs.read(&orphan, 0, 100).unwrap(), b"still here");
    fs.write(&orphan, 0, b"STILL", KillPriv::Keep).unwrap();
    assert_eq!(fs.read(&orphan, 0, 100).unwrap(), b"STILL here");
    assert_eq!(fs.fsck().unwrap().orphans, 1);
    // A crash (reopen without release) removes the orphan.
    fs.checkpoint().unwrap();
    drop(fs);
    let fs = reopen(&dev);
    assert_eq!(fs.getattr(&orphan).unwrap_err().errno(), libc::ENOENT);
    let r = fs.fsck().unwrap();
    assert!(r.errors.is_empty() && r.orphans == 0, "{r:?}");
    // The last release removes an orphan too.
    let g = file(&fs, "g");
    let gi = fs.getattr(&g).unwrap().ino;
    fs.open_file(gi);
    fs.unlink(&root(), b"g").unwrap();
    fs.release_file(gi).unwrap();
    assert_eq!(
        fs.getattr(&Loc::Inode(gi)).unwrap_err().errno(),
        libc::ENOENT
    );
    assert!(fs.fsck().unwrap().errors.is_empty());
}

#[test]
fn a_rename_that_pushes_a_descendant_past_4096_bytes_is_refused() {
    let (_, fs) = new_fs(64 << 20);
    let name = "n".repeat(200);
    let mut dir = FsPath::root();
    fs.make(&dir, b"d", NewNode::new(Kind::Dir, 0o755)).unwrap();
    dir = dir.join(b"d").unwrap();
    let top = dir.clone();
    while dir.len_bytes() + 201 <= 4096 {
        fs.make(&dir, name.as_bytes(), NewNode::new(Kind::Dir, 0o755))
            .unwrap();
        dir = dir.join(name.as_bytes()).unwrap();
    }
    let longer = "x".repeat(150);
    let e = fs
        .rename(
            &root(),
            b"d",
            &root(),
            longer.as_bytes(),
            RenameMode::Replace,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
    fs.rename(&root(), b"d", &root(), b"e", RenameMode::Replace)
        .unwrap();
    assert!(fs.resolve(&top).is_err());
    assert!(fs.fsck().unwrap().errors.is_empty());
}

#[test]
fn statfs_reports_the_engine_space() {
    // Space freed by unlink shows up only once the range delete has been
    // flushed down to the leaves (the engine keeps it buffered until
    // then); this test checks the numbers are real, not the timing.
    let (_, fs) = new_fs(64 << 20);
    let empty = fs.statfs();
    assert!(empty.blocks > 10_000 && empty.blocks <= (64 << 20) / 4096);
    let f = file(&fs, "big");
    // Incompressible bytes, so the nodes really take the space.
    let mut x = 7u64;
    let data: Vec<u8> = (0..8 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    fs.write(&f, 0, &data, KillPriv::Keep).unwrap();
    fs.checkpoint().unwrap();
    let full = fs.statfs();
    assert!(
        full.blocks_free + 2000 < empty.blocks_free,
        "{empty:?} -> {full:?}"
    );
}

/// chmod and utimes patch the bytes of the attribute record they change
/// instead of rewriting it: the log grows by much less than a whole
/// record per call (TableFS's cold chmod/utime phase), and the result
/// survives a log replay and a checkpoint.
#[test]
fn chmod_and_utimes_log_patches_not_whole_records() {
    use wodfs_fs::SetTime;
    let (dev, fs) = new_fs(64 << 20);
    let f = file(&fs, "a-file-name-of-some-length");
    fs.fsync().unwrap();
    let whole = fs.getattr(&f).unwrap().encode().len() as u64;
    let key = f.meta_key().len() as u64;
    let before = fs.tree().log_bytes_written();
    let n = 1000u64;
    for i in 0..n {
        let set = if i % 2 == 0 {
            SetAttr {
                mode: Some(0o600 | (i as u32 & 0o77)),
                ..SetAttr::default()
            }
        } else {
            SetAttr {
                atime: Some(SetTime::Now),
                mtime: Some(SetTime::Now),
                ..SetAttr::default()
            }
        };
        fs.setattr(&f, &set).unwrap();
    }
    fs.fsync().unwrap();
    let per_call = (fs.tree().log_bytes_written() - before) / n;
    // A record rewrite costs the frame (16), the batch and op headers,
    // the key and the whole record; the patches save at least a quarter
    // (a third measured: a chmod is two patches, perm and ctime, each
    // with its own copy of the key).
    let rewrite = 16 + 4 + key + whole;
    assert!(
        per_call * 4 <= rewrite * 3,
        "{per_call} log bytes per call; a whole-record rewrite is {rewrite}"
    );
    let want = fs.getattr(&f).unwrap();
    assert_eq!(want.perm, 0o600 | (998 & 0o77));
    // Replayed from the log, then from a checkpoint.
    let dev: Arc<dyn Device> = dev;
    drop(fs);
    let fs = reopen(&dev);
    let f = fs.lookup(&root(), b"a-file-name-of-some-length").unwrap().1;
    assert_eq!(fs.getattr(&f).unwrap(), want);
    fs.checkpoint().unwrap();
    drop(fs);
    let fs = reopen(&dev);
    let f = fs.lookup(&root(), b"a-file-name-of-some-length").unwrap().1;
    assert_eq!(fs.getattr(&f).unwrap(), want);
}

/// Range deletes an operation puts into the tree.
fn range_deletes_of(fs: &Fs, op: impl FnOnce()) -> u64 {
    let before = fs.tree().stats().range_deletes;
    op();
    fs.tree().stats().range_deletes - before
}

#[test]
fn unlinking_a_small_file_without_xattrs_needs_no_range_delete() {
    let (_, fs) = new_fs(64 << 20);
    let write = |name: &str, len: usize| {
        let f = file(&fs, name);
        fs.write(&f, 0, &vec![1u8; len], KillPriv::Keep).unwrap();
        f
    };
    write("small", 10_000);
    let unlink =
        |name: &str| range_deletes_of(&fs, || drop(fs.unlink(&root(), name.as_bytes()).unwrap()));
    assert_eq!(unlink("small"), 0, "three blocks: point deletes");
    let tagged = write("tagged", 10_000);
    fs.set_xattr(&tagged, b"user.a", b"1", XattrSet::Upsert)
        .unwrap();
    fs.remove_xattr(&tagged, b"user.a").unwrap();
    assert_eq!(
        unlink("tagged"),
        1,
        "once it had an xattr, its xattr range goes"
    );
    write("big", 17 * 4096);
    assert_eq!(unlink("big"), 1, "17 blocks: one range delete");
    write("empty", 0);
    assert_eq!(unlink("empty"), 0);
    // A renamed file: its three own-key moves find their destinations
    // empty (no range delete), and the moved keys go one by one.
    write("old", 10_000);
    let renamed = range_deletes_of(&fs, || {
        fs.rename(&root(), b"old", &root(), b"new", RenameMode::Replace)
            .unwrap();
    });
    assert_eq!(renamed, 0);
    assert_eq!(
        fs.read(&fs.lookup(&root(), b"new").unwrap().1, 0, 20_000)
            .unwrap(),
        vec![1u8; 10_000]
    );
    // Over an existing file of 17 blocks: its data range is deleted.
    let older = write("older", 17 * 4096);
    fs.write(&older, 0, &[2u8; 10], KillPriv::Keep).unwrap();
    let replaced = range_deletes_of(&fs, || {
        fs.rename(&root(), b"new", &root(), b"older", RenameMode::Replace)
            .unwrap();
    });
    assert!(replaced >= 1, "the replaced file's keys must go");
    assert_eq!(
        fs.read(&fs.lookup(&root(), b"older").unwrap().1, 0, 100_000)
            .unwrap(),
        vec![1u8; 10_000]
    );
    assert!(fs.fsck().unwrap().errors.is_empty());
}

/// A file read from start to end in pieces, the way the kernel's
/// read-ahead asks (the engine reads the leaves after each piece ahead),
/// reads the right bytes, holes and short tail included, and reads each
/// leaf of the file once; a large read elsewhere in the file starts no
/// read-ahead.
#[test]
fn a_sequential_reader_reads_each_leaf_once_and_the_right_bytes() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(256 << 20));
    let cfg = Config {
        node_bytes: 256 << 10,
        partition_bytes: 16 << 10,
        cache_bytes: 64 << 20,
        ..Config::default()
    };
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), cfg, 0, 0).unwrap();
    let f = file(&fs, "seq");
    let mut want = vec![0u8; (6 << 20) + 1234];
    for (i, b) in want.iter_mut().enumerate() {
        *b = (i as u64).wrapping_mul(2654435761).to_le_bytes()[3] | 1;
    }
    // A hole of 40 blocks and a block written only in part.
    want[(2 << 20)..(2 << 20) + 40 * 4096].fill(0);
    want[(3 << 20) + 100..(3 << 20) + 4096].fill(0);
    fs.write(&f, 0, &want[..2 << 20], KillPriv::Keep).unwrap();
    let rest = (2 << 20) + 40 * 4096;
    fs.write(
        &f,
        rest as u64,
        &want[rest..(3 << 20) + 100],
        KillPriv::Keep,
    )
    .unwrap();
    fs.write(
        &f,
        (3 << 20) + 4096,
        &want[(3 << 20) + 4096..],
        KillPriv::Keep,
    )
    .unwrap();
    fs.checkpoint().unwrap();
    drop(fs);

    let piece = 128 << 10;
    let cold = || {
        // A cache that holds the leaves read ahead until the reader gets
        // there (a small one may evict them first, and they are read again).
        let fs = Fs::open(Box::new(Arc::clone(&dev)), 64 << 20, Default::default()).unwrap();
        let f = fs.lookup(&root(), b"seq").unwrap().1;
        (fs, f)
    };
    // A cold read of the whole file in one piece: every leaf once.
    let (fs, f) = cold();
    assert!(fs.read(&f, 0, want.len() + 10).unwrap() == want);
    let leaves = fs.tree().stats().node_reads;
    assert!(leaves >= 8, "{leaves} leaves");
    drop(fs);

    let (fs, f) = cold();
    let mut at = 0;
    while at < want.len() {
        let got = fs.read(&f, at as u64, piece).unwrap();
        let end = want.len().min(at + piece);
        assert!(got == want[at..end], "piece at {at}");
        at = end;
    }
    assert_eq!(fs.tree().stats().node_reads, leaves);
    drop(fs);

    // Two large reads, neither at the start nor where another ended: the
    // leaves they cover (at most two each) and no more, even given time.
    let (fs, f) = cold();
    let opened = fs.tree().stats().node_reads;
    let start = 4 << 20;
    assert!(fs.read(&f, start as u64, piece).unwrap() == want[start..start + piece]);
    assert!(fs.read(&f, 1 << 20, piece).unwrap() == want[1 << 20..(1 << 20) + piece]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let read = fs.tree().stats().node_reads - opened;
    assert!((2..=4).contains(&read), "{read} leaves read");
}

/// Nodes, partitions and buffer pieces read from the device so far.
fn device_reads(fs: &Fs) -> u64 {
    let s = fs.tree().stats();
    s.header_reads + s.partition_reads + s.node_reads + s.segment_reads
}

#[test]
fn a_cold_getxattr_of_a_file_that_never_had_one_reads_nothing_more() {
    // Small nodes: the attribute records fill several leaves, and the
    // xattr keys (after every attribute key) are in another leaf than an
    // early name's record.
    let (dev, fs) = new_fs(256 << 20);
    for i in 0..3000 {
        let f = file(&fs, &format!("f{i:04}"));
        fs.write(&f, 0, b"x", KillPriv::Keep).unwrap();
    }
    let tagged = fs.lookup(&root(), b"f0042").unwrap().1;
    fs.set_xattr(&tagged, b"user.a", b"1", XattrSet::Upsert)
        .unwrap();
    fs.checkpoint().unwrap();
    drop(fs);
    let fs = Fs::open(Box::new(Arc::clone(&dev)), 4 << 20, Default::default()).unwrap();
    let plain = fs.lookup(&root(), b"f0100").unwrap().1;
    let before = device_reads(&fs);
    let e = fs.get_xattr(&plain, b"security.capability").unwrap_err();
    assert_eq!(e.errno(), libc::ENODATA);
    assert!(fs.list_xattr(&plain).unwrap().is_empty());
    assert_eq!(device_reads(&fs), before, "answered from the cached record");
    let tagged = fs.lookup(&root(), b"f0042").unwrap().1;
    assert_eq!(fs.get_xattr(&tagged, b"user.a").unwrap(), b"1");
    assert_eq!(fs.list_xattr(&tagged).unwrap(), vec![b"user.a".to_vec()]);
    assert!(
        device_reads(&fs) > before,
        "a file with an xattr reads its keys"
    );
}
