//! Opening images with one-line, human errors, and the per-image lock that
//! keeps two processes from using one image.

use std::io;
use std::path::Path;

use wodfs_device::FileDevice;
use wodfs_engine::Tree;
use wodfs_fs::{Fs, FsError, FsOptions};

/// A failure with the message to print and the exit code to use.
#[derive(Debug)]
pub struct Fail {
    /// One line for the user.
    pub msg: String,
    /// Process exit code.
    pub code: u8,
}

impl Fail {
    /// A failure with exit code 1.
    pub fn new(msg: impl Into<String>) -> Fail {
        Fail {
            msg: msg.into(),
            code: 1,
        }
    }
}

fn io_msg(path: &Path, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => format!("{}: no such file or device", path.display()),
        io::ErrorKind::PermissionDenied => format!("{}: permission denied", path.display()),
        _ => format!("{}: {e}", path.display()),
    }
}

/// Opens the image's device. The device holds the image's exclusive
/// lock while it lives; a busy image is retried for up to 10 s, because
/// right after `umount` returns the daemon may still be writing its last
/// checkpoint. A busy image fails with exit code 8 (fsck's "operational
/// error").
pub fn open_device(path: &Path) -> Result<FileDevice, Fail> {
    for _ in 0..100 {
        match FileDevice::open(path) {
            Ok(dev) => return Ok(dev),
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => return Err(Fail::new(io_msg(path, &e))),
        }
    }
    Err(Fail {
        msg: format!(
            "{}: in use by another wodfs process (mounted?)",
            path.display()
        ),
        code: 8,
    })
}

/// Opens the engine tree of an image. The node cache is capped at an
/// eighth of the image (the engine keeps a third of the cache free on the
/// device for checkpoints), unless the node size needs more.
pub fn open_tree(path: &Path, cache_bytes: usize) -> Result<Tree, Fail> {
    use wodfs_device::Device;
    let dev = open_device(path)?;
    let capped = cache_bytes.min(((dev.size_bytes() / 8) as usize).max(2 << 20));
    match Tree::open(Box::new(dev), capped) {
        Err(wodfs_engine::Error::Config(_)) if capped < cache_bytes => {
            let dev = open_device(path)?;
            Tree::open(Box::new(dev), cache_bytes).map_err(|e| engine_fail(path, &e))
        }
        r => r.map_err(|e| engine_fail(path, &e)),
    }
}

/// The message for an engine error while opening.
pub fn engine_fail(path: &Path, e: &wodfs_engine::Error) -> Fail {
    use wodfs_engine::Error as E;
    let msg = match e {
        E::NotWodfs(_) => format!("{}: not a wodfs image", path.display()),
        E::Corrupt { .. } => format!("{}: corrupt image: {e} (run wodfs fsck)", path.display()),
        E::UnsupportedVersion { .. } => format!("{}: {e}", path.display()),
        _ => format!("{}: {e}", path.display()),
    };
    Fail::new(msg)
}

/// Opens the file system of an image.
pub fn open_fs(path: &Path, cache_bytes: usize, opts: FsOptions) -> Result<Fs, Fail> {
    let tree = open_tree(path, cache_bytes)?;
    Fs::from_tree(tree, opts).map_err(|e| match e {
        FsError::NotFs(_) => Fail::new(format!(
            "{}: a wodfs engine image without a file system",
            path.display()
        )),
        e => Fail::new(format!("{}: {e}", path.display())),
    })
}
