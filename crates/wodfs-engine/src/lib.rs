//! # wodfs-engine: a Bε-tree on a block device
//!
//! An embedded, persistent, write-optimized key-value store: the
//! dictionary wodfs stores its file system in, usable on its own.
//!
//! * Updates are **messages** (insert, delete, blind patch, truncate, range
//!   delete) that enter at the root and move down in batches, so small
//!   random writes cost a fraction of an I/O each. A patch writes bytes
//!   inside a value without reading it.
//! * Nodes are large (4 MiB by default) and split into independently
//!   checksummed **partitions**: a point query reads one partition per level.
//! * Keys are **lifted**: a node stores its keys without the prefix its
//!   bounds share, so long full-path keys cost little.
//! * Nodes are written **redirect-on-write** through a block table that
//!   holds their places and reference counts; a **checkpoint** writes every
//!   dirty node, then switches one of two superblocks.
//! * Every read is checksum-verified: damaged bytes are an error, never data.
//!
//! ```
//! use wodfs_device::MemDevice;
//! use wodfs_engine::{Config, Tree};
//!
//! let tree = Tree::create(Box::new(MemDevice::new(64 << 20)), Config {
//!     node_bytes: 64 << 10,
//!     partition_bytes: 8 << 10,
//!     cache_bytes: 4 << 20,
//!     log_bytes: 1 << 20,
//!     ..Config::default()
//! })?;
//! tree.insert(b"/etc/motd", b"hello")?;
//! tree.patch(b"/etc/motd", 0, b"J")?;          // no read of the value
//! assert_eq!(tree.get(b"/etc/motd")?, Some(b"Jello".to_vec()));
//! tree.delete_range(b"/etc/", b"/etc0")?;      // one message for a subtree
//! assert_eq!(tree.get(b"/etc/motd")?, None);
//! tree.checkpoint()?;                          // durable
//! # Ok::<(), wodfs_engine::Error>(())
//! ```
//!
//! See `docs/ARCHITECTURE.md` for the design and `docs/format.md` for the
//! byte layouts.

mod alloc;
mod basement;
mod buffer;
mod config;
mod error;
mod format;
mod msg;
mod node;
mod range_index;
mod table;
mod tree;

pub use config::{Compression, Config, BLOCK_BYTES};
pub use error::{Error, Result};
pub use format::FORMAT_VERSION;
pub use msg::Msn;
pub use table::BlockNum;
pub use tree::{prefix_successor, Op, RangeIter, Tree, TreeStats, VerifyReport};

/// The longest key the engine stores. Full paths (up to 4096 bytes, plus
/// escaping and a block number) fit with room to spare.
pub const MAX_KEY_BYTES: usize = 16 << 10;

/// The largest value (or patch end). 4 KiB file blocks and 64 KiB extended
/// attributes fit.
pub const MAX_VALUE_BYTES: usize = 128 << 10;

/// Fuzzing entry points: each decoder of on-disk bytes, exposed so fuzz
/// targets and the in-suite fuzz tests can feed them arbitrary input. They
/// must return errors, never panic.
#[doc(hidden)]
pub mod fuzz {
    /// Decodes a node header.
    pub fn node_header(data: &[u8]) -> bool {
        crate::format::node::decode_header(data, 1, 1 << 22).is_ok()
    }
    /// Decodes a leaf partition or a buffer partition.
    pub fn partition(data: &[u8]) -> bool {
        crate::format::partition::decode_basement(data).is_ok()
            | crate::format::partition::decode_buffer(data).is_ok()
    }
    /// Decodes a superblock slot.
    pub fn superblock(data: &[u8]) -> bool {
        crate::format::superblock::decode_superblock(data).is_ok()
    }
    /// Decodes a block table.
    pub fn block_table(data: &[u8]) -> bool {
        crate::format::table::decode_table(data).is_ok()
    }
}
