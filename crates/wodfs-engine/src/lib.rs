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
mod bloom;
mod buffer;
mod config;
mod crc;
mod error;
mod format;
mod int_hash;
mod key_cmp;
mod key_filter;
mod msg;
mod node;
mod pivots;
mod range_index;
mod table;
#[cfg(test)]
mod test_bytes;
mod tree;
mod wal;

pub use config::{Compression, Config, BLOCK_BYTES};
pub use error::{Error, Result};
pub use format::FORMAT_VERSION;
pub use int_hash::{IntHasher, IntMap, IntSet, SeededState};
pub use msg::Msn;
pub use table::BlockNum;
pub use tree::{
    prefix_successor, Background, BackgroundConfig, CatchUp, LogEnd, Op, RangeIter, Space, Tree,
    TreeStats, VerifyReport,
};

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
    /// Checksums are recomputed over mutated input first, so the parsers
    /// behind them are what gets exercised, not just the checksum test.
    fn fix_crc(data: &mut [u8], body_end: usize) {
        if data.len() >= body_end + 4 {
            let crc = crate::format::checksum(&data[..body_end]);
            data[body_end..body_end + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Decodes a node header (checksum fixed up, block number taken from
    /// the input so the parse goes past that check).
    pub fn node_header(data: &[u8]) -> bool {
        let mut d = data.to_vec();
        if d.len() < 16 {
            return crate::format::node::decode_header(&d, 1, 1 << 22).is_ok();
        }
        let end = d.len() - 4;
        fix_crc(&mut d, end);
        let block = u64::from_le_bytes(d[8..16].try_into().expect("8 bytes"));
        crate::format::node::decode_header(&d, block, 1 << 22).is_ok()
    }
    /// Decodes a leaf partition or a buffer partition.
    pub fn partition(data: &[u8]) -> bool {
        // A point query's search of one piece of a segmented buffer reads
        // the same bytes (as the first piece or a later one).
        for head in [true, false] {
            if let Ok(piece) = crate::format::segments::Piece::parse(data.to_vec(), head, None) {
                for key in [&b""[..], b"/dir/0042", b"/dir/0200", &[0xff; 8]] {
                    let _ = piece.messages(key);
                }
            }
        }
        crate::format::partition::decode_basement(data).is_ok()
            | crate::format::partition::decode_buffer(data).is_ok()
    }
    /// Decodes a superblock slot (checksum fixed up).
    pub fn superblock(data: &[u8]) -> bool {
        let mut d = data.to_vec();
        fix_crc(&mut d, 106);
        crate::format::superblock::decode_superblock(&d).is_ok()
    }
    /// Decodes a block table (checksum fixed up).
    pub fn block_table(data: &[u8]) -> bool {
        let mut d = data.to_vec();
        if d.len() >= 4 {
            let end = d.len() - 4;
            fix_crc(&mut d, end);
        }
        crate::format::table::decode_table(&d).is_ok()
    }

    /// Node extents of a healthy image: (offset, header length, height,
    /// partitions as (offset inside the node, stored length)).
    #[allow(clippy::type_complexity)]
    pub fn node_extents(image: &[u8]) -> Vec<(u64, u32, u8, Vec<(u32, u32)>)> {
        let mut out = Vec::new();
        for (name, bytes) in image_samples(image) {
            if name != "block_table" {
                continue;
            }
            for (b, e) in crate::format::table::decode_table(&bytes).unwrap_or_default() {
                let Some(x) = e.loc else { continue };
                let node = &image[x.offset as usize..(x.offset + x.len) as usize];
                if let Ok(n) =
                    crate::format::node::decode_header(&node[..x.header_len as usize], b, x.len)
                {
                    let parts = n
                        .parts
                        .iter()
                        .filter_map(|p| p.disk)
                        .map(|p| (p.offset, p.stored_len))
                        .collect();
                    out.push((x.offset, x.header_len, e.height, parts));
                }
            }
        }
        out
    }

    /// The raw structures of a healthy image, by decoder name, to seed
    /// fuzzing: both superblock slots, the block table, and every node's
    /// header and partitions.
    pub fn image_samples(image: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
        use crate::format::superblock::decode_superblock;
        let mut out = Vec::new();
        let slot = crate::BLOCK_BYTES as usize;
        let mut best = None;
        for s in 0..2 {
            let bytes = &image[s * slot..(s + 1) * slot];
            out.push(("superblock", bytes.to_vec()));
            if let Ok(sb) = decode_superblock(bytes) {
                if best
                    .as_ref()
                    .is_none_or(|b: &crate::format::superblock::Superblock| {
                        b.generation < sb.generation
                    })
                {
                    best = Some(sb);
                }
            }
        }
        let Some(sb) = best else { return out };
        let t = &image[sb.table_offset as usize..(sb.table_offset + sb.table_len) as usize];
        out.push(("block_table", t.to_vec()));
        for (b, e) in crate::format::table::decode_table(t).unwrap_or_default() {
            let Some(x) = e.loc else { continue };
            let node = &image[x.offset as usize..(x.offset + x.len) as usize];
            out.push(("node_header", node[..x.header_len as usize].to_vec()));
            if let Ok(n) =
                crate::format::node::decode_header(&node[..x.header_len as usize], b, x.len)
            {
                for (i, slot) in n.parts.iter().enumerate() {
                    let Some(p) = slot.disk else { continue };
                    let stored = &node[p.offset as usize..(p.offset + p.stored_len) as usize];
                    if let Ok(raw) = crate::format::node::decoded_bytes(stored.into(), &p, &n, i) {
                        out.push(("partition", raw));
                    }
                }
            }
        }
        out
    }
}
