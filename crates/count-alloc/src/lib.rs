//! A global allocator that forwards every call to the system allocator
//! and counts the bytes live and their peak: what a memory budget is
//! checked against from outside the code that keeps it
//! (`wodfs-engine`'s `tests/memory_budget.rs`), and what
//! `engine-compare --features heap-count` prints. A user installs it:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: count_alloc::Counting = count_alloc::Counting;
//! ```
//!
//! [`CountingOver`] counts in front of another allocator (the `wodfs`
//! binary's mimalloc, with its `heap-count` feature), so the live heap can
//! be set beside the resident memory the allocator keeps.
//!
//! The counters are global: one process, one count.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The counting allocator over the system allocator.
#[derive(Debug)]
pub struct Counting;

/// The counting allocator over `A`.
#[derive(Debug)]
pub struct CountingOver<A>(pub A);

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `CountingOver(System)`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on as it is.
        unsafe { CountingOver(System).alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { CountingOver(System).dealloc(p, l) }
    }
}

// SAFETY: every call is forwarded unchanged to `A`; only counters are
// added.
unsafe impl<A: GlobalAlloc> GlobalAlloc for CountingOver<A> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on as it is.
        let p = unsafe { self.0.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { self.0.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }

    // The inner allocator's own realloc (mimalloc grows in place), not
    // the default's allocate, copy and free; counted as the change in
    // size, so a block grown in place does not count twice at the peak.
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { self.0.realloc(p, l, new_size) };
        if !q.is_null() {
            if new_size >= l.size() {
                let grown = new_size - l.size();
                let now = LIVE.fetch_add(grown, Relaxed) + grown;
                PEAK.fetch_max(now, Relaxed);
            } else {
                LIVE.fetch_sub(l.size() - new_size, Relaxed);
            }
        }
        q
    }
}

/// Bytes allocated and not yet freed.
pub fn live() -> usize {
    LIVE.load(Relaxed)
}

/// The most bytes live at once since the start or the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Starts a new peak from what is live now, and returns that.
pub fn reset_peak() -> usize {
    let now = LIVE.load(Relaxed);
    PEAK.store(now, Relaxed);
    now
}

#[cfg(test)]
mod tests {
    #[global_allocator]
    static ALLOC: super::Counting = super::Counting;

    /// A megabyte allocated shows in the live count and the peak; freed,
    /// it leaves the live count and stays in the peak until a reset.
    #[test]
    fn counts_what_is_live_and_its_peak() {
        let base = super::reset_peak();
        let block = vec![1u8; 1 << 20];
        assert!(super::live() >= base + (1 << 20));
        assert!(super::peak() >= base + (1 << 20));
        drop(block);
        assert!(super::live() < base + (1 << 20));
        assert!(super::peak() >= base + (1 << 20));
        assert!(super::reset_peak() < base + (1 << 20));
    }
}
