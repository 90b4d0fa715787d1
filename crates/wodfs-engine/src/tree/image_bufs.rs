//! Buffers that leaf images are encoded into, kept for the next image
//! once their write ends.
//!
//! A write-back call encodes each leaf into a buffer of about a node's
//! size (4 MiB) and frees it when the write ends, a few milliseconds
//! later during a stream. The allocator gives such freed pages back to
//! the system and the next image faults in and clears new ones: in a
//! 4 GiB sequential write the kernel's clearing of those pages was 10 %
//! of the daemon's samples, on top of the faults themselves (session 50,
//! `perf record` of `fsbench seqwrite`; gone with
//! `MIMALLOC_PURGE_DELAY=-1`, which is not an option for the whole heap).
//! Reusing a few buffers keeps their pages mapped.

use parking_lot::Mutex;

use super::in_flight::IN_FLIGHT_NODES;

/// Buffers kept: as many images as a write-back call has in flight, and
/// the one being encoded meanwhile. The write-back allowance outside the
/// cache budget (`docs/ARCHITECTURE.md`, "Memory") already counts five
/// node images; kept here, they stay resident between streams.
const KEPT: usize = IN_FLIGHT_NODES + 1;

/// Buffers of leaf images, for reuse.
#[derive(Debug)]
pub(crate) struct ImageBufs {
    kept: Mutex<Vec<Vec<u8>>>,
    /// Largest capacity worth keeping: twice a node (a leaf is split
    /// before it grows much past one); a larger one is freed.
    max_bytes: usize,
}

impl ImageBufs {
    pub fn new(node_bytes: usize) -> Self {
        ImageBufs {
            kept: Mutex::new(Vec::new()),
            max_bytes: 2 * node_bytes,
        }
    }

    /// An empty buffer, with the capacity of one that was given back if
    /// there is one.
    pub fn take(&self) -> Vec<u8> {
        self.kept.lock().pop().unwrap_or_default()
    }

    /// Keeps `buf` for a later [`ImageBufs::take`], unless enough are
    /// kept or it is too large to keep.
    pub fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > self.max_bytes {
            return;
        }
        buf.clear();
        let mut kept = self.kept.lock();
        if kept.len() < KEPT {
            kept.push(buf);
        }
    }

    /// How many buffers are kept now.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kept.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_empty() {
        let bufs = ImageBufs::new(1024);
        let mut b = bufs.take();
        b.extend_from_slice(&[7; 1000]);
        let (ptr, cap) = (b.as_ptr(), b.capacity());
        bufs.give_back(b);
        let again = bufs.take();
        assert!(again.is_empty());
        assert_eq!((again.as_ptr(), again.capacity()), (ptr, cap));
        assert_eq!(bufs.take().capacity(), 0, "only one was kept");
    }

    #[test]
    fn at_most_a_few_buffers_are_kept_and_none_too_large() {
        let bufs = ImageBufs::new(1024);
        bufs.give_back(Vec::with_capacity(4096));
        assert_eq!(bufs.take().capacity(), 0, "larger than two nodes");
        for _ in 0..2 * KEPT {
            bufs.give_back(Vec::with_capacity(512));
        }
        let taken = std::iter::from_fn(|| Some(bufs.take()))
            .take_while(|b| b.capacity() > 0)
            .count();
        assert_eq!(taken, KEPT);
    }
}
