//! Regression (xfstests generic/035): `fstat` on an open directory after
//! it was removed — by rmdir or by a rename over it — answers link count 0
//! instead of ESTALE.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{mkfs, mount, Scratch};

#[test]
fn fstat_of_a_removed_open_directory_says_nlink_0() {
    require_fuse!();
    let s = Scratch::new("removed-dir");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    let mnt = s.mnt();
    // rmdir
    std::fs::create_dir(mnt.join("gone")).unwrap();
    let dir = std::fs::File::open(mnt.join("gone")).unwrap();
    let ino = dir.metadata().unwrap().ino();
    std::fs::remove_dir(mnt.join("gone")).unwrap();
    let md = dir.metadata().unwrap();
    assert_eq!((md.ino(), md.nlink()), (ino, 0));
    assert!(md.is_dir());
    // rename over an open directory
    std::fs::create_dir(mnt.join("a")).unwrap();
    std::fs::create_dir(mnt.join("b")).unwrap();
    let b = std::fs::File::open(mnt.join("b")).unwrap();
    std::fs::rename(mnt.join("a"), mnt.join("b")).unwrap();
    assert_eq!(b.metadata().unwrap().nlink(), 0);
    drop((dir, b));
    m.unmount();
}
