//! Where a file's keys live: under its path, or under its inode number.
//!
//! A file with one name keeps attributes, xattrs and blocks under its path
//! (locality for scans). A hard-linked or open-but-unlinked file keeps them
//! in the inode spaces, so no single name owns them.

use wodfs_schema::key_codec::{
    blocks_range, data_key, inode_blocks_range, inode_data_key, inode_meta_key, inode_xattr_key,
    inode_xattrs_range, meta_key, xattr_key, xattrs_range, KeyRange,
};
use wodfs_schema::FsPath;

use crate::error::FsResult;

/// The home of one file's attributes, xattrs and blocks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Loc {
    /// Keyed by this path.
    Path(FsPath),
    /// Keyed by this inode number.
    Inode(u64),
}

impl Loc {
    /// The attributes key.
    pub fn meta_key(&self) -> Vec<u8> {
        match self {
            Loc::Path(p) => meta_key(p),
            Loc::Inode(i) => inode_meta_key(*i),
        }
    }

    /// The key of block `block`.
    pub fn data_key(&self, block: u64) -> Vec<u8> {
        match self {
            Loc::Path(p) => data_key(p, block),
            Loc::Inode(i) => inode_data_key(*i, block),
        }
    }

    /// Every block key.
    pub fn blocks(&self) -> KeyRange {
        match self {
            Loc::Path(p) => blocks_range(p),
            Loc::Inode(i) => inode_blocks_range(*i),
        }
    }

    /// The key of xattr `name`.
    pub fn xattr_key(&self, name: &[u8]) -> FsResult<Vec<u8>> {
        Ok(match self {
            Loc::Path(p) => xattr_key(p, name)?,
            Loc::Inode(i) => inode_xattr_key(*i, name)?,
        })
    }

    /// Every xattr key.
    pub fn xattrs(&self) -> KeyRange {
        match self {
            Loc::Path(p) => xattrs_range(p),
            Loc::Inode(i) => inode_xattrs_range(*i),
        }
    }

    /// Block number of a data key of this location.
    pub fn block_of(key: &[u8]) -> u64 {
        let n = key.len();
        u64::from_be_bytes(key[n.saturating_sub(8)..].try_into().unwrap_or([0; 8]))
    }
}
