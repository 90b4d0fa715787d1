//! Opening images with one-line, human errors, and the per-image lock that
//! keeps two processes from using one image.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The direct-I/O unit of the device [`open_device`] opened last (0: none),
/// for the daemon's log.
static LAST_DIRECT_UNIT: AtomicU64 = AtomicU64::new(0);

/// How the last opened device writes the log: a line for the daemon's log.
pub fn log_io_mode() -> String {
    match LAST_DIRECT_UNIT.load(Ordering::Relaxed) {
        0 => "log writes buffered (the file system has no direct I/O)".into(),
        unit => format!("log writes direct, {unit}-byte unit"),
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
            Ok(dev) => {
                LAST_DIRECT_UNIT.store(dev.direct_io_unit().unwrap_or(0), Ordering::Relaxed);
                return Ok(dev);
            }
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

/// Why an image could not be opened as an engine tree.
#[derive(Debug)]
pub enum OpenError {
    /// The image could not be opened at all (missing, a directory, no
    /// permission, in use).
    Device(Fail),
    /// A zero-length file: the usual result of an interrupted copy or a
    /// mistyped `truncate`, worth its own words.
    Empty,
    /// The engine refused what it read.
    Engine(wodfs_engine::Error),
}

impl OpenError {
    /// The one-line message; `fsck_hint` adds "run wodfs fsck" to damage
    /// reports (not wanted when fsck itself is the caller).
    pub fn message(&self, path: &Path, fsck_hint: bool) -> String {
        match self {
            OpenError::Device(f) => f.msg.clone(),
            OpenError::Empty => format!(
                "{}: empty file (0 bytes), not a wodfs image",
                path.display()
            ),
            OpenError::Engine(e) => engine_msg(path, e, fsck_hint),
        }
    }

    /// fsck(8)'s exit code: 8 when the image cannot be checked (it cannot
    /// be opened or read, or is of a newer format), 4 when it is damaged
    /// or not a wodfs image.
    pub fn fsck_code(&self) -> u8 {
        use wodfs_engine::Error as E;
        match self {
            OpenError::Device(_) => 8,
            OpenError::Empty => 4,
            OpenError::Engine(E::UnsupportedVersion { .. } | E::Io { .. } | E::Config(_)) => 8,
            OpenError::Engine(_) => 4,
        }
    }

    /// The failure for commands other than fsck (exit code 1, or 8 for a
    /// busy image).
    pub fn into_fail(self, path: &Path) -> Fail {
        let msg = self.message(path, true);
        match self {
            OpenError::Device(f) => f,
            _ => Fail::new(msg),
        }
    }
}

/// Opens the engine tree of an image. The node cache is capped at an
/// eighth of the image (the engine keeps a third of the cache free on the
/// device for checkpoints), unless the node size needs more.
pub fn try_open_tree(path: &Path, cache_bytes: usize) -> Result<Tree, OpenError> {
    use wodfs_device::Device;
    let dev = open_device(path).map_err(OpenError::Device)?;
    if dev.size_bytes() == 0 {
        return Err(OpenError::Empty);
    }
    let capped = cache_bytes.min(((dev.size_bytes() / 8) as usize).max(2 << 20));
    match Tree::open(Box::new(dev), capped) {
        Err(wodfs_engine::Error::Config(_)) if capped < cache_bytes => {
            let dev = open_device(path).map_err(OpenError::Device)?;
            Tree::open(Box::new(dev), cache_bytes).map_err(OpenError::Engine)
        }
        r => r.map_err(OpenError::Engine),
    }
}

/// [`try_open_tree`] with the error as a [`Fail`].
pub fn open_tree(path: &Path, cache_bytes: usize) -> Result<Tree, Fail> {
    try_open_tree(path, cache_bytes).map_err(|e| e.into_fail(path))
}

/// The message for an engine error while opening or reading an image.
fn engine_msg(path: &Path, e: &wodfs_engine::Error, fsck_hint: bool) -> String {
    use wodfs_engine::Error as E;
    match e {
        E::NotWodfs(_) => format!("{}: not a wodfs image", path.display()),
        E::Corrupt { .. } if fsck_hint => {
            format!("{}: corrupt image: {e} (run wodfs fsck)", path.display())
        }
        E::Corrupt { .. } => format!("{}: corrupt image: {e}", path.display()),
        _ => format!("{}: {e}", path.display()),
    }
}

/// The failure for an engine error while using an image.
pub fn engine_fail(path: &Path, e: &wodfs_engine::Error) -> Fail {
    Fail::new(engine_msg(path, e, true))
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
