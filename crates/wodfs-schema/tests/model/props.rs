//! Random operation sequences: the model keeps its invariants, clones
//! compare equal, and every successful rename is exactly what the key
//! codec's prefix moves do to the file system's keys.

use std::collections::BTreeSet;

use proptest::prelude::*;
use wodfs_schema::key_codec::{
    children_range, data_key, decode_key, entry_range, exchange_moves, meta_key, rename_moves_all,
    xattr_key, PathSpace, PrefixMove, BLOCK_BYTES,
};
use wodfs_schema::model::{EntryKind, Namespace, RenameMode, XattrMode};
use wodfs_schema::FsPath;

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Mkdir(String),
    Unlink(String),
    Rmdir(String),
    Rename(String, String, RenameMode),
    Link(String, String),
    Symlink(String),
    Write(String, u16, Vec<u8>),
    Truncate(String, u16),
    SetXattr(String, bool, Vec<u8>),
}

/// Paths over a few names (with a reserved byte) so operations collide;
/// mostly shallow, so that parents exist and operations succeed.
fn path() -> impl Strategy<Value = String> {
    let name = || prop::sample::select(vec!["a", "\u{1}", "a\u{1}"]);
    let names = prop_oneof![
        5 => prop::collection::vec(name(), 1..=1),
        4 => prop::collection::vec(name(), 2..=2),
        1 => prop::collection::vec(name(), 3..=3),
    ];
    names.prop_map(|names| format!("/{}", names.join("/")))
}

fn op() -> impl Strategy<Value = Op> {
    let mode = prop::sample::select(vec![
        RenameMode::Replace,
        RenameMode::NoReplace,
        RenameMode::Exchange,
    ]);
    prop_oneof![
        2 => path().prop_map(Op::Create),
        3 => path().prop_map(Op::Mkdir),
        1 => path().prop_map(Op::Unlink),
        1 => path().prop_map(Op::Rmdir),
        4 => (path(), path(), mode).prop_map(|(a, b, m)| Op::Rename(a, b, m)),
        1 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => path().prop_map(Op::Symlink),
        1 => (path(), 0u16..9000, prop::collection::vec(any::<u8>(), 0..5))
            .prop_map(|(p, o, d)| Op::Write(p, o, d)),
        1 => (path(), 0u16..9000).prop_map(|(p, l)| Op::Truncate(p, l)),
        1 => (path(), any::<bool>(), prop::collection::vec(any::<u8>(), 0..3))
            .prop_map(|(p, n, v)| Op::SetXattr(p, n, v)),
    ]
}

/// The keys a file system storing this namespace by path would hold
/// (every name of a hard-linked file keeps its own copy here; the real file
/// system moves those to the inode spaces, which rename does not touch).
fn keys(ns: &Namespace) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    for entry in ns.walk() {
        let path = &entry.path;
        keys.insert(meta_key(path));
        for name in ns.list_xattr(path).unwrap() {
            keys.insert(xattr_key(path, &name).unwrap());
        }
        if entry.kind == EntryKind::File {
            let size = ns.stat(path).unwrap().size;
            for block in 0..size.div_ceil(BLOCK_BYTES) {
                keys.insert(data_key(path, block));
            }
        }
    }
    keys
}

fn apply_moves(keys: &BTreeSet<Vec<u8>>, moves: &[PrefixMove]) -> BTreeSet<Vec<u8>> {
    let mut keys = keys.clone();
    for step in moves {
        keys = keys
            .into_iter()
            .map(|key| match key.strip_prefix(step.from.as_slice()) {
                Some(rest) => [step.to.as_slice(), rest].concat(),
                None => key,
            })
            .collect();
    }
    keys
}

/// What the file system does to its keys for a successful rename.
fn renamed_keys(before: &Namespace, old: &str, new: &str, mode: RenameMode) -> BTreeSet<Vec<u8>> {
    let (old, new) = (FsPath::parse(old).unwrap(), FsPath::parse(new).unwrap());
    let mut keys = keys(before);
    if mode == RenameMode::Exchange {
        return apply_moves(&keys, &exchange_moves(&old, &new).unwrap());
    }
    // A replaced target is a file or an empty directory: its own keys go.
    keys.retain(|key| {
        !PathSpace::ALL
            .iter()
            .any(|&s| entry_range(s, &new).contains(key))
    });
    apply_moves(&keys, &rename_moves_all(&old, &new).unwrap())
}

/// `readdir` of every directory equals a scan of its children range.
fn check_readdir_is_a_range_scan(ns: &Namespace) -> Result<(), TestCaseError> {
    let keys = keys(ns);
    for entry in ns.walk().into_iter().filter(|e| e.kind == EntryKind::Dir) {
        let range = children_range(PathSpace::Meta, &entry.path);
        let scanned: Vec<Vec<u8>> = keys
            .range(range.start.clone()..range.end.clone())
            .map(|key| {
                let decoded = decode_key(key).unwrap();
                decoded.path().unwrap().file_name().unwrap().to_vec()
            })
            .collect();
        prop_assert_eq!(scanned, ns.readdir(entry.path.as_bytes()).unwrap());
    }
    Ok(())
}

fn run(ns: &mut Namespace, op: &Op) -> bool {
    let result = match op {
        Op::Create(p) => ns.create(p),
        Op::Mkdir(p) => ns.mkdir(p),
        Op::Unlink(p) => ns.unlink(p),
        Op::Rmdir(p) => ns.rmdir(p),
        Op::Rename(a, b, mode) => ns.rename(a, b, *mode),
        Op::Link(a, b) => ns.link(a, b),
        Op::Symlink(p) => ns.symlink("target", p),
        Op::Write(p, offset, data) => ns.write(p, u64::from(*offset), data),
        Op::Truncate(p, len) => ns.truncate(p, u64::from(*len)),
        Op::SetXattr(p, first, value) => {
            let name: &[u8] = if *first { b"user.a" } else { b"trusted.\x01" };
            ns.set_xattr(p, name, value, XattrMode::Upsert)
        }
    };
    result.is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_operations_keep_model_and_keys_consistent(ops in prop::collection::vec(op(), 1..80)) {
        let mut ns = Namespace::new();
        for op in &ops {
            let before = ns.clone();
            let succeeded = run(&mut ns, op);
            prop_assert!(ns.verify().is_ok(), "{:?}: {:?}", op, ns.verify());
            if !succeeded {
                prop_assert!(ns == before, "failed {:?} changed the model", op);
                continue;
            }
            if let Op::Rename(old, new, mode) = op {
                let same_object = match (before.stat(old), before.stat(new)) {
                    (Ok(a), Ok(b)) => a.ino == b.ino,
                    _ => false,
                };
                if !same_object {
                    prop_assert_eq!(renamed_keys(&before, old, new, *mode), keys(&ns), "{:?}", op);
                }
            }
        }
        prop_assert!(ns.clone() == ns);
        check_readdir_is_a_range_scan(&ns)?;
    }
}
