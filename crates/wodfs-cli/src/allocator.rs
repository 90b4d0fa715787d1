//! The daemon's allocator: mimalloc, and how soon it gives freed memory
//! back to the system.

/// mimalloc instead of glibc's allocator: the engine allocates a message,
/// a key and a value per operation, and glibc's malloc and free were a
/// third of the write path's time (`docs/ARCHITECTURE.md`, "Memory").
#[cfg(not(feature = "heap-count"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// With `--features heap-count`: mimalloc behind a counter of the live
/// heap, whose peak `wodfs mount` logs at unmount beside the resident
/// peak (what the allocator keeps beyond what is live).
#[cfg(feature = "heap-count")]
#[global_allocator]
static ALLOCATOR: count_alloc::CountingOver<mimalloc::MiMalloc> =
    count_alloc::CountingOver(mimalloc::MiMalloc);

/// mimalloc's `mi_option_purge_delay` (its `mi_option_t` value in the
/// pinned libmimalloc-sys 0.1.49, mimalloc v3; the crate exports no
/// constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed pages go back to the system after this many milliseconds
/// unused. mimalloc v3's default, 1,000, kept 45-75 MiB more resident at
/// the daemon's peak (Postmark's 300,000 transactions: 484-503 MiB
/// against 450-453 at 100 ms, 426 at 0) with no difference in time
/// measured there or in an untar; 0 made an untar slower before.
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// Sets the allocator's options, before any thread starts (mimalloc's
/// option setters are not thread-safe). `MIMALLOC_PURGE_DELAY` in the
/// environment still wins, for experiments. The workspace denies unsafe
/// code; this one foreign call is allowed here.
#[allow(unsafe_code)]
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: called first thing in `main`, on the only thread.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn the_purge_delay_is_the_option_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an option.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        // Index 15 is the purge delay: mimalloc v3's default for it.
        assert_eq!(get(), 1000, "not mimalloc v3's purge_delay");
        configure();
        assert_eq!(get(), PURGE_DELAY_MS);
    }
}
