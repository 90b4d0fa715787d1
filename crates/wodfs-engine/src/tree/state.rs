//! The tree's mutable state (under the handle's `RwLock`) and node loading.

use std::collections::HashSet;
use std::sync::Arc;

use wodfs_device::Device;

use super::cache::{Cache, CacheEntry};
use super::stats::Stats;
use crate::config::{Compression, Config};
use crate::error::{Error, Result};
use crate::format::node::{decode_header, decode_part, decode_shared_basement};
use crate::format::segments;
use crate::msg::{Msn, PointMsg};
use crate::node::{Node, Part, PartLoc, PartSlot, Tally};
use crate::table::{BlockNum, BlockTable, Extent};

/// Device regions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub device_bytes: u64,
    pub log_offset: u64,
    pub log_bytes: u64,
    pub node_start: u64,
}

#[derive(Debug)]
pub(crate) struct State {
    pub root: BlockNum,
    pub height: u8,
    pub table: BlockTable,
    /// Shared with the write-back thread, which looks nodes up without
    /// the tree's lock (`Shared::cache`).
    pub cache: Arc<Cache>,
    pub next_msn: Msn,
    pub generation: u64,
    pub layout: Layout,
    /// Where the durable checkpoint's block table blob is.
    pub table_blob: Option<(u64, u64)>,
    /// Blocks a checkpoint is writing right now: not evictable, because
    /// their table entries already name extents not yet written.
    pub writing: HashSet<BlockNum>,
    pub log_checkpoint_lsn: u64,
    pub log_chain: u32,
    /// Unbound inserts logged but not yet bound (late-binding journal).
    pub unbound: super::bind::UnboundList,
    /// Dirty nodes handed to the write-back thread.
    pub writeback: super::writeback::Queued,
    /// A device error of an eviction in the middle of a flush, kept for
    /// the operation's own eviction to report (see `State::evict`).
    pub eviction_failed: Option<crate::Error>,
    /// Nodes taken out of the cache to be changed ([`State::take_full`])
    /// and not yet put back or freed. An error that unwinds through the
    /// code holding them drops them (and any buffer on its way down
    /// between them): then the in-memory tree is missing acknowledged
    /// messages until a reopen replays the log ([`State::lost_nodes`]).
    pub held: Vec<BlockNum>,
}

/// What every tree operation needs besides the state.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub dev: &'a dyn Device,
    pub cfg: &'a Config,
    pub stats: &'a Stats,
    pub loading: &'a super::read_ahead::Loading,
    pub reads: &'a super::read_pattern::ReadPattern,
    pub flush_ahead: &'a super::flush_ahead::FlushAhead,
}

/// The engine error of a failed device request.
fn io_error(op: &'static str, offset: u64) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { op, offset, source }
}

impl Env<'_> {
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.dev
            .read_at(offset, buf)
            .map_err(io_error("read", offset))
    }
    /// A small read that continues nothing (a node header): see
    /// [`wodfs_device::Device::read_random_at`].
    pub fn read_random(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.dev
            .read_random_at(offset, buf)
            .map_err(io_error("read", offset))
    }
    /// A partition or a whole node: random unless it continues a recent
    /// such read (see `read_pattern`).
    pub fn read_tracked(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if self.reads.continues(offset, buf.len() as u64) {
            self.read(offset, buf)
        } else {
            self.read_random(offset, buf)
        }
    }
    /// [`Env::read_tracked`] into consecutive buffers (see
    /// [`wodfs_device::Device::read_vectored_at`]).
    pub fn read_tracked_vectored(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let random = !self.reads.continues(offset, len as u64);
        self.dev
            .read_vectored_at(offset, bufs, random)
            .map_err(io_error("read", offset))
    }
    /// A large read whose bytes the caller keeps (see
    /// [`wodfs_device::Device::read_owned`]).
    pub fn read_owned(&self, offset: u64, len: usize) -> Result<wodfs_device::OwnedRead> {
        self.dev
            .read_owned(offset, len)
            .map_err(io_error("read", offset))
    }
    /// A large read whose bytes the caller copies out of (see
    /// [`wodfs_device::Device::read_with`]).
    pub fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.dev
            .read_with(offset, len, f)
            .map_err(io_error("read", offset))
    }
    pub fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.dev
            .write_at(offset, buf)
            .map_err(io_error("write", offset))
    }
    /// A node's image at the start of its extent: see
    /// [`wodfs_device::Device::write_padded_at`]. Extents are whole
    /// blocks, so the bytes from the image's end to its block's end are
    /// the node's own; `stream`: a node a sequential stream filled.
    pub fn write_image(&self, offset: u64, buf: &[u8], stream: bool) -> Result<()> {
        self.dev
            .write_padded_at(offset, buf, crate::config::BLOCK_BYTES, stream)
            .map_err(io_error("write", offset))
    }
    /// A write the caller syncs right after (the log): see
    /// [`wodfs_device::Device::write_direct_at`].
    pub fn write_direct(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.dev
            .write_direct_at(offset, buf)
            .map_err(io_error("write", offset))
    }
    pub fn sync(&self) -> Result<()> {
        self.dev.sync().map_err(io_error("sync", 0))
    }
}

impl State {
    pub fn next_msn(&mut self) -> Msn {
        let m = self.next_msn;
        self.next_msn += 1;
        m
    }

    /// A node for reading: from the cache, or its header from the device.
    ///
    /// An internal node's header is read by one thread at a time: a scan
    /// and the read-ahead threads it starts descend towards neighbouring
    /// leaves together, and each of them read the header of a parent none
    /// had cached (two extra header reads in one run of the test
    /// `a_cold_scan_reads_every_leaf_whole_and_no_leaf_header`). The
    /// others wait for that read and take the header from the cache. A
    /// leaf's header is not claimed here: a leaf's claim belongs to the
    /// thread loading it whole, which may call this under its claim.
    pub fn node_for_read(&self, env: Env<'_>, b: BlockNum) -> Result<Arc<CacheEntry>> {
        loop {
            if let Some(e) = self.cache.get(b) {
                return Ok(e);
            }
            let (height, _) = self.extent(b)?;
            if height == 0 {
                return self.header_unclaimed(env, b);
            }
            if let Some(_reading) = env.loading.claim(b) {
                // Looked up again under the claim: another thread may
                // have read it between the first look and the claim.
                return self.header_unclaimed(env, b);
            }
            env.loading.wait_for(b);
        }
    }

    /// Node `b` from the cache, or its header from the device, without a
    /// claim: for a caller that holds `b`'s claim itself (a thread loading
    /// a leaf whole), which [`State::node_for_read`] would wait for
    /// forever if the block table called `b` an internal node.
    pub fn header_unclaimed(&self, env: Env<'_>, b: BlockNum) -> Result<Arc<CacheEntry>> {
        if let Some(e) = self.cache.get(b) {
            return Ok(e);
        }
        let node = self.read_header(env, b)?;
        Ok(self.cache.put_if_absent(b, node))
    }

    fn read_header(&self, env: Env<'_>, b: BlockNum) -> Result<Node> {
        let (height, x) = self.extent(b)?;
        let mut buf = vec![0u8; x.header_len as usize];
        env.read_random(x.offset, &mut buf)?;
        env.stats.add_header_read();
        check_header(b, height, &x, &buf)
    }

    /// Node `b`'s height and extent, from the block table.
    fn extent(&self, b: BlockNum) -> Result<(u8, Extent)> {
        let entry = self.table.get(b).ok_or_else(|| {
            Error::corrupt("block pointer", 0, format!("block {b} is not allocated"))
        })?;
        let x = entry.loc.ok_or_else(|| {
            Error::corrupt("block pointer", 0, format!("block {b} was never written"))
        })?;
        Ok((entry.height, x))
    }

    /// Node `b` whole, header and every partition, from one read of its
    /// extent (past the page cache where the device can): a leaf read
    /// ahead for a stream, which will be wanted whole. Reading its header
    /// first and then its partitions took two device round trips per
    /// leaf, and the first one, small and synchronous, was a third of a
    /// cold sequential read's waiting.
    ///
    /// For readers: an uncompressed leaf keeps its basements as slices of
    /// the buffer read ([`WholeRead::Shared`]).
    pub fn read_whole(&self, env: Env<'_>, b: BlockNum) -> Result<Node> {
        let (height, x) = self.extent(b)?;
        read_whole_at(env, b, height, &x, WholeRead::Shared)
    }

    /// Where node `b`'s extent starts on the device.
    fn extent_offset(&self, b: BlockNum) -> Result<u64> {
        self.table
            .get(b)
            .and_then(|e| e.loc)
            .map(|x| x.offset)
            .ok_or_else(|| Error::corrupt("block pointer", 0, format!("block {b} not on disk")))
    }

    /// Partition `i` of a cached node, loading it if needed.
    pub fn part<'e>(
        &self,
        env: Env<'_>,
        b: BlockNum,
        entry: &'e CacheEntry,
        i: usize,
    ) -> Result<&'e Part> {
        let slot = &entry.node.parts[i];
        if let Some(p) = slot.data.get() {
            return Ok(p);
        }
        let loc = part_place(b, 0, i, slot)?;
        let base = self.extent_offset(b)?;
        let mut buf = vec![0u8; loc.stored_len as usize];
        env.read_tracked(base + u64::from(loc.offset), &mut buf)?;
        env.stats.add_partition_read();
        let part = decode_part_of(b, base, i, &entry.node, &loc, buf)?;
        let added = part.mem_bytes() + crate::node::PART_MEM_BYTES;
        if slot.data.set(part).is_ok() {
            self.cache.grew(b, entry, added);
        }
        Ok(slot.data.get().expect("just set"))
    }

    /// `key`'s messages in buffer `i` of a cached node whose buffer is not
    /// loaded, read from the one segment that can hold them (kept decoded
    /// in the segment cache, not loaded into the node); `None` when the
    /// buffer is not segmented or holds range deletes (then the caller
    /// loads it whole).
    pub fn probe_buffer(
        &self,
        env: Env<'_>,
        b: BlockNum,
        entry: &CacheEntry,
        i: usize,
        key: &[u8],
    ) -> Result<Option<Vec<PointMsg>>> {
        let slot = &entry.node.parts[i];
        let (Some(loc), Some(summary)) = (slot.disk, slot.summary.as_deref()) else {
            return Ok(None);
        };
        if summary.segments.is_empty() || summary.has_ranges {
            return Ok(None);
        }
        let Some(j) = segments::find(&summary.segments, key) else {
            return Ok(Some(Vec::new()));
        };
        let seg = &summary.segments[j];
        let base = self.extent_offset(b)?;
        let addr = base + u64::from(loc.offset) + u64::from(seg.offset);
        let cache = &self.table.segments;
        if let Some(piece) = cache.get(addr, seg.crc) {
            env.stats.add_segment_hit();
            return Ok(Some(piece.messages(key)));
        }
        let mut buf = vec![0u8; seg.stored_len as usize];
        env.read_tracked(addr, &mut buf)?;
        env.stats.add_segment_read();
        let dict = entry.node.dict.as_deref().unwrap_or_default();
        let piece = segments::read_piece(buf, &summary.segments, j, dict).map_err(|d| {
            Error::corrupt(
                "partition",
                addr,
                format!("block {b} buffer {i} segment {j}: {d}"),
            )
        })?;
        let msgs = piece.messages(key);
        cache.put(addr, seg.crc, std::sync::Arc::new(piece));
        Ok(Some(msgs))
    }

    /// Takes a node out of the cache for modification, fully loaded (all
    /// missing partitions in one read of its extent), with whether it
    /// was dirty.
    pub fn take_full(&mut self, env: Env<'_>, b: BlockNum) -> Result<(Node, bool)> {
        let (node, kept) = self.take_full_tallied(env, b)?;
        Ok((node, kept.is_some()))
    }

    /// [`Self::take_full`], with the node's tally if it was dirty (see
    /// [`super::cache::Cache::take_tallied`]).
    pub fn take_full_tallied(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
    ) -> Result<(Node, Option<Tally>)> {
        let taken = self.take_full_untracked(env, b)?;
        self.held.push(b);
        Ok(taken)
    }

    /// Node `b` is back in the cache, or its block is freed: no longer
    /// held ([`State::held`]). A new node (a split's piece) was never held.
    pub fn release_hold(&mut self, b: BlockNum) {
        if let Some(i) = self.held.iter().rposition(|&h| h == b) {
            self.held.swap_remove(i);
        }
    }

    /// After an operation failed: did it drop nodes it held, leaving the
    /// in-memory tree incomplete? (Forgets them either way.)
    pub fn lost_nodes(&mut self) -> bool {
        let lost = !self.held.is_empty();
        self.held.clear();
        lost
    }

    fn take_full_untracked(&mut self, env: Env<'_>, b: BlockNum) -> Result<(Node, Option<Tally>)> {
        // A write-back the thread finished is committed first: the node
        // it wrote is then this version, not a stale copy.
        self.apply_commits(env);
        let cached = self.cache.take_tallied(b);
        if let Some((node, Some(tally))) = cached {
            // Dirty, so fully loaded: not visited partition by partition
            // to find none missing. Taken (and unshared) before it became
            // dirty.
            debug_assert!(node.is_fully_loaded());
            debug_assert!(!node.has_shared_basements());
            return Ok((node, Some(tally)));
        }
        // Cached clean: a leaf a reader read whole may hold its basements
        // as slices of one read buffer, which the writer must not keep
        // alive behind the basements it replaces.
        let cached = cached.map(|(mut node, tally)| {
            if node.unshare() {
                env.stats.add_unshared_leaf();
            }
            (node, tally)
        });
        // Not cached, or cached clean and partly loaded (the device holds
        // all of it then): the flush read-ahead thread may have read it.
        if cached.as_ref().is_none_or(|(n, _)| !n.is_fully_loaded()) {
            let (_, x) = self.extent(b)?;
            if let Some(node) = env.flush_ahead.take(b, &x) {
                env.stats.add_flush_read_ahead();
                return Ok((node, None));
            }
        }
        let node = match cached {
            Some((node, _)) => node,
            None => self.read_header(env, b)?,
        };
        Ok((self.load_all(env, b, node)?, None))
    }

    pub fn load_all(&self, env: Env<'_>, b: BlockNum, node: Node) -> Result<Node> {
        let missing: Vec<usize> = (0..node.parts.len())
            .filter(|i| node.parts[*i].data.get().is_none())
            .collect();
        if missing.is_empty() {
            return Ok(node);
        }
        let base = self.extent_offset(b)?;
        let mut places = Vec::with_capacity(missing.len());
        for &i in &missing {
            places.push((i, part_place(b, base, i, &node.parts[i])?));
        }
        // One read from the first missing partition to the end of the
        // last, each partition into a buffer of its own (decoded without
        // a copy when stored uncompressed); the bytes between missing
        // partitions (loaded ones) into scratch buffers. Reading into one
        // buffer and copying each partition out of it was a tenth of a
        // cold sequential read's work.
        places.sort_by_key(|(_, loc)| loc.offset);
        let first = u64::from(places[0].1.offset);
        // The buffers in device order: a gap before a partition, if any,
        // then the partition (`part_at` says which buffer it is).
        let mut bufs: Vec<Vec<u8>> = Vec::with_capacity(places.len());
        let mut part_at = Vec::with_capacity(places.len());
        let mut end = first;
        for (_, loc) in &places {
            let start = u64::from(loc.offset);
            if start < end {
                return Err(Error::corrupt(
                    "partition",
                    base + start,
                    format!("block {b}: partitions overlap"),
                ));
            }
            if start > end {
                bufs.push(vec![0u8; (start - end) as usize]);
            }
            part_at.push(bufs.len());
            bufs.push(vec![0u8; loc.stored_len as usize]);
            end = start + u64::from(loc.stored_len);
        }
        let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        env.read_tracked_vectored(base + first, &mut pieces)?;
        env.stats.add_node_read();
        for ((i, loc), at) in places.into_iter().zip(part_at) {
            let bytes = std::mem::take(&mut bufs[at]);
            let part = decode_part_of(b, base, i, &node, &loc, bytes)?;
            let _ = node.parts[i].data.set(part);
        }
        Ok(node)
    }

    /// Puts a modified node back (dirty).
    pub fn put_dirty(&mut self, b: BlockNum, mut node: Node) {
        self.release_hold(b);
        node.mark_modified();
        self.cache.put(b, node, true);
    }

    /// Puts back a changed node whose partitions have no places on disk
    /// (it was dirty when taken, [`Self::take_full_tallied`], or
    /// [`Node::mark_modified`] ran), with its tally: none of its
    /// partitions is visited again to forget a place or to count it.
    pub fn put_dirty_tallied(&mut self, b: BlockNum, node: Node, tally: Tally) {
        debug_assert!(node
            .parts
            .iter()
            .all(|p| p.disk.is_none() && p.summary.is_none()));
        self.release_hold(b);
        self.cache.put_tallied(b, node, tally);
    }

    /// Puts a node back unchanged.
    pub fn put_clean(&mut self, b: BlockNum, node: Node, dirty: bool) {
        self.release_hold(b);
        self.cache.put(b, node, dirty);
    }
}

/// Node `b`'s header from `buf` (its first `x.header_len` bytes), checked
/// against the block table.
fn check_header(b: BlockNum, height: u8, x: &Extent, buf: &[u8]) -> Result<Node> {
    let buf = &buf[..x.header_len as usize];
    if crate::format::checksum(&buf[..buf.len().saturating_sub(4)]) != x.header_crc {
        return Err(Error::corrupt(
            "node header",
            x.offset,
            format!("block {b}: header checksum does not match the block table"),
        ));
    }
    let node = decode_header(buf, b, x.len)
        .map_err(|d| Error::corrupt("node header", x.offset, format!("block {b}: {d}")))?;
    if node.height != height {
        return Err(Error::corrupt(
            "node header",
            x.offset,
            format!("block {b} has height {}, table says {height}", node.height),
        ));
    }
    Ok(node)
}

/// Node `b` (of `height`) read whole from extent `x` in one request and
/// checked; needs no lock (the flush read-ahead thread calls it).
pub(crate) fn read_whole_at(
    env: Env<'_>,
    b: BlockNum,
    height: u8,
    x: &Extent,
    how: WholeRead,
) -> Result<Node> {
    if how == WholeRead::Shared && height == 0 {
        let read = Arc::new(env.read_owned(x.offset, x.len as usize)?);
        env.stats.add_node_read();
        let node = decode_whole(b, height, x, read.bytes(), Some(&read))?;
        if node.has_shared_basements() {
            env.stats.add_shared_node_read();
        }
        return Ok(node);
    }
    let mut decoded = None;
    env.read_with(x.offset, x.len as usize, &mut |bytes| {
        decoded = Some(decode_whole(b, height, x, bytes, None));
    })?;
    env.stats.add_node_read();
    decoded.expect("read_with hands over the bytes when it succeeds")
}

/// How a node read whole keeps its partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WholeRead {
    /// Each partition copied out of the device's reused read buffer: for
    /// a node the writer is about to change (the flush read-ahead).
    Copied,
    /// A leaf whose basements are all stored uncompressed keeps them as
    /// slices of the one buffer the node was read into (no copy): for
    /// readers (scans, a file's read-ahead). The writer gives them bytes
    /// of their own before it changes the leaf ([`Node::unshare`]).
    Shared,
}

/// Node `b` with every partition decoded, from the bytes of its whole
/// extent; `read`, if given, holds those bytes, and an uncompressed leaf's
/// basements are kept as slices of it.
fn decode_whole(
    b: BlockNum,
    height: u8,
    x: &Extent,
    bytes: &[u8],
    read: Option<&Arc<wodfs_device::OwnedRead>>,
) -> Result<Node> {
    if bytes.len() < x.header_len as usize {
        return Err(Error::corrupt(
            "node header",
            x.offset,
            format!("block {b}: header longer than its extent"),
        ));
    }
    let node = check_header(b, height, x, bytes)?;
    let leaf = node.is_leaf();
    // Shared only if every basement is: a buffer kept for some of them
    // would hold the others' stored bytes too, counted nowhere.
    let share = read.filter(|_| {
        leaf && node.parts.iter().all(|slot| {
            slot.disk
                .is_some_and(|loc| Compression::from_u8(loc.codec) == Some(Compression::None))
        })
    });
    for (i, slot) in node.parts.iter().enumerate() {
        let loc = part_place(b, x.offset, i, slot)?;
        let start = loc.offset as usize;
        let stored = bytes
            .get(start..start + loc.stored_len as usize)
            .ok_or_else(|| {
                Error::corrupt(
                    "partition",
                    x.offset + u64::from(loc.offset),
                    format!("block {b} partition {i} lies past the end of its extent"),
                )
            })?;
        let part = match share {
            Some(read) => decode_shared_basement(read, start, &loc)
                .map_err(part_damaged(b, x.offset, i, &loc))?,
            None => decode_part_of(b, x.offset, i, &node, &loc, stored.to_vec())?,
        };
        let _ = slot.data.set(part);
    }
    Ok(node)
}

/// Where partition `i` of node `b` (extent at `base`) lies in its extent.
fn part_place(b: BlockNum, base: u64, i: usize, slot: &PartSlot) -> Result<PartLoc> {
    slot.disk.ok_or_else(|| {
        Error::corrupt(
            "partition",
            base,
            format!("block {b} partition {i} has no place"),
        )
    })
}

/// Partition `i` of node `b` (extent at `base`), decoded from its stored
/// bytes; a damaged one is a corruption error naming its address.
fn decode_part_of(
    b: BlockNum,
    base: u64,
    i: usize,
    node: &Node,
    loc: &PartLoc,
    stored: Vec<u8>,
) -> Result<Part> {
    decode_part(stored, loc, node, i).map_err(part_damaged(b, base, i, loc))
}

/// The corruption error of partition `i` of node `b` (extent at `base`)
/// that failed to decode with `why`.
fn part_damaged(b: BlockNum, base: u64, i: usize, loc: &PartLoc) -> impl FnOnce(String) -> Error {
    let at = base + u64::from(loc.offset);
    move |why| Error::corrupt("partition", at, format!("block {b} partition {i}: {why}"))
}
