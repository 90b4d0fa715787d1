//! Keys of the path-independent inode spaces.
//!
//! A file with more than one name cannot keep its attributes, xattrs and
//! blocks under any one of its paths: renaming or unlinking that name would
//! move or delete what the other names share. Such a file keeps them here,
//! keyed by inode number, and its path metadata keys point at the inode.
//! Inode numbers are big-endian so an inode's keys are contiguous and its
//! blocks sort by block number.

use super::{validate_xattr_name, KeyRange, Space};
use crate::error::SchemaError;

fn inode_prefix(space: Space, ino: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 8 + 8);
    key.push(space.tag());
    key.extend_from_slice(&ino.to_be_bytes());
    key
}

/// The attributes key of inode `ino`.
pub fn inode_meta_key(ino: u64) -> Vec<u8> {
    inode_prefix(Space::InodeMeta, ino)
}

/// The key of xattr `name` of inode `ino`.
pub fn inode_xattr_key(ino: u64, name: &[u8]) -> Result<Vec<u8>, SchemaError> {
    validate_xattr_name(name)?;
    let mut key = inode_prefix(Space::InodeXattr, ino);
    key.extend_from_slice(name);
    Ok(key)
}

/// All xattr keys of inode `ino`.
pub fn inode_xattrs_range(ino: u64) -> KeyRange {
    KeyRange::with_prefix(inode_prefix(Space::InodeXattr, ino))
}

/// The key of block `block` of inode `ino`.
pub fn inode_data_key(ino: u64, block: u64) -> Vec<u8> {
    let mut key = inode_prefix(Space::InodeData, ino);
    key.extend_from_slice(&block.to_be_bytes());
    key
}

/// All block keys of inode `ino`.
pub fn inode_blocks_range(ino: u64) -> KeyRange {
    KeyRange::with_prefix(inode_prefix(Space::InodeData, ino))
}

/// Block keys of inode `ino` from `first_block` to the end.
pub fn inode_blocks_from(ino: u64, first_block: u64) -> KeyRange {
    KeyRange {
        start: inode_data_key(ino, first_block),
        end: inode_blocks_range(ino).end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_ranges_are_exact() {
        for ino in [0, 1, 0xff, u64::MAX - 1, u64::MAX] {
            let all = inode_blocks_range(ino);
            assert!(all.contains(&inode_data_key(ino, 0)));
            assert!(all.contains(&inode_data_key(ino, u64::MAX)));
            if ino < u64::MAX {
                assert!(!all.contains(&inode_data_key(ino + 1, 0)));
            }
            if ino > 0 {
                assert!(!all.contains(&inode_data_key(ino - 1, u64::MAX)));
            }
            let tail = inode_blocks_from(ino, 7);
            assert!(!tail.contains(&inode_data_key(ino, 6)));
            assert!(tail.contains(&inode_data_key(ino, 7)));
            let xattrs = inode_xattrs_range(ino);
            assert!(xattrs.contains(&inode_xattr_key(ino, b"user.a").unwrap()));
            assert!(!xattrs.contains(&inode_meta_key(ino)));
        }
    }
}
