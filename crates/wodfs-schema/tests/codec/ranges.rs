//! Subtree, children and block ranges hold exactly the keys they should.

use proptest::prelude::*;
use wodfs_schema::key_codec::{
    blocks_from, children_range, data_key, decode_key, descendants_range, entry_range,
    subtree_ranges, KeyRange, PathSpace,
};
use wodfs_schema::FsPath;

use crate::strategies::{keys_of, path, tree, BLOCKS};

/// A range end (and a directory range start) must never be a real key.
fn assert_not_a_key(bound: &[u8]) -> Result<(), TestCaseError> {
    prop_assert!(decode_key(bound).is_err(), "bound {:?} decodes", bound);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn directory_ranges_hold_exactly_their_keys(tree in tree(), extra_dir in path()) {
        let keys: Vec<_> = tree.iter().flat_map(keys_of).collect();
        for dir in tree.iter().chain([&extra_dir]) {
            for space in PathSpace::ALL {
                let descendants = descendants_range(space, dir);
                let children = children_range(space, dir);
                let own = entry_range(space, dir);
                let subtree = subtree_ranges(space, dir);
                for bound in [&descendants.start, &descendants.end, &children.start, &children.end, &own.end] {
                    assert_not_a_key(bound)?;
                }
                for k in &keys {
                    let same_space = k.space == space;
                    prop_assert_eq!(
                        descendants.contains(&k.key),
                        same_space && dir.is_ancestor_of(&k.path),
                        "descendants of {} vs {:?}", dir, k
                    );
                    prop_assert_eq!(
                        children.contains(&k.key),
                        same_space && k.path.parent().as_ref() == Some(dir),
                        "children of {} vs {:?}", dir, k
                    );
                    prop_assert_eq!(
                        own.contains(&k.key),
                        same_space && &k.path == dir,
                        "own keys of {} vs {:?}", dir, k
                    );
                    let in_subtree = subtree.iter().any(|r: &KeyRange| r.contains(&k.key));
                    prop_assert_eq!(in_subtree, same_space && dir.contains(&k.path));
                }
            }
        }
    }

    #[test]
    fn block_ranges_hold_a_files_blocks_from_b(tree in tree(), first in prop::sample::select(vec![0u64, 1, 2, u64::MAX])) {
        let keys: Vec<_> = tree.iter().flat_map(keys_of).collect();
        for file in &tree {
            let tail = blocks_from(file, first);
            assert_not_a_key(&tail.end)?;
            prop_assert_eq!(tail.start.clone(), data_key(file, first));
            for k in &keys {
                let expected = k.space == PathSpace::Data
                    && &k.path == file
                    && BLOCKS.iter().any(|&b| b >= first && data_key(file, b) == k.key);
                prop_assert_eq!(tail.contains(&k.key), expected, "{} from {} vs {:?}", file, first, k);
            }
        }
    }

    #[test]
    fn a_files_blocks_sit_inside_every_ancestor(file in path(), block in any::<u64>()) {
        let key = data_key(&file, block);
        let mut dir = file.parent();
        while let Some(ancestor) = dir {
            prop_assert!(descendants_range(PathSpace::Data, &ancestor).contains(&key));
            dir = ancestor.parent();
        }
        prop_assert!(entry_range(PathSpace::Data, &file).contains(&key));
    }
}

#[test]
fn root_ranges() {
    let root = FsPath::root();
    let a = FsPath::parse("/a").unwrap();
    let descendants = descendants_range(PathSpace::Meta, &root);
    assert!(!descendants.contains(&wodfs_schema::key_codec::meta_key(&root)));
    assert!(descendants.contains(&wodfs_schema::key_codec::meta_key(&a)));
    assert!(!descendants.contains(&data_key(&a, 0)));
}
