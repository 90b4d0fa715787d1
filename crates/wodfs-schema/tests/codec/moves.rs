//! Rename, exchange and hard-link moves touch exactly the right keys.

use std::collections::BTreeSet;

use proptest::prelude::*;
use wodfs_schema::key_codec::{
    decode_key, exchange_moves, hardlink_moves, rename_moves_all, DecodedKey,
};
use wodfs_schema::FsPath;

use crate::strategies::{apply_moves, keys_of, keys_of_tree, tree};

/// Two distinct non-root paths of the tree (or a sibling name that is not
/// in it) where neither contains the other.
fn pick_pair(tree: &BTreeSet<FsPath>, i: usize, j: usize, fresh: bool) -> Option<(FsPath, FsPath)> {
    let paths: Vec<&FsPath> = tree.iter().filter(|p| !p.is_root()).collect();
    let old = paths.get(i % paths.len().max(1))?;
    let mut new = (*paths.get(j % paths.len())?).clone();
    if fresh {
        new = new.parent()?.join(b"fresh\x01").ok()?;
    }
    let overlap = old.contains(&new) || new.contains(old);
    (!overlap).then(|| ((*old).clone(), new))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn rename_moves_exactly_the_subtree(
        tree in tree(), i in any::<usize>(), j in any::<usize>(), fresh in any::<bool>(),
    ) {
        let Some((old, new)) = pick_pair(&tree, i, j, fresh) else { return Ok(()) };
        let moves = rename_moves_all(&old, &new).unwrap();
        // Sources and destinations never nest, so no move can catch a key
        // another move produced.
        for a in &moves {
            for b in &moves {
                prop_assert!(!a.from.starts_with(&b.to) && !b.to.starts_with(&a.from));
            }
        }
        for keyed in tree.iter().flat_map(keys_of) {
            let caught = moves.iter().any(|m| keyed.key.starts_with(&m.from));
            prop_assert_eq!(caught, old.contains(&keyed.path), "{:?}", keyed);
        }
        // The FS first deletes what `new` names, then moves `old` onto it.
        let before: BTreeSet<FsPath> = tree.iter().filter(|p| !new.contains(p)).cloned().collect();
        let after: BTreeSet<FsPath> = before
            .iter()
            .map(|p| if old.contains(p) { p.rebase(&old, &new).unwrap() } else { p.clone() })
            .collect();
        prop_assert_eq!(apply_moves(&keys_of_tree(&before), &moves), keys_of_tree(&after));
    }

    #[test]
    fn exchange_moves_swap_two_subtrees(tree in tree(), i in any::<usize>(), j in any::<usize>()) {
        let Some((a, b)) = pick_pair(&tree, i, j, false) else { return Ok(()) };
        let moves = exchange_moves(&a, &b).unwrap();
        let swapped: BTreeSet<FsPath> = tree
            .iter()
            .map(|p| {
                if a.contains(p) {
                    p.rebase(&a, &b).unwrap()
                } else if b.contains(p) {
                    p.rebase(&b, &a).unwrap()
                } else {
                    p.clone()
                }
            })
            .collect();
        prop_assert_eq!(apply_moves(&keys_of_tree(&tree), &moves), keys_of_tree(&swapped));
    }

    #[test]
    fn hardlink_moves_take_only_the_files_xattrs_and_blocks(
        tree in tree(), i in any::<usize>(), ino in any::<u64>(),
    ) {
        let paths: Vec<&FsPath> = tree.iter().filter(|p| !p.is_root()).collect();
        let file = paths[i % paths.len()];
        let moves = hardlink_moves(file, ino);
        for keyed in tree.iter().flat_map(keys_of) {
            let moved = apply_moves(&BTreeSet::from([keyed.key.clone()]), &moves);
            let moved = moved.into_iter().next().unwrap();
            let decoded = decode_key(&moved).unwrap();
            let expected = match decode_key(&keyed.key).unwrap() {
                DecodedKey::Xattr { path, name } if &path == file => DecodedKey::InodeXattr { ino, name },
                DecodedKey::Data { path, block } if &path == file => DecodedKey::InodeData { ino, block },
                other => other,
            };
            prop_assert_eq!(decoded, expected);
        }
    }
}
