//! A file written and then given its times, owner and mode, as tar and
//! rsync leave every file they write: the SETATTRs join the writes the
//! daemon still holds, and the file's bytes and attributes reach the engine
//! as one batch. What the kernel was answered is what is stored.

mod common;

use std::fs::{File, FileTimes, Permissions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, SystemTime};

use common::{body, mkfs, mount, Scratch};

/// (size, mode, uid, gid, mtime, ctime) as stat(2) gives them.
fn stat(path: &std::path::Path) -> (u64, u32, u32, u32, (i64, i64), (i64, i64)) {
    let m = std::fs::metadata(path).unwrap();
    (
        m.size(),
        m.mode(),
        m.uid(),
        m.gid(),
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
    )
}

#[test]
fn times_owner_and_mode_after_writes_cost_no_batch_of_their_own() {
    require_fuse!();
    let s = Scratch::new("setattr-after-write");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let tree = m.fs.tree();

    // tar's order: writes of 10 KiB, then utimens, fchown, fchmod, close.
    let path = m.mnt.join("tarred");
    let data = body(25_000, 7);
    let mut f = File::create(&path).unwrap();
    let before = tree.stats().batches;
    for piece in data.chunks(10240) {
        f.write_all(piece).unwrap();
    }
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    f.set_times(FileTimes::new().set_modified(mtime)).unwrap();
    std::os::unix::fs::fchown(&f, Some(0), Some(0)).unwrap();
    f.set_permissions(Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        tree.stats().batches,
        before,
        "the setattrs waited for the writes"
    );
    f.sync_all().unwrap();
    assert_eq!(
        tree.stats().batches,
        before + 1,
        "writes and setattrs in one batch"
    );
    drop(f);
    let answered = stat(&path);
    assert_eq!(answered.0, data.len() as u64);
    assert_eq!(answered.1 & 0o7777, 0o640);
    assert_eq!(answered.4, (1_600_000_000, 123_456_789));

    // A setattr between writes: the writes after it still move the size
    // and the times.
    let path2 = m.mnt.join("between");
    let data2 = body(9_000, 13);
    let mut f = File::create(&path2).unwrap();
    f.write_all(&data2[..4000]).unwrap();
    f.set_permissions(Permissions::from_mode(0o600)).unwrap();
    f.set_times(FileTimes::new().set_modified(mtime)).unwrap();
    f.write_all(&data2[4000..]).unwrap();
    drop(f);
    let answered2 = stat(&path2);
    assert_eq!(answered2.0, data2.len() as u64);
    assert_eq!(answered2.1 & 0o7777, 0o600);
    assert!(
        answered2.4 > (1_600_000_000, 123_456_789),
        "the last write set mtime"
    );
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    assert_eq!(
        stat(&path),
        answered,
        "stored = what the kernel was answered"
    );
    assert_eq!(stat(&path2), answered2);
    assert_eq!(std::fs::read(&path).unwrap(), data);
    assert_eq!(std::fs::read(&path2).unwrap(), data2);
    m.unmount();
}

#[test]
fn setattrs_after_the_close_join_the_writes_too() {
    require_fuse!();
    let s = Scratch::new("setattr-after-close");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let tree = m.fs.tree();

    // rsync's order: create a temporary and set its mode at once (its
    // `do_mkstemp`), write, close, set the times by path, set the mode,
    // rename into place.
    // The name rsync gives its temporary: a dot, the name, six random
    // characters.
    let tmp = m.mnt.join(".synced.q7Lp2x");
    let data = body(12_813, 11);
    let mut f = File::create(&tmp).unwrap();
    let before = tree.stats().batches;
    f.set_permissions(Permissions::from_mode(0o600)).unwrap();
    f.write_all(&data).unwrap();
    drop(f);
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5);
    let g = File::open(&tmp).unwrap();
    g.set_times(FileTimes::new().set_modified(mtime)).unwrap();
    drop(g);
    std::fs::set_permissions(&tmp, Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        tree.stats().batches,
        before,
        "still pending after the close"
    );
    let answered = stat(&tmp);
    assert_eq!(answered.0, data.len() as u64);
    assert_eq!(answered.4, (1_700_000_000, 5));
    assert_eq!(answered.1 & 0o7777, 0o644);
    let path = m.mnt.join("synced");
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(
        tree.stats().batches,
        before + 1,
        "the bytes and attributes went with the rename, at the new name"
    );
    let renamed = stat(&path);
    assert_eq!(renamed.4, answered.4, "a rename changes ctime only");
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    assert_eq!(
        stat(&path),
        renamed,
        "stored = what the kernel was answered"
    );
    assert_eq!(std::fs::read(&path).unwrap(), data);
    m.unmount();
}

#[test]
fn a_rename_carries_the_pending_bytes_whatever_it_does() {
    require_fuse!();
    let s = Scratch::new("rename-carries");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let old = body(30_000, 3);
    std::fs::write(m.mnt.join("kept"), &old).unwrap();
    // Remounted, so that no handle of "kept" is still being released
    // (the kernel sends RELEASE in the background; a rename over a file
    // still open makes it an orphan, and the late RELEASE deletes it in a
    // batch of its own).
    m.unmount();
    let m = mount(&s.image(), &s.mnt(), false);
    let tree = m.fs.tree();
    let write = |name: &str, data: &[u8]| {
        let mut f = File::create(m.mnt.join(name)).unwrap();
        f.write_all(data).unwrap();
    };

    // Replacing a file that exists (rsync updating it).
    let new = body(5_000, 5);
    write(".kept.a1b2c3", &new);
    let before = tree.stats().batches;
    std::fs::rename(m.mnt.join(".kept.a1b2c3"), m.mnt.join("kept")).unwrap();
    assert_eq!(tree.stats().batches, before + 1);
    assert_eq!(std::fs::read(m.mnt.join("kept")).unwrap(), new);

    // A rename that fails (a file onto a directory) still writes the
    // bytes, at the old name.
    std::fs::create_dir(m.mnt.join("dir")).unwrap();
    let stays = body(7_777, 17);
    write("stays", &stays);
    let e = std::fs::rename(m.mnt.join("stays"), m.mnt.join("dir")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR));

    // (A rename onto itself never reaches the daemon: the kernel answers
    // it. `wodfs-fs`'s model test covers it, FsOp::WriteRename.)

    // Into another directory, written at a block-unaligned offset past
    // bytes already stored: the move keeps the stored blocks and the
    // carried ones patch them at the new name.
    let mut f = File::create(m.mnt.join("partial")).unwrap();
    f.write_all(&body(6_000, 23)).unwrap();
    f.sync_all().unwrap();
    f.write_all(&body(3_000, 29)).unwrap();
    drop(f);
    std::fs::rename(m.mnt.join("partial"), m.mnt.join("dir/partial")).unwrap();
    let mut partial = body(6_000, 23);
    partial.extend(body(3_000, 29));
    let answered = stat(&m.mnt.join("dir/partial"));
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    assert_eq!(std::fs::read(m.mnt.join("kept")).unwrap(), new);
    assert_eq!(std::fs::read(m.mnt.join("stays")).unwrap(), stays);
    assert_eq!(std::fs::read(m.mnt.join("dir/partial")).unwrap(), partial);
    assert_eq!(stat(&m.mnt.join("dir/partial")), answered);
    assert!(!m.mnt.join("partial").exists());
    assert!(!m.mnt.join(".kept.a1b2c3").exists());
    m.unmount();
}

#[test]
fn a_setattr_before_any_write_waits_for_the_writes() {
    require_fuse!();
    let s = Scratch::new("setattr-before-write");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let tree = m.fs.tree();
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(1_650_000_000, 77);

    // A mode set on a new empty file, then nothing written: the next
    // request writes it, and the kernel was answered what is stored.
    let alone = m.mnt.join("alone");
    let f = File::create(&alone).unwrap();
    let before = tree.stats().batches;
    f.set_permissions(Permissions::from_mode(0o604)).unwrap();
    assert_eq!(tree.stats().batches, before, "held for the writes");
    drop(f);
    let answered_alone = stat(&alone);
    assert_eq!(answered_alone.1 & 0o7777, 0o604);
    assert_eq!(answered_alone.0, 0);

    // Mode and times set first, then writes that continue from the end:
    // one batch for all of it, at fsync.
    let first = m.mnt.join("first");
    let data = body(20_000, 19);
    let mut f = File::create(&first).unwrap();
    // The CREATE wrote "alone"'s held mode after answering.
    m.settled();
    let before = tree.stats().batches;
    f.set_permissions(Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::fchown(&f, Some(0), Some(0)).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    assert_eq!(
        tree.stats().batches,
        before + 1,
        "setattrs and bytes in one batch"
    );
    drop(f);
    let answered_first = stat(&first);
    assert_eq!(answered_first.0, data.len() as u64);
    assert_eq!(answered_first.1 & 0o7777, 0o640);

    // A write elsewhere than the end does not continue the run: the held
    // attributes are written first, then the write.
    let elsewhere = m.mnt.join("elsewhere");
    std::fs::write(&elsewhere, body(9_000, 31)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&elsewhere)
        .unwrap();
    f.set_times(FileTimes::new().set_modified(mtime)).unwrap();
    f.set_permissions(Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        stat(&elsewhere).4,
        (1_650_000_000, 77),
        "answered from the run"
    );
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(100)).unwrap();
    f.write_all(b"patched").unwrap();
    drop(f);
    let mut want_elsewhere = body(9_000, 31);
    want_elsewhere[100..107].copy_from_slice(b"patched");
    let answered_elsewhere = stat(&elsewhere);
    assert_eq!(answered_elsewhere.1 & 0o7777, 0o600);
    assert!(
        answered_elsewhere.4 > (1_650_000_000, 77),
        "the write set mtime"
    );

    // A setattr that changes the size is not held: truncate after a held
    // mode writes both, in order.
    let cut = m.mnt.join("cut");
    std::fs::write(&cut, body(10_000, 37)).unwrap();
    std::fs::set_permissions(&cut, Permissions::from_mode(0o611)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(3_000)
        .unwrap();
    let answered_cut = stat(&cut);
    assert_eq!((answered_cut.0, answered_cut.1 & 0o7777), (3_000, 0o611));

    // An empty temporary given its mode and times, then renamed (rsync
    // copying an empty file): the attributes ride in the rename's batch.
    let tmp = m.mnt.join(".empty.Zx81qa");
    let f = File::create(&tmp).unwrap();
    let before = tree.stats().batches;
    f.set_permissions(Permissions::from_mode(0o600)).unwrap();
    drop(f);
    let g = File::open(&tmp).unwrap();
    g.set_times(FileTimes::new().set_modified(mtime)).unwrap();
    drop(g);
    std::fs::set_permissions(&tmp, Permissions::from_mode(0o644)).unwrap();
    let empty = m.mnt.join("empty");
    std::fs::rename(&tmp, &empty).unwrap();
    assert_eq!(
        tree.stats().batches,
        before + 1,
        "one batch: attributes and rename"
    );
    let answered_empty = stat(&empty);
    assert_eq!(answered_empty.4, (1_650_000_000, 77));
    assert_eq!(answered_empty.1 & 0o7777, 0o644);

    // A directory's setattr is never held.
    let dir = m.mnt.join("dir");
    std::fs::create_dir(&dir).unwrap();
    let before = tree.stats().batches;
    std::fs::set_permissions(&dir, Permissions::from_mode(0o700)).unwrap();
    assert_eq!(tree.stats().batches, before + 1);
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    assert_eq!(
        stat(&alone),
        answered_alone,
        "stored = what the kernel was answered"
    );
    assert_eq!(stat(&first), answered_first);
    assert_eq!(stat(&elsewhere), answered_elsewhere);
    assert_eq!(stat(&cut), answered_cut);
    assert_eq!(stat(&empty), answered_empty);
    assert_eq!(std::fs::read(&first).unwrap(), data);
    assert_eq!(std::fs::read(&elsewhere).unwrap(), want_elsewhere);
    assert_eq!(std::fs::read(&cut).unwrap(), body(10_000, 37)[..3_000]);
    assert!(std::fs::read(&empty).unwrap().is_empty());
    assert_eq!(stat(&dir).1 & 0o7777, 0o700);
    m.unmount();
}
