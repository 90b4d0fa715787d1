//! [`Polled`]: a file system whose every request is noted by a
//! [`DevicePoll`] before it is answered, so the request loop polls the
//! device while requests keep coming (`poll.rs` says why). It forwards each
//! request unchanged; INIT and DESTROY are not requests a program waits on.
//! BATCH_FORGET keeps fuser's default (one `forget` per inode; fuser does
//! not export the type it comes in). The methods are fuser 0.18's
//! `Filesystem` on Linux; one it adds later would reach the default
//! (ENOSYS) until it is listed here.

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Config, CopyFileRangeFlags, FileHandle, Filesystem, INodeNo,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier,
    RenameFlags, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, Session, TimeOrNow, WriteFlags,
};

use crate::poll::DevicePoll;

/// `inner`, with each request noted by `device` first.
#[derive(Debug)]
pub struct Polled<F> {
    inner: F,
    device: Arc<DevicePoll>,
}

/// Mounts `fs` (fuser's `Session::new`) with each request noted by a
/// [`DevicePoll`] attached to the new session, which polls after a request
/// until `idle` has passed without one. Polling is off (`idle` ignored)
/// with more than one request thread: every thread would poll. Start the
/// watcher ([`DevicePoll::start`]) just before running the session.
pub fn mount_polled<F: Filesystem>(
    fs: F,
    mountpoint: &Path,
    config: &Config,
    idle: Option<Duration>,
) -> io::Result<(Session<Polled<F>>, Arc<DevicePoll>)> {
    let one_thread = config.n_threads.unwrap_or(1) <= 1;
    let device = DevicePoll::new(idle.filter(|_| one_thread));
    let polled = Polled {
        inner: fs,
        device: Arc::clone(&device),
    };
    let session = Session::new(polled, mountpoint, config)?;
    device.attach(session.as_fd())?;
    Ok((session, device))
}

/// Each listed request: note it, then hand it on unchanged. READ and
/// WRITE say how much they carry (`sized`): bulk ones do not poll.
macro_rules! note_and_forward {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?) $(sized $bytes:expr)?;)*) => {
        $(
            fn $name(&self, $($arg: $ty),*) {
                note!(self $(, $bytes)?);
                self.inner.$name($($arg),*)
            }
        )*
    };
}

macro_rules! note {
    ($polled:ident) => {
        $polled.device.arrived()
    };
    ($polled:ident, $bytes:expr) => {
        $polled.device.arrived_sized($bytes)
    };
}

impl<F: Filesystem> Filesystem for Polled<F> {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        self.inner.init(req, config)
    }

    fn destroy(&mut self) {
        self.inner.destroy()
    }

    note_and_forward! {
        read(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, flags: OpenFlags,
            lock_owner: Option<LockOwner>, reply: ReplyData,
        ) sized size as usize;
        write(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, data: &[u8],
            write_flags: WriteFlags, flags: OpenFlags, lock_owner: Option<LockOwner>,
            reply: ReplyWrite,
        ) sized data.len();
        lookup(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry);
        forget(req: &Request, ino: INodeNo, nlookup: u64);
        getattr(req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr);
        setattr(
            req: &Request, ino: INodeNo, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>,
            size: Option<u64>, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>,
            ctime: Option<SystemTime>, fh: Option<FileHandle>, crtime: Option<SystemTime>,
            chgtime: Option<SystemTime>, bkuptime: Option<SystemTime>, flags: Option<BsdFileFlags>,
            reply: ReplyAttr,
        );
        readlink(req: &Request, ino: INodeNo, reply: ReplyData);
        mknod(
            req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32,
            reply: ReplyEntry,
        );
        mkdir(
            req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry,
        );
        unlink(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
        rmdir(req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
        symlink(
            req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry,
        );
        rename(
            req: &Request, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr,
            flags: RenameFlags, reply: ReplyEmpty,
        );
        link(req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry);
        open(req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
        flush(
            req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty,
        );
        release(
            req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags,
            lock_owner: Option<LockOwner>, flush: bool, reply: ReplyEmpty,
        );
        fsync(req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty);
        opendir(req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
        readdir(req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory);
        readdirplus(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus,
        );
        releasedir(
            req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty,
        );
        fsyncdir(req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty);
        statfs(req: &Request, ino: INodeNo, reply: ReplyStatfs);
        setxattr(
            req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, position: u32,
            reply: ReplyEmpty,
        );
        getxattr(req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr);
        listxattr(req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr);
        removexattr(req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty);
        access(req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty);
        create(
            req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, flags: i32,
            reply: ReplyCreate,
        );
        getlk(
            req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64,
            end: u64, typ: i32, pid: u32, reply: ReplyLock,
        );
        setlk(
            req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, start: u64,
            end: u64, typ: i32, pid: u32, sleep: bool, reply: ReplyEmpty,
        );
        bmap(req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap);
        ioctl(
            req: &Request, ino: INodeNo, fh: FileHandle, flags: IoctlFlags, cmd: u32,
            in_data: &[u8], out_size: u32, reply: ReplyIoctl,
        );
        poll(
            req: &Request, ino: INodeNo, fh: FileHandle, ph: PollNotifier, events: PollEvents,
            flags: PollFlags, reply: ReplyPoll,
        );
        fallocate(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, length: u64, mode: i32,
            reply: ReplyEmpty,
        );
        lseek(
            req: &Request, ino: INodeNo, fh: FileHandle, offset: i64, whence: i32,
            reply: ReplyLseek,
        );
        copy_file_range(
            req: &Request, ino_in: INodeNo, fh_in: FileHandle, offset_in: u64, ino_out: INodeNo,
            fh_out: FileHandle, offset_out: u64, len: u64, flags: CopyFileRangeFlags,
            reply: ReplyWrite,
        );
    }
}
