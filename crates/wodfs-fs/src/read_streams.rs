//! Which reads continue a sequential stream, so that the engine reads
//! the leaves after them ahead ([`wodfs_engine::Tree::read_ahead`]).
//!
//! A file read sequentially reaches the daemon as 1 MiB requests, each
//! answered by a scan of its blocks. The FUSE adapter answers a window's
//! two requests on two threads, so they may arrive here out of order: the
//! one that misses its stream only skips its read-ahead call (and takes a
//! slot), and the stream goes on from the other. Without read-ahead of our own every leaf (megabytes) is read
//! from the device when the first request reaches it, while nothing else
//! happens: the device and the request thread take turns. A large read
//! that starts where an earlier one ended is the sign of a sequential
//! reader; reads elsewhere (random large reads) start no read-ahead, so
//! they cost no device bandwidth they do not use.

use parking_lot::Mutex;

/// Streams followed at once: readers of that many files at a time all
/// get read-ahead.
const STREAMS: usize = 8;

#[derive(Debug, Default)]
pub(crate) struct ReadStreams {
    /// Where each stream's next read would start (a data key), and the
    /// slot to replace next.
    slots: Mutex<([Option<Vec<u8>>; STREAMS], usize)>,
}

impl ReadStreams {
    /// Records a read of the keys `[lo, hi)`; true if it continues a
    /// stream (it starts where an earlier read ended).
    pub fn follows(&self, lo: &[u8], hi: &[u8]) -> bool {
        let mut guard = self.slots.lock();
        let (slots, hand) = &mut *guard;
        if let Some(slot) = slots.iter_mut().find(|s| s.as_deref() == Some(lo)) {
            *slot = Some(hi.to_vec());
            return true;
        }
        slots[*hand] = Some(hi.to_vec());
        *hand = (*hand + 1) % STREAMS;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_that_starts_where_another_ended_follows_it() {
        let s = ReadStreams::default();
        assert!(!s.follows(b"a0", b"a1"));
        assert!(s.follows(b"a1", b"a2"));
        assert!(s.follows(b"a2", b"a3"));
        assert!(!s.follows(b"a9", b"b0"), "a jump starts a new stream");
    }

    #[test]
    fn interleaved_streams_are_followed_separately() {
        let s = ReadStreams::default();
        assert!(!s.follows(b"a0", b"a1"));
        assert!(!s.follows(b"b0", b"b1"));
        assert!(s.follows(b"a1", b"a2"));
        assert!(s.follows(b"b1", b"b2"));
    }

    #[test]
    fn the_oldest_stream_is_forgotten_first() {
        let s = ReadStreams::default();
        for i in 0..STREAMS as u8 {
            assert!(!s.follows(&[i, 0], &[i, 1]));
        }
        assert!(!s.follows(b"new", b"new1"), "replaces stream 0");
        assert!(!s.follows(&[0, 1], &[0, 2]), "stream 0 was forgotten");
        assert!(s.follows(&[2, 1], &[2, 2]));
    }
}
