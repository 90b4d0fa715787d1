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
/// unused. mimalloc v3's default, 1,000, kept 30-50 MiB more resident at
/// the daemon's peak (Postmark's first 300,000 transactions: 484-503 MiB
/// at 1,000 ms, 473 at 500, 450-453 at 100); shorter delays cost page
/// faults when memory is wanted again (a cold `grep -r` of the kernel
/// tree: 17-19k minor faults at 1,000 ms, 46-48k at 300-500, 114-124k at
/// 100, and 5.7-6.5 s against 6.5-6.7 s at 100). 500 ms is between;
/// `docs/ARCHITECTURE.md` ("Memory") has the measurements.
const PURGE_DELAY_MS: std::ffi::c_long = 500;

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
