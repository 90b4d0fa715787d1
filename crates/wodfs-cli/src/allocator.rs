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

/// No transparent huge pages for this process's heap. mimalloc asks for
/// them (`MADV_HUGEPAGE` on its arenas), and a huge page is resident whole
/// however little of it is in use: the heap churns node contents and
/// messages, and khugepaged collapses the partly freed regions back
/// into huge pages. Postmark's 1,000,000 transactions peaked at 535-539
/// MiB resident with them (160 MiB of it huge pages) against 460-491
/// without, for a live heap of 291 MiB; a full benchmark run, whose
/// earlier steps leave the host's memory in another state, saw 618.
/// TokuDB, the engine BetrFS is built on, refuses to start with them
/// enabled for the same reason. mimalloc applies its own option once,
/// before `main`, so the process flag it would set is set here too.
///
/// Except where a mapping asks for them: the device's read buffers
/// (`wodfs-device/src/huge.rs`), whole-node direct reads, which the loop
/// device cuts into requests of at most 512 KiB when their memory is
/// scattered pages (a cold 4 GiB sequential read: 630-720 KiB requests
/// and 0.7× xfs's speed; 1 MiB requests with huge pages). Linux 6.18's
/// `PR_THP_DISABLE_EXCEPT_ADVISED` says so; an older kernel refuses the
/// flag, and then nothing gets huge pages, as before. The arena mimalloc
/// mapped before `main` asked for them while its option was still on; that
/// advice is taken back.
#[allow(unsafe_code)]
fn disable_transparent_huge_pages() {
    // SAFETY: sets an option, on the only thread (see `configure`).
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    // SAFETY: prctl with integer arguments only.
    let except_advised = unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            1,
            PR_THP_DISABLE_EXCEPT_ADVISED,
            0,
            0,
        )
    } == 0;
    if except_advised {
        withdraw_huge_page_advice();
    } else {
        // SAFETY: as above. A kernel without the flag (before 3.15)
        // fails it, and the process keeps its pages.
        let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    }
}

/// `PR_SET_THP_DISABLE`'s flag (Linux 6.18) that leaves huge pages to the
/// mappings advised `MADV_HUGEPAGE`; not in the `libc` crate yet.
const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// Advises `MADV_NOHUGEPAGE` on every mapping advised `MADV_HUGEPAGE` so
/// far (at startup: mimalloc's first arena), as `/proc/self/smaps` lists
/// them. Best effort: without `/proc` the advice stays.
#[allow(unsafe_code)]
fn withdraw_huge_page_advice() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    for (lo, hi) in huge_page_advised(&smaps) {
        // SAFETY: advice on a range that is mapped (the kernel listed it);
        // `MADV_NOHUGEPAGE` changes no contents.
        let _ = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_NOHUGEPAGE) };
    }
}

/// The address ranges whose `VmFlags` in `smaps` include `hg`.
fn huge_page_advised(smaps: &str) -> Vec<(usize, usize)> {
    let mut range = None;
    let mut found = Vec::new();
    for line in smaps.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if flags.split_whitespace().any(|f| f == "hg") {
                found.extend(range.take());
            }
        } else if let Some(r) = mapping_range(line) {
            range = Some(r);
        }
    }
    found
}

/// The range of a mapping's first line in `smaps` ("lo-hi perms ...").
fn mapping_range(line: &str) -> Option<(usize, usize)> {
    let (lo, hi) = line.split_whitespace().next()?.split_once('-')?;
    Some((
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
    ))
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
        assert!(
            flag == 1 || flag == 1 | PR_THP_DISABLE_EXCEPT_ADVISED as i32,
            "the process may still get huge pages (flag {flag})"
        );
        if flag != 1 {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            assert_eq!(
                huge_page_advised(&smaps),
                [],
                "a mapping still asks for huge pages"
            );
        }
    }

    #[test]
    fn advised_mappings_are_found_in_smaps() {
        let smaps = "20000000000-20040000000 rw-p 00000000 00:00 0\n\
                     Size:            1048576 kB\n\
                     VmFlags: rd wr mr mw me nr hg\n\
                     7f13c3000000-7f13c3410000 rw-p 00000000 00:00 0\n\
                     Size:               4160 kB\n\
                     VmFlags: rd wr mr mw me ac\n";
        assert_eq!(
            huge_page_advised(smaps),
            [(0x200_0000_0000, 0x200_4000_0000)]
        );
    }
}
