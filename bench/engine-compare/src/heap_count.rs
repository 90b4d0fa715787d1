//! `--features heap-count`: the process's live heap, counted by a global
//! allocator that forwards to the system's, printed to stderr each second
//! with its peak. For finding what a resident set beyond the cache is made
//! of (live heap, or the allocator's fragmentation); it costs every
//! allocation two atomic operations, so runs that report numbers are built
//! without it.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; only counters are
// added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on as it is.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The live heap's peak so far, in bytes (the wodfs adapter's trace).
#[cfg_attr(not(feature = "wodfs"), allow(dead_code))]
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}

/// Starts the thread that prints the live and peak heap every second.
pub fn start_reporting() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_secs(1));
        eprintln!(
            "heap-count: live {} MiB, peak {} MiB",
            LIVE.load(Relaxed) >> 20,
            PEAK.load(Relaxed) >> 20
        );
    });
}
