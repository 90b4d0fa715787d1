//! Errors of the engine. Every failure the engine can meet is one of these;
//! the file-system layer maps them to errno in exactly one place.

use std::io;

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device failed a request. After a failed write or sync the store
    /// refuses further writes (see [`Error::Poisoned`]).
    #[error("device {op} at byte {offset} failed: {source}")]
    Io {
        /// The request kind: `read`, `write` or `sync`.
        op: &'static str,
        /// Device offset of the request (0 for sync).
        offset: u64,
        /// The device's error.
        #[source]
        source: io::Error,
    },
    /// Bytes read from the device are not what was written: a checksum
    /// mismatch or a structure that does not decode. Never returned as data.
    #[error("corrupt {what} at device byte {addr}: {detail}")]
    Corrupt {
        /// What was being decoded (`node header`, `partition`, ...).
        what: &'static str,
        /// Device byte address of the damaged structure.
        addr: u64,
        /// Why it was rejected.
        detail: String,
    },
    /// The image is not a wodfs image at all (no superblock magic).
    #[error("not a wodfs image: {0}")]
    NotWodfs(String),
    /// The image was written by a format version this build cannot read.
    #[error("unsupported format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version found in the superblock.
        found: u32,
        /// Version this build writes and reads.
        supported: u32,
    },
    /// A key longer than [`crate::MAX_KEY_BYTES`].
    #[error("key of {len} bytes exceeds the maximum of {max}")]
    KeyTooLarge {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value (or a patch end) past [`crate::MAX_VALUE_BYTES`].
    #[error("value of {len} bytes exceeds the maximum of {max}")]
    ValueTooLarge {
        /// Length (or patch end offset) of the rejected value.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Arguments that make no sense (an empty range, overlapping prefixes).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device has no room for the operation.
    #[error("no space left on device: {needed_bytes} bytes needed, {free_bytes} free")]
    NoSpace {
        /// Bytes the operation needed.
        needed_bytes: u64,
        /// Bytes free at the time.
        free_bytes: u64,
    },
    /// A configuration that cannot work (node smaller than a partition, ...).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// `verify` found a broken structural invariant.
    #[error("invariant violated: {0}")]
    Invariant(String),
    /// An earlier write or sync failed; the store is read-only until it is
    /// reopened, because its on-device state after that failure is unknown.
    #[error("store is read-only after an earlier I/O failure: {0}")]
    Poisoned(String),
    /// An operation failed after taking nodes out of the in-memory tree
    /// (a device read failed in the middle of a flush), so the tree no
    /// longer holds every acknowledged change: reads are refused as well
    /// as writes, until a reopen replays them from the log.
    #[error("the in-memory tree lost changes to an earlier failure ({0}); reopen to recover them from the log")]
    Incomplete(String),
}

impl Error {
    pub(crate) fn corrupt(what: &'static str, addr: u64, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what,
            addr,
            detail: detail.into(),
        }
    }

    /// True for errors that mean the stored bytes are damaged.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }
}
