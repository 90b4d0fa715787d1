//! Extended attributes in the model.

use wodfs_schema::model::{Errno, Namespace, XattrMode};

#[test]
fn set_get_list_remove() {
    let mut ns = Namespace::new();
    ns.create("/f").unwrap();
    ns.set_xattr("/f", b"user.b", b"2", XattrMode::Upsert)
        .unwrap();
    ns.set_xattr("/f", b"user.a", b"1", XattrMode::Create)
        .unwrap();
    assert_eq!(
        ns.set_xattr("/f", b"user.a", b"x", XattrMode::Create),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        ns.set_xattr("/f", b"user.c", b"x", XattrMode::Replace),
        Err(Errno::ENODATA)
    );
    ns.set_xattr("/f", b"user.a", b"3", XattrMode::Replace)
        .unwrap();
    assert_eq!(ns.get_xattr("/f", b"user.a").unwrap(), b"3");
    assert_eq!(
        ns.list_xattr("/f").unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    ns.remove_xattr("/f", b"user.a").unwrap();
    assert_eq!(ns.remove_xattr("/f", b"user.a"), Err(Errno::ENODATA));
    assert_eq!(ns.get_xattr("/f", b"user.a"), Err(Errno::ENODATA));
}

#[test]
fn limits_and_kinds() {
    let mut ns = Namespace::new();
    ns.create("/f").unwrap();
    ns.symlink("/f", "/s").unwrap();
    assert_eq!(ns.get_xattr("/f", b""), Err(Errno::ERANGE));
    assert_eq!(
        ns.set_xattr("/none", &[b'x'; 256], b"", XattrMode::Upsert),
        Err(Errno::ERANGE)
    );
    assert_eq!(
        ns.set_xattr("/f", b"user.big", &vec![0; 65537], XattrMode::Upsert),
        Err(Errno::E2BIG)
    );
    assert_eq!(
        ns.set_xattr("/none", b"user.a", b"", XattrMode::Upsert),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        ns.set_xattr("/s", b"user.a", b"", XattrMode::Upsert),
        Err(Errno::EPERM)
    );
    ns.set_xattr("/s", b"trusted.a", b"", XattrMode::Upsert)
        .unwrap();
}

#[test]
fn hard_links_share_xattrs() {
    let mut ns = Namespace::new();
    ns.create("/f").unwrap();
    ns.link("/f", "/g").unwrap();
    ns.set_xattr("/f", b"user.k", b"v", XattrMode::Upsert)
        .unwrap();
    assert_eq!(ns.get_xattr("/g", b"user.k").unwrap(), b"v");
}
