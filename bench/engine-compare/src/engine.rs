//! The one interface the workloads drive, and the engines behind it.
//!
//! Every adapter keeps the same durability contract, so the numbers compare
//! like with like:
//!
//! * `insert_batch` is one commit and is *not* synced: it may stay in the
//!   engine's memory or in OS buffers.
//! * `close` makes every committed batch durable before it returns (redb: a
//!   final `Durability::Immediate` commit; fjall: `persist(SyncAll)`; wodfs:
//!   `checkpoint`). Workloads count `close` in their time.
//!
//! A store lives in a directory of its own that the harness creates empty;
//! each adapter decides what it puts there.

use std::path::Path;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::data::{KEY_BYTES, VALUE_BYTES};

/// Settings every engine gets alike.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct EngineConfig {
    /// The engine's own cache (redb page cache, fjall block cache, wodfs
    /// node cache). Memtables and write buffers come on top, inside the
    /// same cgroup limit.
    pub cache_bytes: u64,
    /// The in-memory write buffer for engines that have a separate one
    /// (fjall's memtable; fjall keeps up to five while flushes catch up).
    /// redb has no such knob: its dirty pages live in its cache.
    pub write_buffer_bytes: u64,
    /// Size of the image file for engines that run on a fixed-size device
    /// (wodfs). Others grow their files as they need.
    pub device_bytes: u64,
}

pub trait Engine {
    /// Inserts every record of `batch` as one unsynced commit.
    fn insert_batch(&mut self, batch: &Batch) -> Result<()>;

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Visits every record in key order.
    fn scan(&mut self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()>;

    /// Makes everything durable and releases the store.
    fn close(self: Box<Self>) -> Result<()>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Redb,
    Fjall,
    Wodfs,
}

impl EngineKind {
    /// The engines compiled into this binary, in report order.
    pub fn built_in() -> Vec<EngineKind> {
        let mut kinds = vec![EngineKind::Redb, EngineKind::Fjall];
        if cfg!(feature = "wodfs") {
            kinds.push(EngineKind::Wodfs);
        }
        kinds
    }

    pub fn parse(name: &str) -> Result<EngineKind> {
        let kind = match name {
            "redb" => EngineKind::Redb,
            "fjall" => EngineKind::Fjall,
            "wodfs" => EngineKind::Wodfs,
            _ => bail!("unknown engine {name:?} (expected redb, fjall or wodfs)"),
        };
        if !EngineKind::built_in().contains(&kind) {
            bail!("engine {name} is not built in: rebuild with `--features wodfs`");
        }
        Ok(kind)
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Redb => "redb",
            EngineKind::Fjall => "fjall",
            EngineKind::Wodfs => "wodfs",
        }
    }

    /// The version measured; kept equal to the `=` pins in Cargo.toml.
    pub fn version(self) -> &'static str {
        match self {
            EngineKind::Redb => crate::redb_engine::VERSION,
            EngineKind::Fjall => crate::fjall_engine::VERSION,
            EngineKind::Wodfs => env!("CARGO_PKG_VERSION"),
        }
    }

    /// Creates a new store in the empty directory `dir`.
    pub fn create(self, dir: &Path, config: &EngineConfig) -> Result<Box<dyn Engine>> {
        match self {
            EngineKind::Redb => Ok(Box::new(crate::redb_engine::RedbEngine::create(
                dir, config,
            )?)),
            EngineKind::Fjall => Ok(Box::new(crate::fjall_engine::FjallEngine::create(
                dir, config,
            )?)),
            EngineKind::Wodfs => wodfs_create(dir, config),
        }
    }

    /// Opens the store a previous process created in `dir`.
    pub fn open(self, dir: &Path, config: &EngineConfig) -> Result<Box<dyn Engine>> {
        match self {
            EngineKind::Redb => Ok(Box::new(crate::redb_engine::RedbEngine::open(dir, config)?)),
            EngineKind::Fjall => Ok(Box::new(crate::fjall_engine::FjallEngine::open(
                dir, config,
            )?)),
            EngineKind::Wodfs => wodfs_open(dir, config),
        }
    }
}

#[cfg(feature = "wodfs")]
fn wodfs_create(dir: &Path, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    Ok(Box::new(crate::wodfs_engine::WodfsEngine::create(
        dir, config,
    )?))
}

#[cfg(feature = "wodfs")]
fn wodfs_open(dir: &Path, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    Ok(Box::new(crate::wodfs_engine::WodfsEngine::open(
        dir, config,
    )?))
}

#[cfg(not(feature = "wodfs"))]
fn wodfs_create(_dir: &Path, _config: &EngineConfig) -> Result<Box<dyn Engine>> {
    bail!("wodfs is not built in: rebuild with `--features wodfs`")
}

#[cfg(not(feature = "wodfs"))]
fn wodfs_open(_dir: &Path, _config: &EngineConfig) -> Result<Box<dyn Engine>> {
    bail!("wodfs is not built in: rebuild with `--features wodfs`")
}

/// Fixed-size records packed into two flat buffers, so building a batch
/// allocates nothing per record.
#[derive(Debug, Default)]
pub struct Batch {
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl Batch {
    pub fn with_capacity(records: usize) -> Self {
        Self {
            keys: Vec::with_capacity(records * KEY_BYTES),
            values: Vec::with_capacity(records * VALUE_BYTES),
        }
    }

    pub fn push(&mut self, key: &[u8; KEY_BYTES], value: &[u8; VALUE_BYTES]) {
        self.keys.extend_from_slice(key);
        self.values.extend_from_slice(value);
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
    }

    pub fn len(&self) -> usize {
        self.keys.len() / KEY_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.keys
            .chunks_exact(KEY_BYTES)
            .zip(self.values.chunks_exact(VALUE_BYTES))
    }
}
