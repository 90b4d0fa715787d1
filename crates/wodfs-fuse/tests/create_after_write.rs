//! A file written and then the next one created, as tar and git's
//! checkout do for every file. A CREATE is answered first and the first
//! file's bytes, still held by the daemon, are written right after it,
//! before the next request; a MKDIR, MKNOD or SYMLINK carries them into
//! its batch, ahead of the new name. What a remount shows is what was
//! written, whether the creation succeeded or failed.

mod common;

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{body, mkfs, mount, Scratch};

#[test]
fn the_next_creation_carries_the_written_file() {
    require_fuse!();
    let s = Scratch::new("create-after-write");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let tree = m.fs.tree();
    std::fs::create_dir(m.mnt.join("d")).unwrap();

    // tar's order: create, write in 10 KiB pieces, set the mode, close;
    // then the next file.
    let first = body(23_000, 7);
    let mut f = File::create(m.mnt.join("d/first")).unwrap();
    for piece in first.chunks(10240) {
        f.write_all(piece).unwrap();
    }
    f.set_permissions(Permissions::from_mode(0o640)).unwrap();
    drop(f);
    let answered = std::fs::metadata(m.mnt.join("d/first")).unwrap();
    let before = tree.stats().batches;
    let mut g = File::create(m.mnt.join("d/second")).unwrap();
    m.settled();
    assert_eq!(
        tree.stats().batches,
        before + 2,
        "the second's creation, then the first file's bytes"
    );

    // A directory, a symlink and a device node carry them in their batch.
    g.write_all(&body(5_000, 11)).unwrap();
    drop(g);
    let before = tree.stats().batches;
    std::fs::create_dir(m.mnt.join("d/sub")).unwrap();
    assert_eq!(tree.stats().batches, before + 1);
    std::fs::write(m.mnt.join("d/sub/third"), body(3_000, 13)).unwrap();
    let before = tree.stats().batches;
    std::os::unix::fs::symlink("third", m.mnt.join("d/sub/link")).unwrap();
    assert_eq!(tree.stats().batches, before + 1);

    // A creation that fails (the name exists) still writes the bytes.
    std::fs::write(m.mnt.join("d/fourth"), body(8_000, 17)).unwrap();
    let e = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(m.mnt.join("d/second"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let e = std::fs::create_dir(m.mnt.join("d/sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));

    // Two files written at once: the creation, then both runs.
    let mut a = File::create(m.mnt.join("d/a")).unwrap();
    let mut b = File::create(m.mnt.join("d/b")).unwrap();
    a.write_all(&body(4_000, 19)).unwrap();
    b.write_all(&body(6_000, 23)).unwrap();
    File::create(m.mnt.join("d/c")).unwrap();
    drop((a, b));
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    let read = |p: &str| std::fs::read(m.mnt.join(p)).unwrap();
    assert_eq!(read("d/first"), first);
    let stored = std::fs::metadata(m.mnt.join("d/first")).unwrap();
    assert_eq!(
        (stored.mode(), stored.mtime_nsec(), stored.ctime_nsec()),
        (
            answered.mode(),
            answered.mtime_nsec(),
            answered.ctime_nsec()
        ),
        "stored = what the kernel was answered"
    );
    assert_eq!(read("d/second"), body(5_000, 11));
    assert_eq!(read("d/sub/third"), body(3_000, 13));
    assert_eq!(read("d/sub/link"), body(3_000, 13));
    assert_eq!(read("d/fourth"), body(8_000, 17));
    assert_eq!(read("d/a"), body(4_000, 19));
    assert_eq!(read("d/b"), body(6_000, 23));
    assert!(read("d/c").is_empty());
    let fsck = m.fs.fsck().unwrap();
    assert!(fsck.errors.is_empty(), "{:?}", fsck.errors);
    m.unmount();
}
