//! statfs: real numbers from the engine's space accounting.

use crate::fs::Fs;

/// What `statfs(2)` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Total blocks of `block_bytes`.
    pub blocks: u64,
    /// Free blocks (space released by deletes counts once a checkpoint
    /// makes it reusable).
    pub blocks_free: u64,
    /// Free blocks for unprivileged users (same as `blocks_free`).
    pub blocks_avail: u64,
    /// Inode slots (an estimate: one per free 4 KiB plus those in use).
    pub files: u64,
    /// Free inode slots.
    pub files_free: u64,
    /// Block size.
    pub block_bytes: u32,
    /// Longest name.
    pub name_bytes_max: u32,
}

impl Fs {
    /// File-system statistics.
    pub fn statfs(&self) -> StatFs {
        let s = self.tree.space();
        let blocks = s.total_bytes / 4096;
        let free = s.free_bytes / 4096;
        StatFs {
            blocks,
            blocks_free: free,
            blocks_avail: free,
            files: blocks,
            files_free: free,
            block_bytes: 4096,
            name_bytes_max: wodfs_schema::NAME_BYTES_MAX as u32,
        }
    }
}
