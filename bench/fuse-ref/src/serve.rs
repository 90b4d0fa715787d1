//! Mounting, serving and clean unmounting on SIGTERM/SIGINT/SIGHUP.

use std::io;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use fuser::Filesystem;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use wodfs_fuse::polled::mount_polled;

use crate::common::mount_config;

/// Mounts `fs` on `mountpoint` and serves it until it is unmounted, either
/// from outside (`umount`, `fusermount3 -u`) or by a termination signal.
/// A signal unmounts rather than killing the process, which would leave a
/// dead mount ("Transport endpoint is not connected") behind.
pub fn serve<FS: Filesystem>(
    fs: FS,
    mountpoint: &Path,
    subtype: &str,
    threads: usize,
    poll_idle: Duration,
) -> io::Result<()> {
    let config = mount_config(subtype, threads);
    // wodfs's request loop: polls the device between close requests.
    let (mut session, device_poll) = mount_polled(fs, mountpoint, &config, Some(poll_idle))?;
    let ra_mount = mountpoint.to_path_buf();
    // Runs once the request loop below has answered INIT.
    let readahead = thread::Builder::new()
        .name("readahead".to_string())
        // The same readahead window wodfs sets, so both read with the same
        // request sizes.
        .spawn(move || wodfs_fuse::readahead::raise_readahead(&ra_mount))?;
    let mut unmounter = session.unmount_callable();
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let signals_handle = signals.handle();
    let mountpoint_owned = mountpoint.to_path_buf();
    let watcher = thread::Builder::new()
        .name("signals".to_string())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                log::info!("signal {signal}: unmounting {}", mountpoint_owned.display());
                if let Err(error) = unmounter.unmount() {
                    // Busy (a process has its cwd inside): detach lazily; the
                    // session ends when the last user lets go.
                    log::warn!("unmount failed ({error}); detaching lazily");
                    let detached = Command::new("umount")
                        .arg("-l")
                        .arg(&mountpoint_owned)
                        .status();
                    if let Err(error) = detached {
                        log::error!("lazy unmount failed: {error}");
                    }
                }
            }
        })?;
    let poll_watcher = device_poll.start();
    let served = session.run();
    poll_watcher.stop();
    let _ = readahead.join();
    signals_handle.close();
    if watcher.join().is_err() {
        log::error!("signal watcher panicked");
    }
    served
}
