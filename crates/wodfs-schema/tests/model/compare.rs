//! Observational equality of models.

use wodfs_schema::model::{Namespace, RenameMode, XattrMode};

#[test]
fn equal_when_built_in_a_different_order() {
    let mut a = Namespace::new();
    a.mkdir("/d").unwrap();
    a.create("/d/f").unwrap();
    a.create("/g").unwrap();
    let mut b = Namespace::new();
    b.create("/tmp").unwrap();
    b.create("/g").unwrap();
    b.mkdir("/d").unwrap();
    b.rename("/tmp", "/d/f", RenameMode::Replace).unwrap();
    assert!(a == b);
    assert_eq!(a.first_difference(&b), None);
}

#[test]
fn hard_links_differ_from_copies() {
    let mut linked = Namespace::new();
    linked.create("/f").unwrap();
    linked.link("/f", "/g").unwrap();
    let mut copied = Namespace::new();
    copied.create("/f").unwrap();
    copied.create("/g").unwrap();
    assert!(linked != copied);
    assert!(linked.first_difference(&copied).is_some());
}

#[test]
fn contents_and_xattrs_matter() {
    let mut a = Namespace::new();
    a.create("/f").unwrap();
    let mut b = a.clone();
    assert!(a == b);
    b.write("/f", 0, b"x").unwrap();
    assert!(a != b);
    let mut c = a.clone();
    c.set_xattr("/f", b"user.a", b"", XattrMode::Upsert)
        .unwrap();
    assert!(a != c);
    let mut d = a.clone();
    d.create("/zz").unwrap();
    assert_eq!(a.first_difference(&d).unwrap(), "only right has /zz");
}
