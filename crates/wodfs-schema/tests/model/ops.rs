//! Linux semantics of the non-rename operations.

use wodfs_schema::model::{EntryKind, Errno, Namespace};
use wodfs_schema::{NAME_BYTES_MAX, PATH_BYTES_MAX};

#[test]
fn create_and_mkdir() {
    let mut ns = Namespace::new();
    ns.mkdir("/d").unwrap();
    ns.create("/d/f").unwrap();
    assert_eq!(ns.create("/d/f"), Err(Errno::EEXIST));
    assert_eq!(ns.mkdir("/d/f"), Err(Errno::EEXIST));
    assert_eq!(ns.mkdir("/"), Err(Errno::EEXIST));
    assert_eq!(ns.create("/none/f"), Err(Errno::ENOENT));
    assert_eq!(ns.create("/d/f/x"), Err(Errno::ENOTDIR));
    assert_eq!(ns.create("relative"), Err(Errno::EINVAL));
    assert_eq!(ns.stat("/d").unwrap().nlink, 2);
    ns.mkdir("/d/sub").unwrap();
    assert_eq!(ns.stat("/d").unwrap().nlink, 3);
    assert_eq!(
        ns.readdir("/d").unwrap(),
        vec![b"f".to_vec(), b"sub".to_vec()]
    );
    assert_eq!(ns.readdir("/d/f"), Err(Errno::ENOTDIR));
    ns.verify().unwrap();
}

#[test]
fn names_may_hold_any_byte_but_slash_and_nul() {
    let mut ns = Namespace::new();
    ns.create(b"/\x01\x02\xff ok").unwrap();
    assert_eq!(ns.create(b"/a\0b"), Err(Errno::EINVAL));
    let long = [b'n'; NAME_BYTES_MAX + 1];
    assert_eq!(
        ns.create([b"/".as_slice(), &long].concat()),
        Err(Errno::ENAMETOOLONG)
    );
    let mut path = String::new();
    while path.len() <= PATH_BYTES_MAX {
        path.push_str("/x");
    }
    assert_eq!(ns.mkdir(&path), Err(Errno::ENAMETOOLONG));
}

#[test]
fn unlink_and_rmdir() {
    let mut ns = Namespace::new();
    ns.mkdir("/d").unwrap();
    ns.create("/d/f").unwrap();
    assert_eq!(ns.unlink("/d"), Err(Errno::EISDIR));
    assert_eq!(ns.unlink("/"), Err(Errno::EISDIR));
    assert_eq!(ns.rmdir("/d"), Err(Errno::ENOTEMPTY));
    assert_eq!(ns.rmdir("/d/f"), Err(Errno::ENOTDIR));
    assert_eq!(ns.rmdir("/"), Err(Errno::EBUSY));
    assert_eq!(ns.unlink("/d/none"), Err(Errno::ENOENT));
    ns.unlink("/d/f").unwrap();
    ns.rmdir("/d").unwrap();
    assert!(ns.is_empty());
    assert_eq!(ns.inode_count(), 1);
    ns.verify().unwrap();
}

#[test]
fn hard_links_share_data_and_count_names() {
    let mut ns = Namespace::new();
    ns.mkdir("/d").unwrap();
    ns.create("/f").unwrap();
    ns.link("/f", "/d/g").unwrap();
    assert_eq!(ns.stat("/f").unwrap().nlink, 2);
    assert_eq!(ns.stat("/f").unwrap().ino, ns.stat("/d/g").unwrap().ino);
    ns.write("/d/g", 2, b"hi").unwrap();
    assert_eq!(ns.read_all("/f").unwrap(), b"\0\0hi");
    assert_eq!(ns.link("/f", "/d/g"), Err(Errno::EEXIST));
    assert_eq!(ns.link("/d", "/d2"), Err(Errno::EPERM));
    // EEXIST is checked before EPERM, as in Linux.
    assert_eq!(ns.link("/d", "/f"), Err(Errno::EEXIST));
    assert_eq!(ns.link("/none", "/x"), Err(Errno::ENOENT));
    ns.unlink("/f").unwrap();
    assert_eq!(ns.stat("/d/g").unwrap().nlink, 1);
    assert_eq!(ns.read_all("/d/g").unwrap(), b"\0\0hi");
    ns.verify().unwrap();
}

#[test]
fn symlinks_are_never_followed() {
    let mut ns = Namespace::new();
    ns.mkdir("/d").unwrap();
    ns.symlink("/d", "/s").unwrap();
    assert_eq!(ns.symlink("", "/t"), Err(Errno::ENOENT));
    assert_eq!(ns.symlink("x", "/s"), Err(Errno::EEXIST));
    assert_eq!(ns.readlink("/s").unwrap(), b"/d");
    assert_eq!(ns.readlink("/d"), Err(Errno::EINVAL));
    assert_eq!(ns.stat("/s").unwrap().kind, EntryKind::Symlink);
    assert_eq!(ns.stat("/s").unwrap().size, 2);
    assert_eq!(ns.create("/s/x"), Err(Errno::ELOOP));
    assert_eq!(ns.write("/s", 0, b"x"), Err(Errno::ELOOP));
    assert_eq!(ns.readdir("/s"), Err(Errno::ELOOP));
    assert_eq!(ns.rmdir("/s"), Err(Errno::ENOTDIR));
    // link() does not follow: it links the symlink itself.
    ns.link("/s", "/s2").unwrap();
    assert_eq!(ns.stat("/s2").unwrap().nlink, 2);
    ns.unlink("/s").unwrap();
    ns.unlink("/s2").unwrap();
    ns.verify().unwrap();
}

#[test]
fn write_truncate_read() {
    let mut ns = Namespace::new();
    ns.create("/f").unwrap();
    ns.write("/f", 0, b"hello").unwrap();
    ns.write("/f", 8, b"!").unwrap();
    assert_eq!(ns.read_all("/f").unwrap(), b"hello\0\0\0!");
    assert_eq!(ns.read("/f", 3, 4).unwrap(), b"lo\0\0");
    assert_eq!(ns.read("/f", 100, 4).unwrap(), b"");
    ns.write("/f", 1000, b"").unwrap();
    assert_eq!(ns.stat("/f").unwrap().size, 9);
    ns.truncate("/f", 2).unwrap();
    assert_eq!(ns.read_all("/f").unwrap(), b"he");
    ns.truncate("/f", 4).unwrap();
    assert_eq!(ns.read_all("/f").unwrap(), b"he\0\0");
    assert_eq!(ns.write("/f", u64::MAX, b"x"), Err(Errno::EFBIG));
    assert_eq!(ns.truncate("/f", u64::MAX), Err(Errno::EINVAL));
    assert_eq!(ns.truncate("/none", u64::MAX), Err(Errno::EINVAL));
    ns.mkdir("/d").unwrap();
    assert_eq!(ns.write("/d", 0, b"x"), Err(Errno::EISDIR));
    assert_eq!(ns.truncate("/d", 0), Err(Errno::EISDIR));
    assert_eq!(ns.read("/none", 0, 1), Err(Errno::ENOENT));
}

#[test]
fn walk_lists_every_path_in_pre_order() {
    let mut ns = Namespace::new();
    ns.mkdir("/b").unwrap();
    ns.mkdir("/a").unwrap();
    ns.create("/a/z").unwrap();
    ns.create("/c").unwrap();
    let paths: Vec<String> = ns.walk().iter().map(|e| e.path.to_string()).collect();
    assert_eq!(paths, ["/", "/a", "/a/z", "/b", "/c"]);
}
