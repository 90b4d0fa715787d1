//! Encoding preserves depth-first-with-children order.

use std::collections::BTreeSet;

use proptest::prelude::*;
use wodfs_schema::key_codec::escape::{escape_name, unescape_name};
use wodfs_schema::key_codec::{data_key, meta_key, xattr_key};
use wodfs_schema::FsPath;

use crate::strategies::{name_up_to, oracle_cmp, path, tree};

/// The order a depth-first-with-children scan visits a tree: a directory's
/// children in name order, then each child's own listing.
fn listing(tree: &BTreeSet<FsPath>, dir: &FsPath, out: &mut Vec<FsPath>) {
    let mut children: Vec<&FsPath> = tree
        .iter()
        .filter(|p| p.parent().as_ref() == Some(dir))
        .collect();
    children.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    out.extend(children.iter().map(|&c| c.clone()));
    for child in children {
        listing(tree, child, out);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn escaping_preserves_order_and_prefixes(a in name_up_to(40), b in name_up_to(40)) {
        let (ea, eb) = (escape_name(&a), escape_name(&b));
        prop_assert_eq!(ea.cmp(&eb), a.cmp(&b));
        prop_assert_eq!(ea.starts_with(&eb), a.starts_with(&b));
        prop_assert!(ea.iter().all(|&byte| byte >= 0x02));
        prop_assert_eq!(unescape_name(&ea), Ok(a));
    }

    #[test]
    fn meta_keys_sort_depth_first_with_children(a in path(), b in path()) {
        prop_assert_eq!(meta_key(&a).cmp(&meta_key(&b)), oracle_cmp(&a, &b));
    }

    #[test]
    fn data_keys_sort_by_path_then_block(
        a in path(), b in path(), block_a in any::<u64>(), block_b in any::<u64>(),
    ) {
        let expected = oracle_cmp(&a, &b).then(block_a.cmp(&block_b));
        prop_assert_eq!(data_key(&a, block_a).cmp(&data_key(&b, block_b)), expected);
    }

    #[test]
    fn xattr_keys_sort_by_path_then_name(
        a in path(), b in path(), name_a in name_up_to(8), name_b in name_up_to(8),
    ) {
        let expected = oracle_cmp(&a, &b).then(name_a.cmp(&name_b));
        let key_a = xattr_key(&a, &name_a).unwrap();
        let key_b = xattr_key(&b, &name_b).unwrap();
        prop_assert_eq!(key_a.cmp(&key_b), expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn sorted_keys_list_a_tree_depth_first_with_children(tree in tree()) {
        let mut expected = vec![FsPath::root()];
        listing(&tree, &FsPath::root(), &mut expected);
        let mut by_key: Vec<FsPath> = tree.iter().cloned().collect();
        by_key.sort_by_key(meta_key);
        prop_assert_eq!(by_key, expected);
    }
}

#[test]
fn children_come_before_grandchildren() {
    let p = |s: &[u8]| FsPath::parse(s).unwrap();
    let order = [
        p(b"/"),
        p(b"/a"),
        p(b"/a\x01"),
        p(b"/b"),
        p(b"/\xff"),
        p(b"/a/z"),
        p(b"/a/z/y"),
        p(b"/a\x01/c"),
        p(b"/b/c"),
        p(b"/\xff/x"),
    ];
    for pair in order.windows(2) {
        assert!(meta_key(&pair[0]) < meta_key(&pair[1]), "{pair:?}");
    }
}
