//! `wodfs sync DIR`: checkpoint the wodfs mounted at (or containing) DIR
//! through the `WODFS_IOC_SYNC` ioctl; `sync(1)` never reaches FUSE.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::image::Fail;

/// Runs `sync`.
pub fn run(args: &[String]) -> Result<(), Fail> {
    let [dir] = args else {
        return Err(Fail::new("usage: wodfs sync DIR"));
    };
    let f = File::open(dir).map_err(|e| Fail::new(format!("{dir}: {e}")))?;
    ioctl_sync(&f).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOTTY) | Some(libc::EINVAL) => {
            Fail::new(format!("{dir}: not on a wodfs mount"))
        }
        _ => Fail::new(format!("{dir}: sync failed: {e}")),
    })
}

#[allow(unsafe_code)]
fn ioctl_sync(f: &File) -> std::io::Result<()> {
    // SAFETY: WODFS_IOC_SYNC is `_IO` (no argument is read or written),
    // and the descriptor is valid for the duration of the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), wodfs_fuse::WODFS_IOC_SYNC as _) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
