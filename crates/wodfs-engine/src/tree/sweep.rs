//! Readers that go through the leaves in key order over many small
//! reads, none of which asks for more than one leaf.
//!
//! `grep -r`, `tar c`, `cp -r` and `rsync` read file after file in
//! directory order, which is key order: each file's blocks lie right
//! after the previous file's, so the readers walk the data index leaf
//! after leaf, one small read at a time. No single read asks for the
//! next leaf, so neither a scan's read-ahead (`read_ahead::next_leaf`)
//! nor a file's (`Tree::read_ahead`) starts, and the request thread read
//! and decompressed each leaf itself when it got there: in a cold
//! `grep -r` of the kernel tree, 15 % of its samples.
//!
//! [`Sweep`] watches the leaves readers arrive in. A reader arriving in a
//! leaf it has to load (or that a read-ahead loaded and no reader has
//! used yet) reports the leaf and its bounds. When a leaf starts where a
//! recently reported one ends, and so did the two before it, readers are
//! sweeping forward, and the next leaf is read on a read-ahead thread
//! while they work through this one. A random reader rarely lands in the
//! leaf right after one it read last, and three times in a row almost
//! never, so it starts no read-ahead.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::frame::Bounds;
use crate::table::BlockNum;

/// Forward walks followed at once: a file reader walks the metadata
/// index (lookups) and the data index (reads) in step, one walk each.
const WALKS: usize = 4;

/// Leaves in a row, each starting where the one before ended, before the
/// next one is read ahead. A random reader lands just after one of the
/// [`WALKS`] leaves it arrived in last about `WALKS / leaves` of the time,
/// and a walk keeps its slot for about `WALKS` arrivals, so the third leaf
/// of a walk comes about `(WALKS / leaves)²` of the time: one arrival in
/// about 6,000 over 300 leaves, which is what io_counts' segment test
/// sees (one read-ahead in its 6,000 random point queries; with two in a
/// row it was dozens): a wasted leaf read that rare costs nothing
/// measurable.
const STEPS_BEFORE_READ_AHEAD: u32 = 3;

#[derive(Debug, Default)]
pub(crate) struct Sweep {
    inner: Mutex<Inner>,
    /// A start is waiting ([`Inner::start`]): every point query and scan
    /// asks, and most find none without taking the lock.
    started: AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    walks: [Walk; WALKS],
    /// The slot a leaf that continues no walk takes next.
    next: usize,
    /// Where the next read-ahead starts: the upper bound of a leaf a
    /// sweeping reader just arrived in. Taken by the reader's thread
    /// once it is out of the tree ([`Sweep::take_start`]).
    start: Option<Vec<u8>>,
}

/// The last leaf a walk arrived in.
#[derive(Debug, Default)]
struct Walk {
    /// `None`: a free slot.
    leaf: Option<BlockNum>,
    /// The leaf's upper bound (`None`: the last leaf; nothing follows).
    hi: Option<Vec<u8>>,
    /// Leaves in a row this walk went through.
    steps: u32,
}

impl Sweep {
    /// A reader arrived in leaf `leaf` (bounds `bounds`) and had to load
    /// it, or found it loaded by a read-ahead. Notes whether that
    /// continues a walk; if it does for the [`STEPS_BEFORE_READ_AHEAD`]th
    /// leaf or more, the leaf after it is to be read ahead
    /// ([`Sweep::take_start`]).
    pub fn arrived(&self, leaf: BlockNum, bounds: &Bounds) {
        let mut s = self.inner.lock();
        if s.knows(leaf) {
            // The same leaf again (one partition after another).
            return;
        }
        let continued = s
            .walks
            .iter()
            .position(|w| w.hi.as_deref() == Some(bounds.lo.as_slice()));
        let (slot, steps) = match continued {
            Some(i) => (i, s.walks[i].steps + 1),
            None => {
                let i = s.next;
                s.next = (i + 1) % WALKS;
                (i, 1)
            }
        };
        s.walks[slot] = Walk {
            leaf: Some(leaf),
            hi: bounds.hi.clone(),
            steps,
        };
        if steps >= STEPS_BEFORE_READ_AHEAD {
            if let Some(hi) = &bounds.hi {
                s.start = Some(hi.clone());
                self.started.store(true, Ordering::Release);
            }
        }
    }

    /// Is `leaf` the last leaf of a walk? Then arriving in it again
    /// changes nothing, and its bounds need not be found.
    pub fn knows(&self, leaf: BlockNum) -> bool {
        self.inner.lock().knows(leaf)
    }

    /// Where a read-ahead for a sweeping reader should start, if one
    /// should. A plain load first: most callers find none and do not
    /// write the flag every thread reads.
    pub fn take_start(&self) -> Option<Vec<u8>> {
        if !(self.started.load(Ordering::Acquire) && self.started.swap(false, Ordering::AcqRel)) {
            return None;
        }
        self.inner.lock().start.take()
    }
}

impl Inner {
    fn knows(&self, leaf: BlockNum) -> bool {
        self.walks.iter().any(|w| w.leaf == Some(leaf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(lo: &[u8], hi: Option<&[u8]>) -> Bounds {
        Bounds {
            lo: lo.to_vec(),
            hi: hi.map(<[u8]>::to_vec),
        }
    }

    #[test]
    fn three_leaves_in_a_row_start_a_read_ahead_at_the_next() {
        let s = Sweep::default();
        s.arrived(10, &leaf(b"a", Some(b"c")));
        assert!(s.knows(10) && !s.knows(11));
        // The same leaf again: nothing new.
        s.arrived(10, &leaf(b"a", Some(b"c")));
        s.arrived(11, &leaf(b"c", Some(b"e")));
        assert_eq!(s.take_start(), None);
        s.arrived(12, &leaf(b"e", Some(b"g")));
        assert_eq!(s.take_start(), Some(b"g".to_vec()));
        assert_eq!(s.take_start(), None, "taken once");
        s.arrived(13, &leaf(b"g", None));
        assert_eq!(s.take_start(), None, "the last leaf: nothing follows");
    }

    #[test]
    fn a_leaf_that_continues_nothing_starts_no_read_ahead() {
        let s = Sweep::default();
        s.arrived(10, &leaf(b"a", Some(b"c")));
        s.arrived(20, &leaf(b"m", Some(b"p")));
        s.arrived(30, &leaf(b"d", Some(b"f")));
        s.arrived(40, &leaf(b"x", Some(b"z")));
        assert_eq!(s.take_start(), None);
    }

    #[test]
    fn interleaved_walks_are_each_followed() {
        let s = Sweep::default();
        // Metadata index (m...) and data index (d...) in step.
        s.arrived(1, &leaf(b"m1", Some(b"m2")));
        s.arrived(2, &leaf(b"d1", Some(b"d2")));
        s.arrived(3, &leaf(b"m2", Some(b"m3")));
        s.arrived(4, &leaf(b"d2", Some(b"d3")));
        assert_eq!(s.take_start(), None);
        s.arrived(5, &leaf(b"m3", Some(b"m4")));
        assert_eq!(s.take_start(), Some(b"m4".to_vec()));
        s.arrived(6, &leaf(b"d3", Some(b"d4")));
        assert_eq!(s.take_start(), Some(b"d4".to_vec()));
    }
}
