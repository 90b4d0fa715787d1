//! Which partition reads may let the device read ahead.
//!
//! A point query reads a node header and one partition per level, a few
//! KiB somewhere in the image. Left to guess, the kernel reads a window
//! of up to 128 KiB around such a read whenever the pages before it
//! happen to be cached, which under memory pressure costs device time
//! and evicts pages that someone asked for (engine-compare's point reads:
//! 27.5 KiB read from the device per lookup, 17.3 KiB once point reads
//! were marked random). So those reads go through
//! [`wodfs_device::Device::read_random_at`].
//!
//! The exception is a reader going through neighbouring keys one point
//! query at a time: the file system reads small files with point queries,
//! and `grep -r` or `tar` read them in key order, so their partitions are
//! loaded in the order they lie on disk. There the kernel's read-ahead
//! turns many small synchronous reads into a few large ones. A partition
//! read that starts where one of the last few partition reads ended (or a
//! little after: partitions already cached are skipped) keeps the
//! ordinary read path, and so the kernel's stream detection.
//!
//! Header reads are always random and are not tracked: a point query
//! reads a node's header and then one of that node's partitions, which
//! lies after the header but is no stream. Whole-node reads (flushes,
//! scans, read-ahead threads) are tracked like partition reads. They used
//! to take the ordinary path always, and the kernel then read as much
//! again past each node, into whatever extent came next on disk:
//! engine-compare's full scan read 882 MB from the device for 3.5 M
//! records (about 430 MB of leaves), its random inserts 3.0 GB; tracked,
//! 531 MB and 1.9 GB, and the scan ran at 4.66 M records/s instead of
//! 3.3-4.2 M. Nodes that lie one after another on disk and are read in
//! that order still continue each other and keep the kernel's read-ahead.

use parking_lot::Mutex;

/// Streams followed at once: the file system interleaves data reads with
/// attribute and directory lookups, each its own stream.
const STREAMS: usize = 8;

/// How far past a recent read's end a read may start and still continue
/// it: a few partitions (16 KiB each by default, less once compressed)
/// that were found in the node cache, within one kernel read-ahead window.
const CONTINUE_GAP_BYTES: u64 = 128 << 10;

/// The ends of the most recent partition reads.
#[derive(Debug, Default)]
pub(crate) struct ReadPattern {
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    /// End offsets of recent reads; 0 is a free slot (offset 0 is the
    /// superblock, never a node).
    ends: [u64; STREAMS],
    /// The slot a read that continues nothing takes next.
    next: usize,
}

impl ReadPattern {
    /// Records a read of `[offset, offset + len)` and tells whether it
    /// continues a recent one (then the device may read ahead).
    pub fn continues(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let mut r = self.recent.lock();
        let hit = r
            .ends
            .iter()
            .position(|&e| e != 0 && offset >= e && offset - e <= CONTINUE_GAP_BYTES);
        let slot = hit.unwrap_or(r.next);
        if hit.is_none() {
            r.next = (r.next + 1) % STREAMS;
        }
        r.ends[slot] = end;
        hit.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_where_another_ended_continues_it() {
        let p = ReadPattern::default();
        assert!(!p.continues(1 << 20, 4096));
        assert!(p.continues((1 << 20) + 4096, 8192));
        // A partition skipped because it was cached: still the stream.
        assert!(p.continues((1 << 20) + 12288 + 16384, 100));
        // Backwards, or past the gap: random.
        assert!(!p.continues(1 << 20, 4096));
        assert!(!p.continues((1 << 30) + CONTINUE_GAP_BYTES + 1, 10));
    }

    #[test]
    fn interleaved_streams_are_followed_until_too_many_others_come_between() {
        let p = ReadPattern::default();
        let (a, b) = (1u64 << 30, 2u64 << 30);
        assert!(!p.continues(a, 100));
        assert!(!p.continues(b, 100));
        assert!(p.continues(a + 100, 100));
        assert!(p.continues(b + 100, 100));
        // STREAMS other random reads push stream `a` out.
        for i in 0..STREAMS as u64 {
            assert!(!p.continues((10 + i) << 30, 100));
        }
        assert!(!p.continues(a + 200, 100));
    }
}
