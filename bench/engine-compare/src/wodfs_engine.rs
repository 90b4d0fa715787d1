//! wodfs-engine, our Bε-tree, on an image file.
//!
//! Built only with `--features wodfs`. The adapter uses this API of the
//! engine and the device crate:
//!
//! * `wodfs_device::FileDevice::create(path, size_bytes)` and
//!   `FileDevice::open(path)`, returning `io::Result`;
//! * `wodfs_engine::Tree::create(Box<dyn Device>, Config)` with
//!   `Config { cache_bytes: usize, .. }` and `Config: Default`, and
//!   `Tree::open(Box<dyn Device>, cache_bytes: usize)`;
//! * `tree.insert(&[u8], &[u8])`, `tree.get(&[u8]) -> Option<Vec<u8>>`,
//!   `tree.range(lo: &[u8], hi: Option<&[u8]>)` iterating
//!   `Result<(Vec<u8>, Vec<u8>)>` in key order, and `tree.checkpoint()`,
//!   which makes every insert durable;
//! * an error type that implements `std::error::Error + Send + Sync`.
//!
//! A commit batch is one `tree.write` (one atomic log record), and `close`
//! is one checkpoint. The engine's other settings (node and partition size,
//! fanout, compression, log size) keep their defaults. Like fjall's flush
//! and compaction threads, the engine's background threads run (the
//! write-back thread, and checkpoints when the log is half full), but not
//! its periodic log sync: no engine here syncs before `close`.

use std::path::Path;

use anyhow::{Context, Result};
use std::time::Duration;
use wodfs_device::FileDevice;

use wodfs_engine::{Background, BackgroundConfig, Config, Op, Tree};

use crate::engine::{Batch, Engine, EngineConfig};

const IMAGE_NAME: &str = "wodfs.img";

pub struct WodfsEngine {
    tree: Tree,
    background: Background,
}

/// The engine's background work without timed durability.
fn start_background(tree: &Tree) -> Background {
    let never = Duration::from_secs(365 * 24 * 3600);
    tree.start_background(BackgroundConfig {
        log_sync_every: never,
        checkpoint_every: never,
        reclaim_flushes: 0,
        write_back_thread: true,
    })
}

impl WodfsEngine {
    pub fn create(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let device = FileDevice::create(dir.join(IMAGE_NAME), config.device_bytes)
            .context("wodfs image create")?;
        let tree_config = Config {
            cache_bytes: usize::try_from(config.cache_bytes)?,
            ..Config::default()
        };
        let tree = Tree::create(Box::new(device), tree_config).context("wodfs create")?;
        let background = start_background(&tree);
        Ok(Self { tree, background })
    }

    pub fn open(dir: &Path, config: &EngineConfig) -> Result<Self> {
        let device = FileDevice::open(dir.join(IMAGE_NAME)).context("wodfs image open")?;
        let tree = Tree::open(Box::new(device), usize::try_from(config.cache_bytes)?)
            .context("wodfs open")?;
        let background = start_background(&tree);
        Ok(Self { tree, background })
    }
}

impl Engine for WodfsEngine {
    fn insert_batch(&mut self, batch: &Batch) -> Result<()> {
        // One atomic batch per commit, as the other engines commit: one log
        // record per batch, not one per record.
        let ops: Vec<Op> = batch
            .iter()
            .map(|(key, value)| Op::Insert {
                key: key.to_vec(),
                value: value.to_vec(),
            })
            .collect();
        self.tree.write_owned(ops)?;
        // With `--features heap-count`: after each batch, the cache's own
        // accounting beside the process's heap peak and the tree's counters
        // (what a peak far above the cache coincides with).
        #[cfg(feature = "heap-count")]
        if std::env::var_os("WODFS_TRACE_CACHE").is_some() {
            let st = self.tree.stats();
            eprintln!(
                "cache-used {} MiB peak {} MiB h {} ckpt {} flushes {} lsplit {} isplit {} merges {}",
                self.tree.cache_bytes_used() >> 20,
                count_alloc::peak() >> 20,
                self.tree.height(),
                st.checkpoints,
                st.flushes,
                st.leaf_splits,
                st.internal_splits,
                st.merges
            );
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?)
    }

    fn scan(&mut self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        // Entries lent as slices, as fjall's and redb's iterators lend
        // theirs (no owned copy per entry).
        self.tree.visit_range(&[], None, |key, value| {
            visit(key, value);
            true
        })?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.background
            .stop()
            .map_err(|e| anyhow::anyhow!("wodfs background: {e}"))?;
        self.tree.checkpoint()?;
        // The engine's own counters, for reading a run's profile.
        eprintln!("wodfs stats: {:?}", self.tree.stats());
        if std::env::var_os("WODFS_VERIFY").is_some() {
            // The tree's shape; reads the whole store, so only on request.
            eprintln!("wodfs shape: {:?}", self.tree.verify()?);
        }
        drop(self.tree);
        Ok(())
    }
}
