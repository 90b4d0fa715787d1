//! Creating, opening and checkpointing a tree.
//!
//! Commit protocol: every dirty node is serialized and given a new extent
//! (redirect-on-write), then the block table is serialized to a new extent;
//! all of it is written and synced; then the superblock of the next
//! generation goes to the other slot and is synced. Only then does the
//! previous checkpoint stop pinning its extents. A crash anywhere before
//! the second sync leaves the previous checkpoint whole.
//!
//! Serialization happens under the write lock (CPU only); the writes and
//! syncs happen after it is released, so writers are not stopped for the
//! device's time. Nodes being written stay pinned in the cache meanwhile.

use std::sync::Arc;

use super::cache::Cache;
use super::state::{Env, Layout, State};
use crate::alloc::{round_up, FreeMap};
use crate::config::{Config, BLOCK_BYTES};
use crate::error::{Error, Result};
use crate::format::checksum;
use crate::format::node::encode_node;
use crate::format::superblock::{decode_superblock, SlotError, Superblock};
use crate::format::table::{decode_table, encode_table, table_bytes};
use crate::format::FORMAT_VERSION;
use crate::node::Node;
use crate::table::BlockTable;

/// The I/O a checkpoint does once the lock is released.
pub(crate) struct CheckpointPlan {
    writes: Vec<(u64, Vec<u8>)>,
    superblock: Superblock,
}

impl State {
    /// Prepares a checkpoint: serializes and places every dirty node and the
    /// block table. Runs under the write lock.
    pub fn plan_checkpoint(
        &mut self,
        env: Env<'_>,
        log_lsn: u64,
        log_chain: u32,
    ) -> Result<CheckpointPlan> {
        // Nodes the write-back thread has written are clean, not rewritten.
        self.apply_commits(env);
        env.dev.annotate("checkpoint.serialize");
        // Serialize every dirty node, then check that the allocator can
        // place them all and the block table before anything moves: a
        // placement failing midway would leave nodes taken out of the
        // cache and blocks relocated, and poison the store. Out of room,
        // the checkpoint fails with NoSpace and the store is unchanged.
        let images: Vec<_> = self
            .cache
            .dirty_blocks()
            .into_iter()
            .map(|b| {
                let entry = self.cache.peek(b).expect("listed just now");
                (
                    b,
                    encode_node(&entry.node, b, env.cfg.compression, env.cfg.partition_bytes),
                )
            })
            .collect();
        let mut trial = self.table.space.clone();
        let table_len = table_bytes(self.table.live_blocks());
        let needs = images
            .iter()
            .map(|(_, image)| round_up(image.bytes.len() as u64))
            .chain([round_up(table_len)]);
        for len in needs {
            if trial.allocate(len).is_none() {
                return Err(Error::NoSpace {
                    needed_bytes: len,
                    free_bytes: self.table.space.free_bytes(),
                });
            }
        }
        self.log_checkpoint_lsn = log_lsn;
        self.log_chain = log_chain;
        let mut writes = Vec::new();
        for (b, image) in images {
            let (mut node, _) = self.cache.take(b).expect("listed just now");
            // The check above makes this succeed; if it still fails, the
            // state is half moved: not a plain NoSpace (that poisons).
            let x = match self.place_image(env, b, &image) {
                Ok(x) => x,
                Err(e) => {
                    // Back, dirty: a poisoned store stays readable.
                    self.cache.put(b, node, true);
                    return Err(Error::Poisoned(format!(
                        "checkpoint placement failed after its check: {e}"
                    )));
                }
            };
            image.set_places(&mut node);
            self.cache.put(b, node, false);
            self.writing.insert(b);
            writes.push((x.offset, image.bytes));
        }
        let blob = encode_table(self.table.entries(), self.table.live_blocks());
        let blob_off = self.table.allocate(blob.len() as u64).map_err(|e| {
            Error::Poisoned(format!("checkpoint placement failed after its check: {e}"))
        })?;
        let mut extents: Vec<u64> = self
            .table
            .entries()
            .filter_map(|(_, e)| e.loc.map(|x| x.offset))
            .collect();
        extents.push(blob_off);
        self.table.begin_checkpoint(extents);
        if let Some((o, l)) = self
            .table_blob
            .replace((blob_off, round_up(blob.len() as u64)))
        {
            self.table.release(o, l);
        }
        let superblock = Superblock {
            version: FORMAT_VERSION,
            generation: self.generation + 1,
            device_bytes: self.layout.device_bytes,
            node_bytes: env.cfg.node_bytes as u32,
            partition_bytes: env.cfg.partition_bytes as u32,
            fanout: env.cfg.fanout as u32,
            compression: env.cfg.compression,
            log_offset: self.layout.log_offset,
            log_bytes: self.layout.log_bytes,
            log_checkpoint_lsn: self.log_checkpoint_lsn,
            next_msn: self.next_msn,
            root: self.root,
            height: self.height,
            table_offset: blob_off,
            table_len: blob.len() as u64,
            table_crc: checksum(&blob),
            log_chain: self.log_chain,
        };
        writes.push((blob_off, blob));
        writes.sort_by_key(|(o, _)| *o);
        Ok(CheckpointPlan { writes, superblock })
    }

    /// The checkpoint's superblock is durable.
    pub fn commit_checkpoint(&mut self, plan_generation: u64, lsn: u64) {
        self.table.commit_checkpoint(lsn);
        // The checkpoint holds every unbound insert logged before it.
        self.unbound.retain(|u| u.lsn >= lsn);
        self.writing.clear();
        self.generation = plan_generation;
    }
}

/// Writes a planned checkpoint. Runs without the tree lock.
pub(crate) fn write_checkpoint(env: Env<'_>, plan: &CheckpointPlan) -> Result<u64> {
    env.dev.annotate("checkpoint.nodes");
    // Each at the start of an extent of whole blocks.
    for (off, bytes) in &plan.writes {
        env.write_image(*off, bytes, false)?;
    }
    env.dev.annotate("checkpoint.sync");
    env.sync()?;
    env.dev.annotate("checkpoint.superblock");
    let sb = &plan.superblock;
    env.write(Superblock::slot_offset(sb.generation), &sb.encode())?;
    env.sync()?;
    env.dev.annotate("checkpoint.done");
    Ok(sb.generation)
}

/// The segment cache of a tree with a cache budget of `cache_bytes`.
fn segment_cache(cache_bytes: usize) -> std::sync::Arc<super::SegmentCache> {
    let bytes = super::write::segment_cache_bytes(cache_bytes);
    std::sync::Arc::new(super::SegmentCache::new(bytes))
}

/// Lays out a new, empty tree on the device (nothing written yet but the
/// cleared superblock slots).
pub(crate) fn create_state(env: Env<'_>) -> Result<State> {
    env.cfg.validate()?;
    let device_bytes = env.dev.size_bytes() / BLOCK_BYTES * BLOCK_BYTES;
    let log_offset = 2 * BLOCK_BYTES;
    let node_start = log_offset + env.cfg.log_bytes;
    let min_bytes = node_start + 16 * round_up(env.cfg.node_bytes as u64);
    if device_bytes < min_bytes {
        return Err(Error::Config(format!(
            "device of {device_bytes} bytes is too small: this configuration needs at least {min_bytes}"
        )));
    }
    env.write(0, &vec![0u8; 2 * BLOCK_BYTES as usize])?;
    env.sync()?;
    let mut table = BlockTable::new(FreeMap::new(node_start, device_bytes));
    table.segments = segment_cache(env.cfg.cache_bytes);
    let root = table.create(0);
    let mut state = State {
        root,
        height: 0,
        table,
        cache: Arc::new(Cache::default()),
        next_msn: 1,
        generation: 0,
        layout: Layout {
            device_bytes,
            log_offset,
            log_bytes: env.cfg.log_bytes,
            node_start,
        },
        table_blob: None,
        writing: Default::default(),
        eviction_failed: None,
        held: Vec::new(),
        log_checkpoint_lsn: 0,
        log_chain: 0,
        unbound: Default::default(),
        writeback: Default::default(),
    };
    state.put_dirty(root, Node::empty_leaf(Vec::new()));
    Ok(state)
}

/// Reads the newest valid superblock (falling back to the other slot when
/// one is torn or damaged) and the block table it names.
pub(crate) fn open_state(env: Env<'_>, cache_bytes: usize) -> Result<(State, Config)> {
    if env.dev.size_bytes() < 2 * BLOCK_BYTES {
        return Err(Error::NotWodfs(format!(
            "device of {} bytes is smaller than the superblocks",
            env.dev.size_bytes()
        )));
    }
    let mut slots = Vec::new();
    for slot in 0..2u64 {
        let mut buf = vec![0u8; BLOCK_BYTES as usize];
        env.read(slot * BLOCK_BYTES, &mut buf)?;
        slots.push(decode_superblock(&buf));
    }
    let best = slots
        .iter()
        .filter_map(|s| s.as_ref().ok())
        .max_by_key(|sb| sb.generation)
        .cloned();
    let sb = match best {
        Some(sb) => sb,
        None => {
            for s in &slots {
                if let Err(SlotError::Version(v)) = s {
                    return Err(Error::UnsupportedVersion {
                        found: *v,
                        supported: FORMAT_VERSION,
                    });
                }
            }
            if let Some(Err(SlotError::Corrupt(d))) = slots
                .iter()
                .find(|s| matches!(s, Err(SlotError::Corrupt(_))))
            {
                return Err(Error::corrupt(
                    "superblock",
                    0,
                    format!("both superblocks unusable: {d}"),
                ));
            }
            return Err(Error::NotWodfs("no superblock magic in either slot".into()));
        }
    };
    if sb.device_bytes > env.dev.size_bytes() {
        return Err(Error::corrupt(
            "superblock",
            Superblock::slot_offset(sb.generation),
            format!(
                "image is {} bytes but was created with {} (truncated?)",
                env.dev.size_bytes(),
                sb.device_bytes
            ),
        ));
    }
    let cfg = Config {
        node_bytes: sb.node_bytes as usize,
        partition_bytes: sb.partition_bytes as usize,
        fanout: sb.fanout as usize,
        cache_bytes,
        compression: sb.compression,
        log_bytes: sb.log_bytes,
    };
    cfg.validate()?;
    let node_start = sb.node_area_start();
    if sb.table_offset < node_start
        || sb.table_offset.saturating_add(sb.table_len) > sb.device_bytes
        || sb.table_len > 1 << 34
    {
        return Err(Error::corrupt(
            "superblock",
            0,
            "block table outside the node area",
        ));
    }
    let mut blob = vec![0u8; sb.table_len as usize];
    env.read(sb.table_offset, &mut blob)?;
    if checksum(&blob) != sb.table_crc {
        return Err(Error::corrupt(
            "block table",
            sb.table_offset,
            "checksum mismatch",
        ));
    }
    let entries =
        decode_table(&blob).map_err(|d| Error::corrupt("block table", sb.table_offset, d))?;
    let blob_extent = (sb.table_offset, round_up(sb.table_len));
    let mut table = BlockTable::restore(
        entries,
        FreeMap::new(node_start, sb.device_bytes),
        &[blob_extent],
    )?;
    table.segments = segment_cache(cache_bytes);
    if table.get(sb.root).is_none() {
        return Err(Error::corrupt(
            "superblock",
            0,
            format!("root block {} is not in the block table", sb.root),
        ));
    }
    let state = State {
        root: sb.root,
        height: sb.height,
        table,
        cache: Arc::new(Cache::default()),
        next_msn: sb.next_msn,
        generation: sb.generation,
        layout: Layout {
            device_bytes: sb.device_bytes,
            log_offset: sb.log_offset,
            log_bytes: sb.log_bytes,
            node_start,
        },
        table_blob: Some(blob_extent),
        writing: Default::default(),
        eviction_failed: None,
        held: Vec::new(),
        log_checkpoint_lsn: sb.log_checkpoint_lsn,
        log_chain: sb.log_chain,
        unbound: Default::default(),
        writeback: Default::default(),
    };
    Ok((state, cfg))
}
