//! Byte encoding of every key wodfs stores in the Bε-tree.
//!
//! # Key layout
//!
//! Notation: `esc(n)` is name `n` with bytes `0x01` and `0x02` escaped (see
//! [`escape`]); every other byte is kept. For a path `P = /n1/…/nk`:
//!
//! * directory form `D(P) = 01 esc(n1) 01 esc(n2) … 01 esc(nk)`, `D(/)` empty;
//! * entry form `E(P) = D(parent(P)) 01 01 esc(nk)`, `E(/)` empty.
//!
//! So `/a/b/c` has `E = 01 'a' 01 'b' 01 01 'c'`: separators become `0x01`
//! and the one before the last name is doubled, as in BetrFS.
//!
//! | space       | tag    | key                        | value                              |
//! | ----------- | ------ | -------------------------- | ---------------------------------- |
//! | sys         | `0x00` | `00 name` (`name[0] != 0`) | file-system-wide records           |
//! | (scratch)   | `0x00` | `00 00 T part …`           | exchange scratch, never persisted  |
//! | meta        | `0x10` | `10 E(P) 00`               | attributes of `P`                  |
//! | xattr       | `0x11` | `11 E(P) 00 xname`         | value of xattr `xname` of `P`      |
//! | data        | `0x12` | `12 E(P) 00 be64(block)`   | 4 KiB block (absent = hole)        |
//! | inode meta  | `0x20` | `20 be64(ino)`             | attributes of a hard-linked file   |
//! | inode xattr | `0x21` | `21 be64(ino) xname`       | xattrs of a hard-linked file       |
//! | inode data  | `0x22` | `22 be64(ino) be64(block)` | blocks of a hard-linked file       |
//!
//! The root's metadata key is `10 00`. Xattr names are stored raw (they
//! hold no NUL, and the path part ends at its only NUL).
//!
//! Every range is "keys that start with a prefix": `[prefix, end)` where
//! `end` is the prefix with trailing `0xff` bytes dropped and its last byte
//! incremented, so every upper bound is exclusive. For a path space with tag
//! `T`:
//!
//! | range                            | start                | end (exclusive)         |
//! | -------------------------------- | -------------------- | ----------------------- |
//! | `P`'s own keys                   | `T E(P) 00`          | `T E(P) 01`             |
//! | all descendants of directory `P` | `T D(P) 01`          | `T D(P) 02`             |
//! | direct children of directory `P` | `T D(P) 01 01`       | `T D(P) 01 02`          |
//! | blocks of `P` from block `b` on  | `12 E(P) 00 be64(b)` | `12 E(P) 01`            |
//! | blocks of inode `i` from `b` on  | `22 be64(i) be64(b)` | end of `22 be64(i)`     |
//!
//! Renaming `P` to `Q` moves prefix `T E(P) 00` to `T E(Q) 00` and
//! `T D(P) 01` to `T D(Q) 01` in each path space ([`rename_moves_all`]).
//!
//! # Why the order is depth-first-with-children
//!
//! Read a key as tokens: one *directory token* `01 esc(n)` per ancestor and
//! a final *entry token* `01 01 esc(n) 00`. Escaped names hold only bytes
//! `>= 0x02`, so an entry token (second byte `0x01`) sorts before every
//! directory token, and tokens of one kind sort by name because escaping
//! preserves order and prefixes. Keys therefore sort by (parent path,
//! compared name by name, shorter first; then name): a directory's children
//! come first, then each child's descendants in name order. The root's key
//! (`T 00`) precedes everything.
//!
//! # Invariants the file system relies on
//!
//! * A directory's descendants are one contiguous range per space; its own
//!   key is *not* in that range (it sits among its siblings), so deleting or
//!   moving a whole subtree takes two ranges: own keys plus descendants.
//! * No exclusive upper bound is ever a real key: the path part of a real
//!   key always ends in `0x00`, a bound ends in `0x01` or `0x02` where that
//!   terminator would be, and inode bounds are shorter than any inode key.
//!   Inclusive starts of block ranges *are* real keys (block `b`); no
//!   sentinel block numbers exist, every `u64` is a valid block.
//! * Names may contain every byte except `/` and NUL.
//! * Limits are checked on POSIX paths ([`crate::path`]); the longest key is
//!   [`KEY_BYTES_MAX`] bytes.

mod decode;
pub mod escape;
mod inode_key;
mod moves;
mod path_key;
mod sys_key;

pub use decode::{child_name, decode_key, DecodedKey};
pub use inode_key::{
    inode_blocks_from, inode_blocks_range, inode_data_key, inode_meta_key, inode_xattr_key,
    inode_xattrs_range,
};
pub use moves::{
    exchange_moves, file_rename_moves, hardlink_moves, rename_moves, rename_moves_all, PrefixMove,
};
pub use path_key::{
    blocks_from, blocks_range, children_range, data_key, descendants_range, entry_range, meta_key,
    subtree_ranges, xattr_key, xattrs_range,
};
pub use sys_key::sys_key;

use crate::error::SchemaError;
use crate::path::PATH_BYTES_MAX;

/// Size of a data block; block `b` holds file bytes `[b * 4096, (b+1) * 4096)`.
pub const BLOCK_BYTES: u64 = 4096;

/// Longest xattr name in bytes (Linux `XATTR_NAME_MAX`).
pub const XATTR_NAME_BYTES_MAX: usize = 255;

/// Upper bound on the length of any key this codec produces: tag, a path
/// whose every name byte is escaped (at most twice the POSIX length),
/// terminator, and the longer suffix (an xattr name).
pub const KEY_BYTES_MAX: usize = 1 + 2 * PATH_BYTES_MAX + 1 + XATTR_NAME_BYTES_MAX;

/// Key spaces, named by the tag byte every key starts with.
///
/// The tag values are persistent: never renumber them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Space {
    /// File-system-wide records (format version, inode counter, …).
    Sys = 0x00,
    /// `path → attributes`.
    Meta = 0x10,
    /// `(path, xattr name) → value`.
    Xattr = 0x11,
    /// `(path, block) → block bytes`.
    Data = 0x12,
    /// `inode → attributes` for files with more than one name.
    InodeMeta = 0x20,
    /// `(inode, xattr name) → value` for files with more than one name.
    InodeXattr = 0x21,
    /// `(inode, block) → block bytes` for files with more than one name.
    InodeData = 0x22,
}

impl Space {
    /// Every space, in key order.
    pub const ALL: [Space; 7] = [
        Space::Sys,
        Space::Meta,
        Space::Xattr,
        Space::Data,
        Space::InodeMeta,
        Space::InodeXattr,
        Space::InodeData,
    ];

    /// The tag byte.
    pub const fn tag(self) -> u8 {
        self as u8
    }

    /// The space a tag byte names, if any.
    pub fn from_tag(tag: u8) -> Option<Space> {
        Space::ALL.into_iter().find(|space| space.tag() == tag)
    }
}

/// The three spaces keyed by full path; a rename or a subtree delete must
/// touch all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathSpace {
    /// Attributes, one key per path.
    Meta,
    /// Extended attributes, one key per (path, name).
    Xattr,
    /// File blocks, one key per (path, block).
    Data,
}

impl PathSpace {
    /// Every path-keyed space.
    pub const ALL: [PathSpace; 3] = [PathSpace::Meta, PathSpace::Xattr, PathSpace::Data];

    /// The key space this is.
    pub const fn space(self) -> Space {
        match self {
            PathSpace::Meta => Space::Meta,
            PathSpace::Xattr => Space::Xattr,
            PathSpace::Data => Space::Data,
        }
    }
}

/// A half-open key range `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyRange {
    /// Smallest key in the range (inclusive).
    pub start: Vec<u8>,
    /// First key past the range (exclusive).
    pub end: Vec<u8>,
}

impl KeyRange {
    /// All keys that start with `prefix`.
    ///
    /// `prefix` starts with a tag byte below `0xff`, so a finite end exists.
    pub(crate) fn with_prefix(prefix: Vec<u8>) -> KeyRange {
        let end = prefix_end(&prefix);
        KeyRange { start: prefix, end }
    }

    /// True if `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && key < self.end.as_slice()
    }
}

/// The smallest byte string greater than every string starting with
/// `prefix`: drop trailing `0xff` bytes, then increment the last byte.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            break;
        }
    }
    end
}

/// Checks an xattr name: non-empty, no NUL, at most [`XATTR_NAME_BYTES_MAX`].
pub fn validate_xattr_name(name: &[u8]) -> Result<(), SchemaError> {
    if name.is_empty() || name.contains(&0) {
        return Err(SchemaError::XattrNameInvalid);
    }
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(SchemaError::XattrNameTooLong {
            name_bytes: name.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for space in Space::ALL {
            assert_eq!(Space::from_tag(space.tag()), Some(space));
        }
        assert_eq!(Space::from_tag(0x13), None);
    }

    #[test]
    fn prefix_end_is_the_successor_of_the_prefix_set() {
        assert_eq!(prefix_end(b"\x10\x01"), b"\x10\x02");
        assert_eq!(prefix_end(b"\x22\x00\xff\xff"), b"\x22\x01");
        let range = KeyRange::with_prefix(b"\x10ab".to_vec());
        assert!(range.contains(b"\x10ab"));
        assert!(range.contains(b"\x10ab\xff\xff"));
        assert!(!range.contains(b"\x10ac"));
        assert!(!range.contains(b"\x10a"));
    }

    #[test]
    fn xattr_names() {
        assert!(validate_xattr_name(b"user.x").is_ok());
        assert_eq!(validate_xattr_name(b""), Err(SchemaError::XattrNameInvalid));
        assert_eq!(
            validate_xattr_name(b"a\0"),
            Err(SchemaError::XattrNameInvalid)
        );
        assert!(validate_xattr_name(&[b'x'; 256]).is_err());
    }
}
