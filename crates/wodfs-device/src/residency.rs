//! How much of a byte range the kernel's page cache holds (`cachestat`,
//! Linux 6.5), so that a large read goes past the cache only when the
//! cache holds hardly any of it: what it holds, a read through it takes
//! without a device read.

use std::fs::File;
use std::os::fd::AsRawFd;

/// `cachestat`'s number: one number on every architecture (it came after
/// the syscall tables were unified in Linux 5.1). Not in the `libc` crate
/// for every target yet.
const SYS_CACHESTAT: libc::c_long = 451;

/// Page size the answer is counted in.
const PAGE: u64 = 4096;

/// `struct cachestat_range` (include/uapi/linux/mman.h).
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` (include/uapi/linux/mman.h).
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Whether the page cache holds hardly any (at most a sixteenth) of the
/// pages of `[offset, offset + len)`; `None` where the kernel cannot say
/// (older than 6.5).
// The one system call here that neither `rustix` nor `std` wraps.
#[allow(unsafe_code)]
pub(crate) fn hardly_cached(file: &File, offset: u64, len: u64) -> Option<bool> {
    if len == 0 {
        return Some(true);
    }
    let first = offset / PAGE;
    let pages = (offset + len).div_ceil(PAGE) - first;
    let range = CachestatRange {
        off: first * PAGE,
        len: pages * PAGE,
    };
    let mut stat = Cachestat::default();
    // SAFETY: `cachestat(fd, range, cstat, flags)` reads `range` and
    // writes `stat`; both are live for the call and laid out as the
    // kernel's structs (five and two `__u64`s, no padding), and the
    // descriptor stays open for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(stat.nr_cache * 16 <= pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file just written is in the page cache; after `fadvise(DONTNEED)`
    /// of its clean pages it is not. Skipped where the kernel has no
    /// `cachestat` (older than 6.5).
    #[test]
    fn written_pages_are_cached_and_dropped_ones_are_not() {
        let path = std::env::temp_dir().join(format!("wodfs-residency-{}", std::process::id()));
        let mut file = File::create(&path).unwrap();
        file.write_all(&vec![7u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
        let file = File::open(&path).unwrap();
        let Some(hardly) = hardly_cached(&file, 4096, 512 << 10) else {
            std::fs::remove_file(&path).unwrap();
            return;
        };
        assert!(!hardly, "a file just written is in the page cache");
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let dropped = hardly_cached(&file, 4096, 512 << 10);
        std::fs::remove_file(&path).unwrap();
        // tmpfs keeps its pages whatever the advice; the test holds on
        // file systems that drop them.
        if !is_tmpfs(&std::env::temp_dir()) {
            assert_eq!(dropped, Some(true));
        }
    }

    fn is_tmpfs(dir: &std::path::Path) -> bool {
        rustix::fs::statfs(dir).is_ok_and(|s| s.f_type == 0x0102_1994)
    }
}
