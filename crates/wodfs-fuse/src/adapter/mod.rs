//! The `fuser::Filesystem` implementation: inode numbers in, paths and
//! locations out through the [`InodeTable`], every operation handed to the
//! core [`Fs`], every error mapped by [`errno`].
//!
//! The trait impl here only delegates; the requests live by family in
//! `entries.rs` (names), `attrs.rs` (attributes, xattrs, statfs),
//! `files.rs` (open files) and `dirs.rs` (listings, with what a handle
//! remembers in `dir_handle.rs`). Each request flushes the coalesced
//! writes ([`PendingWrites`]), is answered from them, joins them or leaves
//! them pending before it is answered, as `pending.rs` sets out; a CREATE
//! flushes them right after its answer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;
use wodfs_engine::IntMap;
use wodfs_fs::{
    Attr, Fs, FsError, FsPath, FsResult, KillPriv, Kind, Loc, NewNode, RenameMode, Seek, SetAttr,
    XattrSet,
};

use crate::convert::{errno, file_attr, file_type, guarded, negative_attr, set_time, TTL};
use crate::notify::KernelNotifier;
use crate::pending::{FromRun, PendingWrites};
use crate::read_worker::ReadWorker;
use crate::table::InodeTable;
use crate::WODFS_IOC_SYNC;
use dir_handle::DirHandle;

mod attrs;
mod dir_handle;
mod dirs;
mod entries;
mod files;

const GEN: Generation = Generation(0);
/// Entries gathered per READDIR request (the reply buffer fills first).
const LIST_BATCH: usize = 512;

/// A listing's entries (cookie, name, attributes, location), and whether
/// they reach the end of the directory.
struct Listing {
    entries: Vec<(u64, Vec<u8>, Attr, Loc)>,
    complete: bool,
}

/// Adapter options fixed at mount time.
#[derive(Debug, Clone)]
pub struct AdapterOptions {
    /// Negotiate the kernel's writeback cache.
    pub writeback_cache: bool,
    /// Request counters to update (shared with whoever wants to read them).
    pub counters: Arc<RequestCounters>,
    /// The session's notifier, connected once the session exists.
    pub kernel: KernelNotifier,
}

/// Counts of requests the adapter served, for tests and `stat`.
#[derive(Debug, Default)]
pub struct RequestCounters {
    /// READ requests.
    pub reads: AtomicU64,
    /// READ requests answered by the read worker (`read_worker.rs`).
    pub reads_handed_off: AtomicU64,
    /// WRITE requests.
    pub writes: AtomicU64,
    /// Bytes carried by WRITE requests.
    pub write_bytes: AtomicU64,
    /// FSYNC and FSYNCDIR requests.
    pub fsyncs: AtomicU64,
    /// Writes handed to the core after coalescing.
    pub engine_writes: AtomicU64,
    /// READDIR and READDIRPLUS requests that listed from the tree.
    pub listings: AtomicU64,
    /// READDIR and READDIRPLUS requests answered as the end of their
    /// handle's listing, without the tree.
    pub listing_ends: AtomicU64,
}

/// The wodfs FUSE file system.
#[derive(Debug)]
pub struct WodFuse {
    fs: Arc<Fs>,
    table: Mutex<InodeTable>,
    dirs: Mutex<IntMap<u64, DirHandle>>,
    next_fh: AtomicU64,
    opts: AdapterOptions,
    pending: Arc<PendingWrites>,
    /// Serves large READs beside the request thread; `None` if its thread
    /// could not be started (then every READ is served inline).
    reads: Option<ReadWorker>,
}

fn name_bytes(name: &OsStr) -> &[u8] {
    name.as_bytes()
}

impl WodFuse {
    /// An adapter over `fs`.
    pub fn new(fs: Arc<Fs>, opts: AdapterOptions, pending: Arc<PendingWrites>) -> WodFuse {
        WodFuse {
            pending,
            fs,
            table: Mutex::new(InodeTable::new()),
            dirs: Mutex::new(IntMap::default()),
            next_fh: AtomicU64::new(1),
            opts,
            reads: ReadWorker::start()
                .inspect_err(|e| log::warn!("no read worker thread ({e}): READs served inline"))
                .ok(),
        }
    }

    fn path(&self, ino: INodeNo) -> FsResult<FsPath> {
        self.table
            .lock()
            .path(ino.0)
            .ok_or(FsError::Posix(libc::ESTALE))
    }

    fn loc(&self, ino: INodeNo) -> FsResult<Loc> {
        self.table
            .lock()
            .loc(ino.0)
            .ok_or(FsError::Posix(libc::ESTALE))
    }

    fn entry(&self, parent: INodeNo, name: &[u8], attr: &Attr, loc: &Loc) {
        self.table.lock().remember(attr.ino, parent.0, name, loc);
    }

    /// Makes `name` in `parent` with the pending runs written as
    /// [`PendingWrites::make`] writes them.
    fn make(&self, req: &Request, parent: INodeNo, name: &OsStr, node: NewNode) -> FsResult<Attr> {
        self.make_with(req, parent, name, node, |dir, name, node| {
            self.pending.make(&self.fs, dir, name, node)
        })
    }

    /// Makes `name` in `parent` through `create` (which writes the pending
    /// runs or leaves them to its caller) and remembers the new inode.
    fn make_with(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        node: NewNode,
        create: impl FnOnce(&FsPath, &[u8], NewNode) -> FsResult<Attr>,
    ) -> FsResult<Attr> {
        let dir = self.path(parent)?;
        let mut node = node;
        node.uid = req.uid();
        node.gid = req.gid();
        let name = name_bytes(name);
        let attr = create(&dir, name, node)?;
        let loc = Loc::Path(dir.join(name)?);
        let mut table = self.table.lock();
        table.remember(attr.ino, parent.0, name, &loc);
        table.created(attr.ino);
        Ok(attr)
    }

    /// The listing of `ino` on handle `fh` from cookie `offset`: each
    /// entry with the cookie that resumes after it, and whether they reach
    /// the end of the directory. The request the kernel sends after the
    /// last entry of every directory it reads finds the handle's recorded
    /// end and is answered without resolving the directory or reading the
    /// tree.
    fn list(&self, ino: INodeNo, fh: FileHandle, offset: u64) -> FsResult<Listing> {
        if self
            .dirs
            .lock()
            .get(&fh.0)
            .is_some_and(|h| h.is_end(offset))
        {
            self.opts
                .counters
                .listing_ends
                .fetch_add(1, Ordering::Relaxed);
            return Ok(Listing {
                entries: Vec::new(),
                complete: true,
            });
        }
        let dir = self.path(ino)?;
        let (dattr, dloc) = self.fs.resolve(&dir)?;
        if dattr.kind != Kind::Dir {
            return Err(FsError::Posix(libc::ENOTDIR));
        }
        let mut out = Vec::new();
        if offset == 0 {
            out.push((1, b".".to_vec(), dattr.clone(), dloc.clone()));
        }
        if offset <= 1 {
            let parent = match dir.parent() {
                Some(p) => self.fs.resolve(&p)?,
                None => (dattr.clone(), dloc.clone()),
            };
            out.push((2, b"..".to_vec(), parent.0, parent.1));
        }
        self.opts.counters.listings.fetch_add(1, Ordering::Relaxed);
        let mut dirs = self.dirs.lock();
        let handle = dirs.entry(fh.0).or_default();
        let after = handle
            .begin(offset)
            .map_err(|()| FsError::Posix(libc::EINVAL))?;
        let new = handle.continues(after.as_deref());
        let listed = self.fs.readdir(&dir, after.as_deref(), LIST_BATCH)?;
        let complete = listed.len() < LIST_BATCH;
        for e in listed {
            let cookie = handle.cookie(&e.name, new);
            out.push((cookie, e.name, e.attr, e.loc));
        }
        Ok(Listing {
            entries: out,
            complete,
        })
    }

    /// Runs `modify`, a change of the file at `loc` by `kill`'s caller
    /// that is answered without attributes, and tells the kernel to drop
    /// its cached attributes of `ino` if the change cleared set-user-ID or
    /// set-group-ID.
    fn clearing_privs<T>(
        &self,
        ino: INodeNo,
        loc: &Loc,
        kill: KillPriv,
        modify: impl FnOnce() -> FsResult<T>,
    ) -> FsResult<T> {
        if kill == KillPriv::Keep {
            return modify();
        }
        let before = self.fs.getattr(loc)?.perm;
        let out = modify()?;
        if self.fs.getattr(loc)?.perm != before {
            self.opts.kernel.attributes_changed(ino.0);
        }
        Ok(out)
    }

    /// Flags of every file OPEN and CREATE reply.
    /// * `KEEP_CACHE`: only this daemon changes files, and every change
    ///   passes through the kernel (which invalidates what it changes), so
    ///   cached pages stay right across opens; without it every open would
    ///   drop the file's page cache.
    /// * `NOFLUSH` (without the writeback cache; the kernel ignores it
    ///   with one): `close(2)` sends no FLUSH. A FLUSH would only write
    ///   this file's coalesced run early; RELEASE (and any other request)
    ///   writes it anyway, and a failed deferred write is reported by
    ///   `fsync`, as on kernel file systems, where `close` does not report
    ///   writeback errors either.
    fn open_flags(&self) -> FopenFlags {
        if self.opts.writeback_cache {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, r: FsResult<Attr>) {
        match r {
            Ok(a) => reply.entry(&TTL, &file_attr(&a), GEN),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

fn reply_empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_attr(reply: ReplyAttr, r: FsResult<Attr>) {
    match r {
        Ok(a) => reply.attr(&TTL, &file_attr(&a)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// Who modifies a file, as far as set-user-ID and set-group-ID go. FUSE
/// passes no capabilities: root counts as holding CAP_FSETID, anyone else
/// as not (the kernel itself decides for WRITE, with a flag).
fn modifier(req: &Request) -> KillPriv {
    if req.uid() == 0 {
        KillPriv::Keep
    } else {
        KillPriv::Caller {
            pid: req.pid(),
            fsgid: req.gid(),
        }
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, r: FsResult<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(&e)),
    }
}

impl Filesystem for WodFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::init_flags::negotiate(config, self.opts.writeback_cache);
        Ok(())
    }

    fn destroy(&mut self) {
        // A READ still being answered may update an access time.
        if let Some(reads) = &self.reads {
            reads.stop();
        }
        self.pending.flush_all(&self.fs);
        if let Err(e) = self.fs.checkpoint() {
            log::error!("checkpoint at unmount failed: {e}");
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.do_lookup(req, parent, name, reply);
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        self.do_forget(req, ino, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.do_getattr(req, ino, fh, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.do_setattr(
            req, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime,
            flags, reply,
        );
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.do_readlink(req, ino, reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.do_mknod(req, parent, name, mode, umask, rdev, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.do_mkdir(req, parent, name, mode, umask, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_unlink(req, parent, name, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_rmdir(req, parent, name, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.do_symlink(req, parent, link_name, target, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.do_rename(req, parent, name, newparent, newname, flags, reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.do_link(req, ino, newparent, newname, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.do_open(req, ino, flags, reply);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.do_read(req, ino, fh, offset, size, flags, lock_owner, reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.do_write(
            req,
            ino,
            fh,
            offset,
            data,
            write_flags,
            flags,
            lock_owner,
            reply,
        );
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.do_flush(req, ino, fh, lock_owner, reply);
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        self.do_release(req, ino, fh, flags, lock_owner, flush, reply);
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.do_fsync(req, ino, fh, datasync, reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.do_opendir(req, ino, flags, reply);
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(req, ino, fh, offset, reply);
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.do_readdirplus(req, ino, fh, offset, reply);
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.do_releasedir(req, ino, fh, flags, reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.do_fsyncdir(req, ino, fh, datasync, reply);
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.do_statfs(req, ino, reply);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        self.do_setxattr(req, ino, name, value, flags, position, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.do_getxattr(req, ino, name, size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.do_listxattr(req, ino, size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_removexattr(req, ino, name, reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.do_access(req, ino, mask, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.do_create(req, parent, name, mode, umask, flags, reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.do_fallocate(req, ino, fh, offset, length, mode, reply);
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.do_lseek(req, ino, fh, offset, whence, reply);
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.do_copy_file_range(
            req, ino_in, fh_in, offset_in, ino_out, fh_out, offset_out, len, flags, reply,
        );
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        self.do_ioctl(req, ino, fh, flags, cmd, in_data, out_size, reply);
    }
}

/// Answers an fsync once the engine's log is durable, on its own thread, so
/// the request loop keeps serving while the device syncs (group commit
/// merges concurrent ones).
fn sync_in_background(fs: &Arc<Fs>, reply: ReplyEmpty) {
    let fs = Arc::clone(fs);
    let spawned = std::thread::Builder::new()
        .name("fsync".into())
        .spawn(move || reply_empty(reply, fs.fsync()));
    if let Err(e) = spawned {
        log::error!("cannot start an fsync thread: {e}");
    }
}
