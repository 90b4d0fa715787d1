//! Generators and oracles shared by the codec property tests.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use proptest::prelude::*;
use wodfs_schema::key_codec::{data_key, meta_key, xattr_key, PathSpace};
use wodfs_schema::FsPath;

/// Bytes that stress the encoding: the reserved and escape bytes, their
/// neighbours, `.`, and the top of the byte range.
const TRICKY_BYTES: [u8; 9] = [0x01, 0x02, 0x03, b'.', b'0', b'a', b'b', 0xfe, 0xff];

/// Any byte a name may hold.
fn name_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(TRICKY_BYTES.to_vec()),
        1 => (1u8..=255).prop_filter("no slash", |b| *b != b'/'),
    ]
}

/// A valid name of 1 to `len_max` bytes.
pub fn name_up_to(len_max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(name_byte(), 1..=len_max)
        .prop_filter("not a dot name", |n| n != b"." && n != b"..")
}

/// A short valid name; short names collide and share prefixes often.
pub fn name() -> impl Strategy<Value = Vec<u8>> {
    name_up_to(3)
}

/// A path of up to four components, possibly the root.
pub fn path() -> impl Strategy<Value = FsPath> {
    prop::collection::vec(name(), 0..=4).prop_map(|names| FsPath::from_names(names).unwrap())
}

/// Names drawn from a small set, so random trees have deep, crowded
/// directories whose names are prefixes of one another.
fn tree_name() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<Vec<u8>> = [
        &b"a"[..],
        b"b",
        b"ab",
        b"a\x01",
        b"a\x02",
        b"a\x01b",
        b"\x01",
        b"\x02",
        b"\xff",
        b"\xff\xff",
    ]
    .iter()
    .map(|n| n.to_vec())
    .collect();
    prop_oneof![4 => prop::sample::select(fixed), 1 => name()]
}

/// A random tree: a set of paths that holds every ancestor of its paths.
pub fn tree() -> impl Strategy<Value = BTreeSet<FsPath>> {
    let tree_path = prop::collection::vec(tree_name(), 1..=4)
        .prop_map(|names| FsPath::from_names(names).unwrap());
    prop::collection::vec(tree_path, 1..24).prop_map(|paths| {
        let mut tree = BTreeSet::from([FsPath::root()]);
        for mut path in paths {
            while tree.insert(path.clone()) {
                match path.parent() {
                    Some(parent) => path = parent,
                    None => break,
                }
            }
        }
        tree
    })
}

/// One stored key and what it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Keyed {
    pub key: Vec<u8>,
    pub space: PathSpace,
    pub path: FsPath,
}

pub const XATTR_NAMES: [&[u8]; 2] = [b"user.a", b"user.\x01\xff"];
pub const BLOCKS: [u64; 3] = [0, 1, u64::MAX];

/// Every key a path can have: metadata, two xattrs and three blocks.
pub fn keys_of(path: &FsPath) -> Vec<Keyed> {
    let mut keys = vec![Keyed {
        key: meta_key(path),
        space: PathSpace::Meta,
        path: path.clone(),
    }];
    for name in XATTR_NAMES {
        keys.push(Keyed {
            key: xattr_key(path, name).unwrap(),
            space: PathSpace::Xattr,
            path: path.clone(),
        });
    }
    for block in BLOCKS {
        keys.push(Keyed {
            key: data_key(path, block),
            space: PathSpace::Data,
            path: path.clone(),
        });
    }
    keys
}

/// All keys of a tree, sorted and without duplicates.
pub fn keys_of_tree<'a>(tree: impl IntoIterator<Item = &'a FsPath>) -> BTreeSet<Vec<u8>> {
    tree.into_iter()
        .flat_map(keys_of)
        .map(|keyed| keyed.key)
        .collect()
}

/// Depth-first-with-children order, stated directly: the root first, then
/// entries sorted by parent path (name by name, a shorter parent first),
/// then by name.
pub fn oracle_cmp(a: &FsPath, b: &FsPath) -> Ordering {
    fn split(path: &FsPath) -> Option<(Vec<&[u8]>, &[u8])> {
        let mut names: Vec<&[u8]> = path.names().collect();
        let last = names.pop()?;
        Some((names, last))
    }
    split(a).cmp(&split(b))
}

/// Applies prefix moves in order to a key set, as the engine would.
pub fn apply_moves(
    keys: &BTreeSet<Vec<u8>>,
    moves: &[wodfs_schema::key_codec::PrefixMove],
) -> BTreeSet<Vec<u8>> {
    let mut keys = keys.clone();
    for step in moves {
        let count = keys.len();
        keys = keys
            .into_iter()
            .map(|key| match key.strip_prefix(step.from.as_slice()) {
                Some(rest) => [step.to.as_slice(), rest].concat(),
                None => key,
            })
            .collect();
        assert_eq!(keys.len(), count, "move {step:?} landed on an existing key");
    }
    keys
}
