//! Regressions found by running xfstests' `generic` group on a mount
//! (conformance/XFSTESTS-2026-11-21.md), each named after the test that
//! found it, reproduced on the core without FUSE.

mod common;

use std::sync::Arc;

use common::{file, new_fs, root, small_config};
use wodfs_device::MemDevice;
use wodfs_fs::{falloc, Fs, FsOptions, KillPriv, Kind, NewNode, RenameMode, XattrSet};

/// generic/003: with `strictatime` every read updates atime, not only the
/// first one after a change (relatime).
#[test]
fn strictatime_updates_atime_on_every_read() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), small_config(), 0, 0).unwrap();
    let f = file(&fs, "f");
    fs.write(&f, 0, b"abc", KillPriv::Keep).unwrap();
    fs.checkpoint().unwrap();
    drop(fs);
    let opts = FsOptions {
        strictatime: true,
        ..FsOptions::default()
    };
    let fs = Fs::open(Box::new(dev), 4 << 20, opts).unwrap();
    let mut last = fs.getattr(&f).unwrap().atime;
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        fs.read(&f, 0, 3).unwrap();
        let now = fs.getattr(&f).unwrap().atime;
        assert!(now > last, "{now:?} after {last:?}");
        last = now;
    }
}

/// The default (relatime) updates atime once after a change, then not.
#[test]
fn relatime_updates_atime_once() {
    let (_dev, fs) = new_fs(64 << 20);
    let f = file(&fs, "f");
    fs.write(&f, 0, b"abc", KillPriv::Keep).unwrap();
    fs.read(&f, 0, 3).unwrap();
    let first = fs.getattr(&f).unwrap().atime;
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs.read(&f, 0, 3).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().atime, first);
}

/// generic/213: an allocating fallocate larger than the free space is
/// ENOSPC, not a success that a later write cannot honour.
#[test]
fn fallocate_past_the_free_space_is_enospc() {
    let (_dev, fs) = new_fs(64 << 20);
    let f = file(&fs, "f");
    let free = fs.tree().space().free_bytes;
    let e = fs.fallocate(&f, 0, free * 2, 0).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    let e = fs
        .fallocate(&f, 0, free * 2, falloc::KEEP_SIZE)
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    assert_eq!(
        fs.getattr(&f).unwrap().size,
        0,
        "a refused call changes nothing"
    );
    fs.fallocate(&f, 0, free / 4, 0).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, free / 4);
    // Punching or zeroing never needs space.
    let big = free * 2;
    fs.fallocate(&f, 0, big, falloc::PUNCH_HOLE | falloc::KEEP_SIZE)
        .unwrap();
}

/// generic/035: a removed directory reports link count 0 to whoever still
/// has it open (the FUSE adapter answers `fstat` with these attributes).
#[test]
fn removals_report_the_attributes_left_behind() {
    let (_dev, fs) = new_fs(64 << 20);
    let dir = NewNode::new(Kind::Dir, 0o755);
    fs.make(&root(), b"a", dir.clone()).unwrap();
    fs.make(&root(), b"b", dir.clone()).unwrap();
    let a = fs.lookup(&root(), b"a").unwrap().0;
    let b = fs.lookup(&root(), b"b").unwrap().0;
    let r = fs.rmdir(&root(), b"a").unwrap();
    assert_eq!((r.ino, r.attr.ino, r.attr.nlink), (a.ino, a.ino, 0));
    assert_eq!(r.attr.kind, Kind::Dir);
    fs.make(&root(), b"c", dir).unwrap();
    let done = fs
        .rename(&root(), b"c", &root(), b"b", RenameMode::Replace)
        .unwrap();
    let rep = done.replaced.expect("b was replaced");
    assert_eq!((rep.attr.ino, rep.attr.nlink), (b.ino, 0));
    // A file with a second name keeps one link.
    let f = file(&fs, "f");
    fs.link(&f, &root(), b"g").unwrap();
    let r = fs.unlink(&root(), b"f").unwrap();
    assert!(r.inode_loc);
    assert_eq!(r.attr.nlink, 1);
}

/// generic/099, 319, 375, 444: POSIX ACLs are refused, since nothing
/// would enforce a stored one; other xattrs are unaffected.
#[test]
fn posix_acl_xattrs_are_refused() {
    let (_dev, fs) = new_fs(64 << 20);
    let f = file(&fs, "f");
    for name in [&b"system.posix_acl_access"[..], b"system.posix_acl_default"] {
        let e = fs
            .set_xattr(&f, name, &[2, 0, 0, 0], XattrSet::Upsert)
            .unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
    }
    fs.set_xattr(&f, b"user.x", b"1", XattrSet::Upsert).unwrap();
    assert_eq!(fs.list_xattr(&f).unwrap(), vec![b"user.x".to_vec()]);
}

/// generic/683-685 (and 355 for writes): a modification by an
/// unprivileged caller clears set-user-ID, and set-group-ID when the file
/// is group-executable or the caller is outside the file's group (Linux
/// 6.2+); a privileged caller keeps both.
#[test]
fn unprivileged_modification_clears_suid_and_sgid() {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), small_config(), 0, 0).unwrap();
    let f = file(&fs, "f");
    let gid = fs.getattr(&f).unwrap().gid;
    let member = KillPriv::Caller { pid: 0, fsgid: gid };
    let outsider = KillPriv::Caller {
        pid: 0,
        fsgid: gid + 1,
    };
    let mode_of = |fs: &Fs| fs.getattr(&f).unwrap().perm & 0o7777;
    let chmod = |mode| {
        let set = wodfs_fs::SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        fs.setattr(&f, &set).unwrap();
    };
    type Modify<'a> = Box<dyn Fn(KillPriv) + 'a>;
    let modifications: [(&str, Modify); 3] = [
        (
            "fallocate",
            Box::new(|k| drop(fs.fallocate_as(&f, 0, 8192, 0, k).unwrap())),
        ),
        (
            "write",
            Box::new(|k| drop(fs.write(&f, 0, b"x", k).unwrap())),
        ),
        (
            "truncate",
            Box::new(|k| {
                let set = wodfs_fs::SetAttr {
                    size: Some(1),
                    kill_priv: k,
                    ..Default::default()
                };
                fs.setattr(&f, &set).unwrap();
            }),
        ),
    ];
    for (what, modify) in &modifications {
        for (mode, by, expect) in [
            (0o6755, KillPriv::Keep, 0o6755),
            (0o6755, member, 0o755),
            (0o6666, member, 0o2666),
            (0o6666, outsider, 0o666),
            (0o6766, outsider, 0o766),
            (0o2676, member, 0o676),
        ] {
            chmod(mode);
            modify(by);
            assert_eq!(mode_of(&fs), expect, "{what} of {mode:o} by {by:?}");
        }
    }
}
