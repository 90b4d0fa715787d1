//! The block table: logical block numbers → where each node lives on the
//! device, with a reference count per block.
//!
//! Parents point at block numbers, not at device addresses, so writing a
//! node to a new place (redirect-on-write) changes one table entry and no
//! parent. Reference counts live here, not in nodes, so a node shared by
//! several parents (clones) never has to be rewritten to change its count.
//!
//! Space reuse follows the checkpoint protocol: an extent that the last
//! durable checkpoint (or the checkpoint being written) references is not
//! reused until a later checkpoint that no longer references it is durable.

use std::collections::HashSet;

use crate::alloc::{round_up, FreeMap};
use crate::error::{Error, Result};

/// A logical node number. 0 is never used.
pub type BlockNum = u64;

/// Where a node's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub offset: u64,
    /// Allocated length (a multiple of the block size).
    pub len: u64,
    pub header_len: u32,
    pub header_crc: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockEntry {
    /// None until the node is first written.
    pub loc: Option<Extent>,
    pub refcount: u32,
    pub height: u8,
}

#[derive(Debug)]
pub(crate) struct BlockTable {
    entries: Vec<Option<BlockEntry>>,
    free_nums: Vec<BlockNum>,
    pub space: FreeMap,
    /// Extent offsets the last durable checkpoint references.
    durable: HashSet<u64>,
    /// Extent offsets the checkpoint being written references.
    inflight: HashSet<u64>,
    /// Released extents waiting for a checkpoint that no longer needs them.
    pending: Vec<(u64, u64)>,
    /// Extents named by binding records in the live log (offset → the
    /// binding record's LSN): replay reads them, so they are not reused
    /// until a checkpoint past that LSN is durable.
    bound: std::collections::HashMap<u64, u64>,
    /// Decoded buffer pieces point queries read, by device offset: the
    /// space they came from is forgotten when allocated again.
    pub segments: std::sync::Arc<crate::tree::SegmentCache>,
}

impl BlockTable {
    pub fn new(space: FreeMap) -> Self {
        BlockTable {
            entries: vec![None],
            free_nums: Vec::new(),
            space,
            durable: HashSet::new(),
            inflight: HashSet::new(),
            pending: Vec::new(),
            bound: Default::default(),
            segments: Default::default(),
        }
    }

    /// Rebuilds the table a checkpoint recorded; every extent it names is
    /// durable. `extra` are further durable extents (the table's own blob).
    pub fn restore(
        entries: Vec<(BlockNum, BlockEntry)>,
        mut space: FreeMap,
        extra: &[(u64, u64)],
    ) -> Result<Self> {
        let max = entries.iter().map(|(b, _)| *b).max().unwrap_or(0);
        let mut t = vec![None; max as usize + 1];
        let mut durable = HashSet::new();
        let mut reserve = |off: u64, len: u64| -> Result<()> {
            if !space.reserve(off, len) {
                return Err(Error::corrupt(
                    "block table",
                    off,
                    format!("extent {off}+{len} overlaps another or lies outside the node area"),
                ));
            }
            durable.insert(off);
            Ok(())
        };
        for (b, e) in entries {
            if b == 0 || t[b as usize].is_some() {
                return Err(Error::corrupt(
                    "block table",
                    0,
                    format!("block {b} listed twice or zero"),
                ));
            }
            if let Some(x) = e.loc {
                reserve(x.offset, x.len)?;
            }
            t[b as usize] = Some(e);
        }
        for &(off, len) in extra {
            reserve(off, len)?;
        }
        let free_nums = (1..t.len() as u64)
            .filter(|b| t[*b as usize].is_none())
            .rev()
            .collect();
        Ok(BlockTable {
            entries: t,
            free_nums,
            space,
            durable,
            inflight: HashSet::new(),
            pending: Vec::new(),
            bound: Default::default(),
            segments: Default::default(),
        })
    }

    pub fn get(&self, b: BlockNum) -> Option<&BlockEntry> {
        self.entries.get(b as usize).and_then(Option::as_ref)
    }

    pub fn entries(&self) -> impl Iterator<Item = (BlockNum, &BlockEntry)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i as BlockNum, e)))
    }

    /// Block numbers in use. O(1): every empty slot but the reserved
    /// zero is in `free_nums` (admission asks this once per batch).
    pub fn live_blocks(&self) -> usize {
        let live = self.entries.len() - 1 - self.free_nums.len();
        debug_assert_eq!(live, self.entries.iter().filter(|e| e.is_some()).count());
        live
    }

    /// A new block number with reference count 1 and no place on disk yet.
    pub fn create(&mut self, height: u8) -> BlockNum {
        let entry = BlockEntry {
            loc: None,
            refcount: 1,
            height,
        };
        match self.free_nums.pop() {
            Some(b) => {
                self.entries[b as usize] = Some(entry);
                b
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() as BlockNum - 1
            }
        }
    }

    /// Drops one reference; returns the count left. At zero the block
    /// number and its extent are released.
    pub fn decref(&mut self, b: BlockNum) -> u32 {
        let Some(Some(e)) = self.entries.get_mut(b as usize) else {
            return 0;
        };
        e.refcount = e.refcount.saturating_sub(1);
        let left = e.refcount;
        if left == 0 {
            let loc = e.loc;
            self.entries[b as usize] = None;
            self.free_nums.push(b);
            if let Some(x) = loc {
                self.release(x.offset, x.len);
            }
        }
        left
    }

    /// Allocates an extent for `len` bytes.
    pub fn allocate(&mut self, len: u64) -> Result<u64> {
        let len = round_up(len);
        let off = self.space.allocate(len).ok_or(Error::NoSpace {
            needed_bytes: len,
            free_bytes: self.space.free_bytes(),
        })?;
        // Whatever was cached of this space's old contents is stale now.
        self.segments.forget(off, len);
        Ok(off)
    }

    /// Points `b` at a newly written extent, releasing its old one.
    pub fn relocate(&mut self, b: BlockNum, x: Extent) {
        let old = match self.entries.get_mut(b as usize) {
            Some(Some(e)) => e.loc.replace(x),
            _ => None,
        };
        if let Some(o) = old {
            self.release(o.offset, o.len);
        }
    }

    /// Returns an extent to free space now, or once no checkpoint that
    /// may still be needed references it.
    pub fn release(&mut self, off: u64, len: u64) {
        if self.durable.contains(&off)
            || self.inflight.contains(&off)
            || self.bound.contains_key(&off)
        {
            self.pending.push((off, len));
        } else {
            self.space.free(off, len);
        }
    }

    /// Marks the extents of a checkpoint about to be written.
    pub fn begin_checkpoint(&mut self, extents: impl IntoIterator<Item = u64>) {
        self.inflight = extents.into_iter().collect();
    }

    /// Protects an extent a binding record names (see `bound`).
    pub fn bind(&mut self, off: u64, lsn: u64) {
        let e = self.bound.entry(off).or_insert(lsn);
        *e = (*e).max(lsn);
    }

    /// At recovery: an extent a binding names must not be handed out. It
    /// may already be reserved (a node of the checkpoint itself).
    pub fn reserve_bound(&mut self, off: u64, len: u64, lsn: u64) {
        let _ = self.space.reserve(off, len);
        self.bind(off, lsn);
    }

    /// The checkpoint begun last (at log position `lsn`) is durable: the
    /// one before it, and bindings before `lsn`, no longer pin extents.
    pub fn commit_checkpoint(&mut self, lsn: u64) {
        self.bound.retain(|_, l| *l >= lsn);
        self.durable = std::mem::take(&mut self.inflight);
        let pending = std::mem::take(&mut self.pending);
        for (off, len) in pending {
            self.release(off, len);
        }
    }

    /// Bytes released but not yet reusable (waiting for a checkpoint).
    pub fn pending_bytes(&self) -> u64 {
        self.pending.iter().map(|(_, l)| l).sum()
    }
}
