//! Decoded pieces of segmented message buffers, kept for point queries.
//!
//! A point query whose key may be buffered in a node's unloaded buffer
//! reads the one piece (segment) that can hold it, about a partition's
//! size, and does not load the buffer (`State::probe_buffer`): loading a
//! buffer of hundreds of KiB for one key made point reads slower. But it
//! kept nothing, so the next query through the same piece read,
//! checksummed, decompressed and scanned it again: under TableFS's cold
//! queries (a million entries, a third of them still in buffers) that was
//! 8.5 % of the request thread, the same few thousand pieces each probed
//! hundreds of times (session 33). This cache keeps the decoded, indexed
//! pieces, keyed by their place on the device.
//!
//! Coherence: a piece at a device offset never changes while that space
//! is allocated (nodes are written to newly allocated extents), so an
//! entry goes stale only when its space is allocated again, and the block
//! table forgets the allocated range then ([`SegmentCache::forget`]).
//! Probes run under the tree's read lock and allocation under its write
//! lock, so no probe can insert a piece of space being reallocated. An
//! entry also carries the checksum the directory names for the piece.
//!
//! Memory: bounded by a byte budget carved out of the node cache's (see
//! `budget_split`); when full it starts over, which for the random probes
//! it serves keeps as many hits as recency tracking would, at no cost per
//! hit.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::format::segments::Piece;

/// The share of the cache budget the pieces may use.
pub(crate) const SEGMENT_CACHE_SHARE: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct SegmentCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Device offset of a piece -> its checksum and contents.
    map: BTreeMap<u64, (u32, Arc<Piece>)>,
    bytes: usize,
}

impl SegmentCache {
    /// A cache of at most `capacity` bytes (0: keeps nothing).
    pub fn new(capacity: usize) -> Self {
        SegmentCache {
            capacity,
            inner: Mutex::default(),
        }
    }

    /// The piece at device offset `addr`, if cached with checksum `crc`.
    pub fn get(&self, addr: u64, crc: u32) -> Option<Arc<Piece>> {
        let inner = self.inner.lock();
        match inner.map.get(&addr) {
            Some((c, piece)) if *c == crc => Some(piece.clone()),
            _ => None,
        }
    }

    /// Keeps the piece read from device offset `addr`.
    pub fn put(&self, addr: u64, crc: u32, piece: Arc<Piece>) {
        let size = piece.mem_bytes();
        if size > self.capacity / 4 {
            return;
        }
        let mut inner = self.inner.lock();
        if inner.bytes + size > self.capacity {
            inner.map.clear();
            inner.bytes = 0;
        }
        if let Some((_, old)) = inner.map.insert(addr, (crc, piece)) {
            inner.bytes -= old.mem_bytes();
        }
        inner.bytes += size;
    }

    /// Drops every piece in `[offset, offset + len)`: that space was just
    /// allocated for new contents.
    pub fn forget(&self, offset: u64, len: u64) {
        let mut inner = self.inner.lock();
        if inner.map.is_empty() {
            return;
        }
        let gone: Vec<u64> = inner
            .map
            .range(offset..offset.saturating_add(len))
            .map(|(&a, _)| a)
            .collect();
        for a in gone {
            if let Some((_, p)) = inner.map.remove(&a) {
                inner.bytes -= p.mem_bytes();
            }
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty piece holding `n` bytes of heap.
    fn piece(n: usize) -> Arc<Piece> {
        Arc::new(Piece::parse(Vec::with_capacity(n), false, None).unwrap())
    }

    #[test]
    fn a_hit_needs_the_same_place_and_checksum() {
        let c = SegmentCache::new(1 << 20);
        c.put(4096, 7, piece(100));
        assert!(c.get(4096, 7).is_some());
        assert!(c.get(4096, 8).is_none());
        assert!(c.get(8192, 7).is_none());
    }

    #[test]
    fn allocating_the_space_again_forgets_its_pieces() {
        let c = SegmentCache::new(1 << 20);
        for a in [4096, 8192, 12288, 16384] {
            c.put(a, 1, piece(100));
        }
        c.forget(8192, 8192);
        assert!(c.get(4096, 1).is_some());
        assert!(c.get(8192, 1).is_none());
        assert!(c.get(12288, 1).is_none());
        assert!(c.get(16384, 1).is_some());
    }

    #[test]
    fn it_stays_within_its_capacity() {
        let c = SegmentCache::new(10_000);
        for a in 0..100 {
            c.put(a * 4096, 1, piece(1000));
            assert!(c.bytes() <= 10_000);
        }
        assert!(c.get(99 * 4096, 1).is_some());
        let none = SegmentCache::new(0);
        none.put(0, 1, piece(10));
        assert!(none.get(0, 1).is_none());
    }
}
