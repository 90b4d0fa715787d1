//! Access times noted by reads and written together (`lazy_atime`): seen
//! at once by every attribute read, stored before any other change, by
//! fsync and by the checkpoint, and in one batch for many reads.

mod common;

use std::sync::Arc;

use common::{file, root, small_config};
use wodfs_device::{Device, MemDevice};
use wodfs_fs::{Fs, FsOptions, FsPath, KillPriv, RenameMode, SetAttr, Timespec};

/// A file system with files `f0..n` of a few bytes each, checkpointed and
/// reopened, so that every file's first read moves its atime (relatime).
fn with_files(n: usize) -> (Arc<dyn Device>, Fs) {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(64 << 20));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), small_config(), 0, 0).unwrap();
    for i in 0..n {
        let f = file(&fs, &format!("f{i}"));
        fs.write(&f, 0, b"abc", KillPriv::Keep).unwrap();
    }
    fs.checkpoint().unwrap();
    drop(fs);
    (Arc::clone(&dev), reopen(&dev))
}

fn reopen(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(Box::new(Arc::clone(dev)), 4 << 20, FsOptions::default()).unwrap()
}

fn atime_of(fs: &Fs, name: &str) -> Timespec {
    fs.lookup(&root(), name.as_bytes()).unwrap().0.atime
}

#[test]
fn a_read_moves_atime_at_once_without_a_batch_of_its_own() {
    let (_dev, fs) = with_files(1);
    let f = fs.lookup(&root(), b"f0").unwrap().1;
    let before = fs.getattr(&f).unwrap().atime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    let batches = fs.tree().stats().batches;
    fs.read(&f, 0, 3).unwrap();
    assert_eq!(fs.tree().stats().batches, batches, "the read wrote nothing");
    let after = fs.getattr(&f).unwrap().atime;
    assert!(after > before, "{after:?} after {before:?}");
    assert_eq!(atime_of(&fs, "f0"), after, "a lookup sees it");
    let listed = fs.readdir(&FsPath::root(), None, 10).unwrap();
    assert_eq!(listed[0].attr.atime, after, "a listing sees it");
    // Relatime: a second read moves it no further.
    fs.read(&f, 0, 3).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().atime, after);
}

#[test]
fn fsync_and_the_checkpoint_store_the_atimes() {
    let (dev, fs) = with_files(2);
    let f0 = fs.lookup(&root(), b"f0").unwrap().1;
    fs.read(&f0, 0, 3).unwrap();
    let t0 = fs.getattr(&f0).unwrap().atime;
    fs.fsync().unwrap();
    // A crash after the fsync: the log replays it.
    let crashed = reopen(&dev);
    assert_eq!(atime_of(&crashed, "f0"), t0);
    drop(crashed);

    let (dev, fs) = with_files(2);
    let f1 = fs.lookup(&root(), b"f1").unwrap().1;
    fs.read(&f1, 0, 3).unwrap();
    let t1 = fs.getattr(&f1).unwrap().atime;
    fs.checkpoint().unwrap();
    drop(fs);
    assert_eq!(atime_of(&reopen(&dev), "f1"), t1);
}

#[test]
fn a_change_after_a_read_keeps_the_atime_and_the_change() {
    let (dev, fs) = with_files(3);
    let lookup = |name: &[u8]| fs.lookup(&root(), name).unwrap().1;
    let (f0, f1, f2) = (lookup(b"f0"), lookup(b"f1"), lookup(b"f2"));
    for f in [&f0, &f1, &f2] {
        fs.read(f, 0, 3).unwrap();
    }
    let (t0, t1) = (
        fs.getattr(&f0).unwrap().atime,
        fs.getattr(&f1).unwrap().atime,
    );
    // A chmod of one, a rename of another, an unlink of the third.
    let chmod = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    fs.setattr(&f0, &chmod).unwrap();
    fs.rename(
        &FsPath::root(),
        b"f1",
        &FsPath::root(),
        b"g1",
        RenameMode::Replace,
    )
    .unwrap();
    fs.unlink(&FsPath::root(), b"f2").unwrap();
    fs.fsync().unwrap();
    let fs = reopen(&dev);
    let (a0, _) = fs.lookup(&root(), b"f0").unwrap();
    assert_eq!((a0.atime, a0.perm & 0o777), (t0, 0o600));
    assert_eq!(atime_of(&fs, "g1"), t1);
    assert!(fs.lookup(&root(), b"f2").is_err(), "the unlink stands");
    assert!(fs.lookup(&root(), b"f1").is_err(), "the rename stands");
    fs.check_attr_cache().unwrap();
}

#[test]
fn many_reads_write_their_atimes_in_few_batches() {
    let (dev, fs) = with_files(300);
    let batches = fs.tree().stats().batches;
    let mut moved = Vec::new();
    for i in 0..300 {
        let f = fs.lookup(&root(), format!("f{i}").as_bytes()).unwrap().1;
        fs.read(&f, 0, 3).unwrap();
        moved.push(fs.getattr(&f).unwrap().atime);
    }
    fs.fsync().unwrap();
    // One batch, or a few more if the test ran past a note's age limit.
    let written = fs.tree().stats().batches - batches;
    assert!(
        (1..=10).contains(&written),
        "{written} batches for 300 reads"
    );
    let fs = reopen(&dev);
    for (i, t) in moved.iter().enumerate() {
        assert_eq!(atime_of(&fs, &format!("f{i}")), *t, "f{i}");
    }
}
