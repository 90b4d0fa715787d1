//! Keys and key ranges of the path-keyed spaces (meta, xattr, data).
//!
//! See the layout table in [`crate::key_codec`]. Every function here takes an
//! already validated [`FsPath`], so encoding cannot fail except for xattr
//! names, which are validated on the way in.

use super::escape::{escape_name_into, SEPARATOR, TERMINATOR};
use super::{validate_xattr_name, KeyRange, PathSpace};
use crate::error::SchemaError;
use crate::path::FsPath;

/// Appends `D(P)`: one `01 esc(name)` per component.
pub(crate) fn push_dir_form(path: &FsPath, out: &mut Vec<u8>) {
    for name in path.names() {
        out.push(SEPARATOR);
        escape_name_into(name, out);
    }
}

/// Appends `E(P)`: `D(parent) 01 01 esc(name)`, nothing for the root.
pub(crate) fn push_entry_form(path: &FsPath, out: &mut Vec<u8>) {
    let mut names = path.names().peekable();
    while let Some(name) = names.next() {
        out.push(SEPARATOR);
        if names.peek().is_none() {
            // The doubled separator marks the last component, which is what
            // sorts a directory's children before its deeper descendants.
            out.push(SEPARATOR);
        }
        escape_name_into(name, out);
    }
}

/// `T E(P) 00`: the prefix shared by exactly `P`'s own keys in `space`.
pub(crate) fn entry_prefix(space: PathSpace, path: &FsPath) -> Vec<u8> {
    let mut key = Vec::with_capacity(path.len_bytes() + 16);
    key.push(space.space().tag());
    push_entry_form(path, &mut key);
    key.push(TERMINATOR);
    key
}

/// `T D(P) 01`: the prefix shared by exactly the descendants of `P`.
pub(crate) fn descendants_prefix(space: PathSpace, dir: &FsPath) -> Vec<u8> {
    let mut key = Vec::with_capacity(dir.len_bytes() + 4);
    key.push(space.space().tag());
    push_dir_form(dir, &mut key);
    key.push(SEPARATOR);
    key
}

/// The metadata key of `path`.
pub fn meta_key(path: &FsPath) -> Vec<u8> {
    entry_prefix(PathSpace::Meta, path)
}

/// The key of xattr `name` of `path`.
pub fn xattr_key(path: &FsPath, name: &[u8]) -> Result<Vec<u8>, SchemaError> {
    validate_xattr_name(name)?;
    let mut key = entry_prefix(PathSpace::Xattr, path);
    // The path part ends at the first NUL and names hold none, so the raw
    // name can follow; xattrs of one file then sort by name bytes.
    key.extend_from_slice(name);
    Ok(key)
}

/// The key of block `block` of the file at `path`.
pub fn data_key(path: &FsPath, block: u64) -> Vec<u8> {
    let mut key = entry_prefix(PathSpace::Data, path);
    key.extend_from_slice(&block.to_be_bytes());
    key
}

/// `path`'s own keys in `space`: its metadata key, all its xattrs, or all
/// its blocks. Not its descendants.
pub fn entry_range(space: PathSpace, path: &FsPath) -> KeyRange {
    KeyRange::with_prefix(entry_prefix(space, path))
}

/// All keys in `space` of every descendant of directory `dir` (not `dir`'s
/// own keys): one contiguous range, whatever the names.
pub fn descendants_range(space: PathSpace, dir: &FsPath) -> KeyRange {
    KeyRange::with_prefix(descendants_prefix(space, dir))
}

/// All keys in `space` of the direct children of directory `dir`. In the
/// meta space this is `readdir`: one key per child, in name byte order.
pub fn children_range(space: PathSpace, dir: &FsPath) -> KeyRange {
    let mut prefix = descendants_prefix(space, dir);
    prefix.push(SEPARATOR);
    KeyRange::with_prefix(prefix)
}

/// `path` and everything below it in `space`, as two disjoint ranges: its
/// own keys and its descendants' keys. Deleting both removes the subtree.
pub fn subtree_ranges(space: PathSpace, path: &FsPath) -> [KeyRange; 2] {
    [entry_range(space, path), descendants_range(space, path)]
}

/// All xattr keys of `path`.
pub fn xattrs_range(path: &FsPath) -> KeyRange {
    entry_range(PathSpace::Xattr, path)
}

/// All block keys of the file at `path` (what `unlink` deletes).
pub fn blocks_range(path: &FsPath) -> KeyRange {
    entry_range(PathSpace::Data, path)
}

/// Block keys of `path` from `first_block` to the end (what `truncate`
/// deletes). The start is the real key of `first_block`.
pub fn blocks_from(path: &FsPath, first_block: u64) -> KeyRange {
    KeyRange {
        start: data_key(path, first_block),
        end: blocks_range(path).end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    #[test]
    fn betrfs_shape() {
        assert_eq!(meta_key(&p("/a/b/c")), b"\x10\x01a\x01b\x01\x01c\x00");
        assert_eq!(meta_key(&FsPath::root()), b"\x10\x00");
        assert_eq!(
            data_key(&p("/f"), 258),
            b"\x12\x01\x01f\x00\x00\x00\x00\x00\x00\x00\x01\x02"
        );
        assert_eq!(
            xattr_key(&p("/f"), b"user.k").unwrap(),
            b"\x11\x01\x01f\x00user.k"
        );
        let subtree = descendants_range(PathSpace::Meta, &p("/a/b"));
        assert_eq!(subtree.start, b"\x10\x01a\x01b\x01");
        assert_eq!(subtree.end, b"\x10\x01a\x01b\x02");
        let children = children_range(PathSpace::Meta, &p("/a"));
        assert_eq!(children.start, b"\x10\x01a\x01\x01");
        assert_eq!(children.end, b"\x10\x01a\x01\x02");
    }

    #[test]
    fn reserved_bytes_in_names_stay_inside_their_directory() {
        // BetrFS would put `/a\x01b` inside `/a`'s subtree.
        let odd = meta_key(&p("/a\x01b"));
        assert!(!descendants_range(PathSpace::Meta, &p("/a")).contains(&odd));
        // BetrFS's bound `P 01 ff` missed names starting with 0xff.
        let high = meta_key(&FsPath::parse(b"/a/\xff\xff").unwrap());
        assert!(descendants_range(PathSpace::Meta, &p("/a")).contains(&high));
        assert!(children_range(PathSpace::Meta, &p("/a")).contains(&high));
    }

    #[test]
    fn truncate_range_keeps_earlier_blocks() {
        let f = p("/d/f");
        let range = blocks_from(&f, 3);
        assert!(!range.contains(&data_key(&f, 2)));
        assert!(range.contains(&data_key(&f, 3)));
        assert!(range.contains(&data_key(&f, u64::MAX)));
        assert!(!range.contains(&data_key(&p("/d/f\x01"), 0)));
        assert!(!range.contains(&data_key(&p("/d/fa"), 0)));
    }
}
