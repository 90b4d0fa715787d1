//! The kernel's readahead window for the mount.
//!
//! A FUSE mount's readahead is 128 KiB by default (the backing-device
//! default; INIT can only lower it), so a sequential read reaches the
//! daemon as 128 KiB READ requests, and every request pays a fixed cost
//! here (a tree descent, the size check, cache upkeep) and in the kernel.
//! With 1 MiB of readahead the kernel sends READs of up to 1 MiB (the
//! 256-page request limit), an eighth as many. With 2 MiB it sends a
//! window's two 1 MiB READs together, and the request thread and the read
//! worker answer them at once (`read_worker.rs`). Random reads are not
//! affected: the kernel grows the window only for sequential streams.
//!
//! The window can only be raised from outside, through the mount's
//! backing-device setting in sysfs, after INIT has been answered (the INIT
//! reply would lower it again).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// Readahead window set on every mount, in KiB: two of the largest READ
/// requests the kernel sends (256 pages each), so that two are in flight.
pub const READAHEAD_KIB: u32 = 2048;

/// The sysfs file holding the readahead window, in KiB, of the mount
/// whose device number is `dev`.
pub fn knob(dev: u64) -> String {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb")
}

/// Waits until the mount at `mountpoint` answers (INIT is done), then sets
/// its readahead window. Best effort: without root, or without sysfs, the
/// kernel default stays and a warning is logged.
pub fn raise_readahead(mountpoint: &Path) {
    // A stat of the mount's root waits for INIT.
    let mut dev = None;
    for _ in 0..200 {
        match std::fs::metadata(mountpoint) {
            Ok(m) => {
                dev = Some(m.dev());
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let Some(dev) = dev else {
        log::warn!(
            "readahead left at the default: {} did not answer",
            mountpoint.display()
        );
        return;
    };
    let knob = knob(dev);
    match std::fs::write(&knob, READAHEAD_KIB.to_string()) {
        Ok(()) => log::debug!("{knob} = {READAHEAD_KIB}"),
        Err(e) => log::warn!("readahead left at the default: cannot write {knob}: {e}"),
    }
}
