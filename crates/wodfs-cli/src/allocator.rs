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

/// mimalloc's `mi_option_allow_thp` (same pinned version).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Sets the allocator's options, before any thread starts (mimalloc's
/// option setters are not thread-safe). `MIMALLOC_PURGE_DELAY` and
/// `MIMALLOC_ALLOW_THP` in the environment still win, for experiments.
/// The workspace denies unsafe code; these foreign calls are allowed
/// here.
#[allow(unsafe_code)]
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: called first thing in `main`, on the only thread.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        disable_transparent_huge_pages();
    }
}

/// No transparent huge pages for this process. mimalloc asks for them
/// (`MADV_HUGEPAGE` on its arenas), and a huge page is resident whole
/// however little of it is in use: the heap churns node contents and
/// messages, and khugepaged collapses the partly freed regions back
/// into huge pages. Postmark's 1,000,000 transactions peaked at 535-539
/// MiB resident with them (160 MiB of it huge pages) against 460-491
/// without, for a live heap of 291 MiB; a full benchmark run, whose
/// earlier steps leave the host's memory in another state, saw 618.
/// TokuDB, the engine BetrFS is built on, refuses to start with them
/// enabled for the same reason. The price is page faults and TLB misses:
/// Postmark's daemon used 5-8 % more CPU, a cold sequential read ran 6-16
/// % slower (`docs/ARCHITECTURE.md`, "Memory"). mimalloc applies its own
/// option once, before `main`, so the process flag it would set is set
/// here too.
#[allow(unsafe_code)]
fn disable_transparent_huge_pages() {
    // SAFETY: sets an option, on the only thread (see `configure`).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    // SAFETY: prctl with integer arguments only. A kernel without the
    // flag (before 3.15) fails it, and the process keeps its pages.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
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

    #[test]
    #[allow(unsafe_code)]
    fn transparent_huge_pages_are_off() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            return;
        }
        // SAFETY: reads options.
        let get = |o| unsafe { libmimalloc_sys::mi_option_get(o) };
        // Two options on, `arena_max_object_size` is 2 GiB in KiB
        // by default: the enum is laid out as the constant assumes.
        assert_eq!(
            get(MI_OPTION_ALLOW_THP + 2),
            2 << 20,
            "mimalloc's options moved"
        );
        // Not `configure`: the other test reads the purge delay's default.
        disable_transparent_huge_pages();
        assert_eq!(get(MI_OPTION_ALLOW_THP), 0);
        // SAFETY: prctl with integer arguments only.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1, "the process may still get huge pages");
    }
}
