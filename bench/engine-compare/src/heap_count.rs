//! `--features heap-count`: the process's live heap, counted by
//! `count-alloc`'s global allocator, printed to stderr each second with
//! its peak. For finding what a resident set beyond the cache is made of
//! (live heap, or the allocator's fragmentation); it costs every
//! allocation two atomic operations, so runs that report numbers are built
//! without it.

use std::time::Duration;

#[global_allocator]
static ALLOC: count_alloc::Counting = count_alloc::Counting;

/// Starts the thread that prints the live and peak heap every second.
pub fn start_reporting() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_secs(1));
        eprintln!(
            "heap-count: live {} MiB, peak {} MiB",
            count_alloc::live() >> 20,
            count_alloc::peak() >> 20
        );
    });
}
