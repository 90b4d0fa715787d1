//! The INIT flags wodfs asks the kernel for, in one place: the benchmark's
//! reference file systems (`bench/fuse-ref`) negotiate the same ones, as
//! issue 5 asks of them ("the same crate and the same mount options"), so
//! that where they and wodfs differ in requests, the file systems differ,
//! not the protocol they speak. `docs/fuse.md` says what each flag spares.

use fuser::{InitFlags, KernelConfig};

/// Asked for on every mount, on top of fuser's own (ASYNC_READ, BIG_WRITES,
/// MAX_PAGES).
pub const INIT_FLAGS: [InitFlags; 5] = [
    InitFlags::FUSE_DO_READDIRPLUS,
    InitFlags::FUSE_READDIRPLUS_AUTO,
    InitFlags::FUSE_PARALLEL_DIROPS,
    InitFlags::FUSE_HANDLE_KILLPRIV_V2,
    // A symlink's target never changes: the kernel may keep it.
    InitFlags::FUSE_CACHE_SYMLINKS,
];

/// Adds [`INIT_FLAGS`], and the kernel's writeback cache if
/// `writeback_cache` (off unless asked for: a partial write into a page
/// the kernel does not hold becomes a READ first, `docs/fuse.md`), to
/// what the kernel grants. A flag the kernel does not offer is logged and
/// left out, so an older kernel still mounts (slower).
pub fn negotiate(config: &mut KernelConfig, writeback_cache: bool) {
    let writeback = writeback_cache.then_some(InitFlags::FUSE_WRITEBACK_CACHE);
    for flag in INIT_FLAGS.into_iter().chain(writeback) {
        if let Err(missing) = config.add_capabilities(flag) {
            log::warn!("kernel does not offer {missing:?}");
        }
    }
}
