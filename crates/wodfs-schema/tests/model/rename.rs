//! The tricky rename cases, each with the errno Linux returns.

use wodfs_schema::model::{EntryKind, Errno, Namespace, RenameMode};
use wodfs_schema::PATH_BYTES_MAX;

use RenameMode::{Exchange, NoReplace, Replace};

/// `/d/f` (file "x"), `/d/g` (file "y"), `/d/sub/h`, `/e` (empty dir),
/// `/s` (symlink to `/d`).
fn sample() -> Namespace {
    let mut ns = Namespace::new();
    ns.mkdir("/d").unwrap();
    ns.create("/d/f").unwrap();
    ns.write("/d/f", 0, b"x").unwrap();
    ns.create("/d/g").unwrap();
    ns.write("/d/g", 0, b"y").unwrap();
    ns.mkdir("/d/sub").unwrap();
    ns.create("/d/sub/h").unwrap();
    ns.mkdir("/e").unwrap();
    ns.symlink("/d", "/s").unwrap();
    ns.verify().unwrap();
    ns
}

/// Runs a rename that must fail and checks that nothing changed.
fn fails(ns: &Namespace, old: &str, new: &str, mode: RenameMode) -> Errno {
    let mut after = ns.clone();
    let errno = after.rename(old, new, mode).unwrap_err();
    after.verify().unwrap();
    assert!(after == *ns, "failed rename changed the namespace");
    errno
}

#[test]
fn rename_file_replaces_file() {
    let mut ns = sample();
    let before = ns.inode_count();
    ns.rename("/d/f", "/d/g", Replace).unwrap();
    ns.verify().unwrap();
    assert!(!ns.exists("/d/f"));
    assert_eq!(ns.read_all("/d/g").unwrap(), b"x");
    assert_eq!(ns.inode_count(), before - 1);
}

#[test]
fn rename_moves_whole_directory() {
    let mut ns = sample();
    ns.rename("/d", "/e/moved", Replace).unwrap();
    ns.verify().unwrap();
    assert!(ns.exists("/e/moved/sub/h"));
    assert!(!ns.exists("/d"));
    // The symlink is not rewritten: its target now dangles.
    assert_eq!(ns.readlink("/s").unwrap(), b"/d");
}

#[test]
fn directory_over_empty_directory_replaces_it() {
    let mut ns = sample();
    ns.rename("/d/sub", "/e", Replace).unwrap();
    ns.verify().unwrap();
    assert!(ns.exists("/e/h"));
    assert!(!ns.exists("/d/sub"));
}

#[test]
fn type_mismatches() {
    let ns = sample();
    assert_eq!(fails(&ns, "/d/sub", "/d/f", Replace), Errno::ENOTDIR);
    assert_eq!(fails(&ns, "/d/f", "/e", Replace), Errno::EISDIR);
    assert_eq!(fails(&ns, "/e", "/d", Replace), Errno::ENOTEMPTY);
    // A symlink to a directory is not a directory.
    assert_eq!(fails(&ns, "/e", "/s", Replace), Errno::ENOTDIR);
}

#[test]
fn directory_into_its_own_subtree_is_einval() {
    let ns = sample();
    assert_eq!(fails(&ns, "/d", "/d/sub/new", Replace), Errno::EINVAL);
    assert_eq!(fails(&ns, "/d", "/d/new", Replace), Errno::EINVAL);
    // Even when the destination exists and is a file: EINVAL wins.
    assert_eq!(fails(&ns, "/d", "/d/f", Replace), Errno::EINVAL);
    assert_eq!(fails(&ns, "/d", "/d/sub", Exchange), Errno::EINVAL);
    // The walk to a missing parent fails first.
    assert_eq!(fails(&ns, "/d", "/d/none/x", Replace), Errno::ENOENT);
}

#[test]
fn onto_an_ancestor_is_enotempty_or_einval_for_exchange() {
    let ns = sample();
    assert_eq!(fails(&ns, "/d/sub/h", "/d", Replace), Errno::ENOTEMPTY);
    assert_eq!(fails(&ns, "/d/sub", "/d", Replace), Errno::ENOTEMPTY);
    assert_eq!(fails(&ns, "/d/sub/h", "/d", Exchange), Errno::EINVAL);
    assert_eq!(fails(&ns, "/d/sub/h", "/d", NoReplace), Errno::EEXIST);
}

#[test]
fn noreplace() {
    let mut ns = sample();
    assert_eq!(fails(&ns, "/d/f", "/d/g", NoReplace), Errno::EEXIST);
    assert_eq!(fails(&ns, "/d/f", "/d/f", NoReplace), Errno::EEXIST);
    assert_eq!(fails(&ns, "/d/missing", "/d/g", NoReplace), Errno::ENOENT);
    ns.rename("/d/f", "/d/f2", NoReplace).unwrap();
    ns.verify().unwrap();
    assert_eq!(ns.read_all("/d/f2").unwrap(), b"x");
}

#[test]
fn exchange_swaps_any_two_kinds() {
    let mut ns = sample();
    assert_eq!(fails(&ns, "/d/f", "/d/missing", Exchange), Errno::ENOENT);
    ns.rename("/d/f", "/e", Exchange).unwrap();
    ns.verify().unwrap();
    assert_eq!(ns.stat("/d/f").unwrap().kind, EntryKind::Dir);
    assert_eq!(ns.read_all("/e").unwrap(), b"x");
    ns.rename("/d/sub", "/s", Exchange).unwrap();
    ns.verify().unwrap();
    assert!(ns.exists("/s/h"));
    assert_eq!(ns.readlink("/d/sub").unwrap(), b"/d");
}

#[test]
fn hard_links_of_one_file_rename_as_a_no_op() {
    let mut ns = sample();
    ns.link("/d/f", "/d/f-link").unwrap();
    let before = ns.clone();
    ns.rename("/d/f", "/d/f-link", Replace).unwrap();
    ns.rename("/d/f", "/d/f-link", Exchange).unwrap();
    ns.rename("/d/f", "/d/f", Replace).unwrap();
    ns.rename("/d", "/d", Replace).unwrap();
    ns.verify().unwrap();
    assert!(ns == before);
    assert!(ns.exists("/d/f") && ns.exists("/d/f-link"));
    assert_eq!(ns.stat("/d/f").unwrap().nlink, 2);
}

#[test]
fn replacing_one_name_of_a_linked_file_keeps_the_file() {
    let mut ns = sample();
    ns.link("/d/g", "/e/g2").unwrap();
    ns.rename("/d/f", "/d/g", Replace).unwrap();
    ns.verify().unwrap();
    assert_eq!(ns.read_all("/e/g2").unwrap(), b"y");
    assert_eq!(ns.stat("/e/g2").unwrap().nlink, 1);
}

#[test]
fn root_and_walk_errors() {
    let ns = sample();
    assert_eq!(fails(&ns, "/", "/x", Replace), Errno::EBUSY);
    assert_eq!(fails(&ns, "/d", "/", Replace), Errno::EBUSY);
    assert_eq!(fails(&ns, "/d", "/", NoReplace), Errno::EEXIST);
    assert_eq!(fails(&ns, "/missing/a", "/x", Replace), Errno::ENOENT);
    assert_eq!(fails(&ns, "/d/f/a", "/x", Replace), Errno::ENOTDIR);
    assert_eq!(fails(&ns, "/s/f", "/x", Replace), Errno::ELOOP);
    assert_eq!(fails(&ns, "/d/f", "/d/g/x", Replace), Errno::ENOTDIR);
    // The source's parent is walked before the destination's.
    assert_eq!(fails(&ns, "/missing/a", "/d/f/x", Replace), Errno::ENOENT);
    assert_eq!(fails(&ns, "/d/missing", "/d/f/x", Replace), Errno::ENOTDIR);
}

#[test]
fn rename_that_pushes_a_descendant_past_the_limit_is_enametoolong() {
    let mut ns = Namespace::new();
    ns.mkdir("/a").unwrap();
    let mut deep = String::from("/a");
    while deep.len() + 1 + 250 <= PATH_BYTES_MAX {
        deep = format!("{deep}/{}", "n".repeat(250));
        ns.mkdir(&deep).unwrap();
    }
    // Top the deepest path up to 4090 bytes.
    let last = "t".repeat(4090 - deep.len() - 1);
    ns.create(format!("{deep}/{last}")).unwrap();
    let longer = format!("/{}", "m".repeat(40));
    assert_eq!(fails(&ns, "/a", &longer, Replace), Errno::ENAMETOOLONG);
    // Exchange checks both directions.
    ns.mkdir(&longer).unwrap();
    assert_eq!(fails(&ns, "/a", &longer, Exchange), Errno::ENAMETOOLONG);
    assert_eq!(fails(&ns, &longer, "/a", Exchange), Errno::ENAMETOOLONG);
    // Other errors come first.
    assert_eq!(fails(&ns, "/a", &longer, NoReplace), Errno::EEXIST);
    // A name of the same length is fine.
    ns.rename("/a", "/c", Replace).unwrap();
    ns.verify().unwrap();
}
