//! Conversions between the core's types and fuser's, and panic guarding.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use wodfs_fs::{Attr, FsError, Kind, SetTime};

/// How long the kernel may cache entries, negative entries and attributes.
/// Only this daemon changes the file system, so the cache stays right.
pub const TTL: Duration = Duration::from_secs(24 * 3600);

/// The FUSE file type of a kind.
pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

/// The attributes the kernel sees.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks_512(),
        atime: a.atime.into(),
        mtime: a.mtime.into(),
        ctime: a.ctime.into(),
        crtime: a.ctime.into(),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

/// A negative entry: "no such name", cached for [`TTL`].
pub fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The errno of a core error; internal failures are logged here.
pub fn errno(e: &FsError) -> Errno {
    if !matches!(e, FsError::Posix(_)) {
        log::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

/// A setattr time.
pub fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::SpecificTime(t) => SetTime::At(t.into()),
        TimeOrNow::Now => SetTime::Now,
    }
}

/// Runs one request handler; a panic is logged and the reply, dropped while
/// unwinding, answers EIO, so the mount survives.
pub fn guarded(op: &'static str, handler: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(handler)) {
        log::error!("panic in {op}: {}", panic_message(payload.as_ref()));
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "non-string panic payload"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_is_contained() {
        let mut after = false;
        guarded("test", || panic!("boom"));
        guarded("test", || after = true);
        assert!(after, "handlers keep running after a panic");
    }

    #[test]
    fn attributes_map_to_fuse() {
        let mut a = Attr::new(
            7,
            Kind::Dir,
            0o2755,
            1,
            2,
            wodfs_fs::Timespec { sec: 5, nsec: 6 },
        );
        a.size = 0;
        let f = file_attr(&a);
        assert_eq!(f.ino, INodeNo(7));
        assert_eq!(f.kind, FileType::Directory);
        assert_eq!(f.perm, 0o2755);
        assert_eq!(f.nlink, 2);
        assert_eq!((f.uid, f.gid), (1, 2));
        assert_eq!(
            errno(&FsError::Posix(libc::ENOTEMPTY)),
            Errno::from_i32(libc::ENOTEMPTY)
        );
    }
}
