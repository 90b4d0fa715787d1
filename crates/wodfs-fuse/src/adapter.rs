//! The `fuser::Filesystem` implementation: inode numbers in, paths and
//! locations out through the [`InodeTable`], every operation handed to the
//! core [`Fs`], every error mapped by [`errno`].

use std::collections::HashMap;
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
use wodfs_fs::{
    Attr, Fs, FsError, FsPath, FsResult, Kind, Loc, NewNode, RenameMode, Seek, SetAttr, XattrSet,
};

use crate::convert::{errno, file_attr, file_type, guarded, negative_attr, set_time, TTL};
use crate::pending::PendingWrites;
use crate::table::InodeTable;
use crate::WODFS_IOC_SYNC;

const GEN: Generation = Generation(0);
/// Entries gathered per READDIR request (the reply buffer fills first).
const LIST_BATCH: usize = 512;

/// Adapter options fixed at mount time.
#[derive(Debug, Clone)]
pub struct AdapterOptions {
    /// Negotiate the kernel's writeback cache.
    pub writeback_cache: bool,
    /// Request counters to update (shared with whoever wants to read them).
    pub counters: Arc<RequestCounters>,
}

/// Counts of requests the adapter served, for tests and `stat`.
#[derive(Debug, Default)]
pub struct RequestCounters {
    /// READ requests.
    pub reads: AtomicU64,
    /// WRITE requests.
    pub writes: AtomicU64,
    /// Bytes carried by WRITE requests.
    pub write_bytes: AtomicU64,
    /// FSYNC and FSYNCDIR requests.
    pub fsyncs: AtomicU64,
    /// Writes handed to the core after coalescing.
    pub engine_writes: AtomicU64,
}

#[derive(Debug, Default)]
struct DirHandle {
    /// Cookie `3 + i` resumes after `names[i]`.
    names: Vec<Vec<u8>>,
}

/// The wodfs FUSE file system.
#[derive(Debug)]
pub struct WodFuse {
    fs: Arc<Fs>,
    table: Mutex<InodeTable>,
    dirs: Mutex<HashMap<u64, DirHandle>>,
    next_fh: AtomicU64,
    opts: AdapterOptions,
    pending: Arc<PendingWrites>,
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
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            opts,
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

    fn make(&self, req: &Request, parent: INodeNo, name: &OsStr, node: NewNode) -> FsResult<Attr> {
        let dir = self.path(parent)?;
        let mut node = node;
        node.uid = req.uid();
        node.gid = self.new_gid(req, &dir)?;
        let name = name_bytes(name);
        let attr = self.fs.make(&dir, name, node)?;
        let loc = Loc::Path(dir.join(name)?);
        self.entry(parent, name, &attr, &loc);
        Ok(attr)
    }

    /// Group of a new inode: the directory's if it is set-group-ID.
    fn new_gid(&self, req: &Request, dir: &FsPath) -> FsResult<u32> {
        let (d, _) = self.fs.resolve(dir)?;
        if u32::from(d.perm) & libc::S_ISGID != 0 {
            Ok(d.gid)
        } else {
            Ok(req.gid())
        }
    }

    fn list(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> FsResult<Vec<(u64, Vec<u8>, Attr, Loc)>> {
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
        let mut dirs = self.dirs.lock();
        let handle = dirs.entry(fh.0).or_default();
        let after = match offset {
            0..=2 => None,
            k => match handle.names.get((k - 3) as usize) {
                Some(n) => Some(n.clone()),
                None => return Err(FsError::Posix(libc::EINVAL)),
            },
        };
        for e in self.fs.readdir(&dir, after.as_deref(), LIST_BATCH)? {
            handle.names.push(e.name.clone());
            let cookie = 3 + handle.names.len() as u64 - 1;
            out.push((cookie, e.name, e.attr, e.loc));
        }
        Ok(out)
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
        use fuser::InitFlags as F;
        let mut wanted = vec![
            F::FUSE_DO_READDIRPLUS,
            F::FUSE_READDIRPLUS_AUTO,
            F::FUSE_PARALLEL_DIROPS,
            F::FUSE_HANDLE_KILLPRIV_V2,
        ];
        if self.opts.writeback_cache {
            wanted.push(F::FUSE_WRITEBACK_CACHE);
        }
        for flag in wanted {
            if let Err(missing) = config.add_capabilities(flag) {
                log::warn!("kernel does not offer {missing:?}");
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.pending.flush_all(&self.fs);
        if let Err(e) = self.fs.checkpoint() {
            log::error!("checkpoint at unmount failed: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded("lookup", || {
            self.pending.flush_all(&self.fs);
            let r = (|| {
                let dir = self.path(parent)?;
                let path = dir.join(name_bytes(name))?;
                Ok(self.fs.try_resolve(&path)?.map(|(a, loc)| {
                    self.entry(parent, name_bytes(name), &a, &loc);
                    a
                }))
            })();
            match r {
                Ok(Some(a)) => reply.entry(&TTL, &file_attr(&a), GEN),
                Ok(None) => reply.entry(&TTL, &negative_attr(), GEN),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || self.table.lock().forget(ino.0, nlookup));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded("getattr", || {
            self.pending.flush_all(&self.fs);
            let r = self.loc(ino).and_then(|l| self.fs.getattr(&l));
            reply_attr(reply, r);
        });
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
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guarded("setattr", || {
            self.pending.flush_all(&self.fs);
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
                ctime: ctime.map(Into::into),
                kill_priv: req.uid() != 0,
            };
            let r = self.loc(ino).and_then(|l| self.fs.setattr(&l, &set));
            reply_attr(reply, r);
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded("readlink", || {
            self.pending.flush_all(&self.fs);
            match self.loc(ino).and_then(|l| self.fs.readlink(&l)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(errno(&e)),
            }
        });
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
        guarded("mknod", || {
            self.pending.flush_all(&self.fs);
            let Some(kind) =
                Kind::from_mode(mode).filter(|k| *k != Kind::Dir && *k != Kind::Symlink)
            else {
                return reply.error(Errno::EINVAL);
            };
            let mut node = NewNode::new(kind, (mode & !umask & 0o7777) as u16);
            node.rdev = rdev;
            let r = self.make(req, parent, name, node);
            self.reply_entry(reply, r);
        });
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
        guarded("mkdir", || {
            self.pending.flush_all(&self.fs);
            let mut perm = mode & !umask & 0o7777;
            // A set-group-ID directory passes the bit on to subdirectories.
            if let Ok(dir) = self.path(parent) {
                if let Ok((d, _)) = self.fs.resolve(&dir) {
                    perm |= u32::from(d.perm) & libc::S_ISGID;
                }
            }
            let node = NewNode::new(Kind::Dir, perm as u16);
            let r = self.make(req, parent, name, node);
            self.reply_entry(reply, r);
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("unlink", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .path(parent)
                .and_then(|d| self.fs.unlink(&d, name_bytes(name)));
            let r = r.map(|removed| self.table.lock().removed(removed.ino, removed.inode_loc));
            reply_empty(reply, r);
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("rmdir", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .path(parent)
                .and_then(|d| self.fs.rmdir(&d, name_bytes(name)));
            let r = r.map(|removed| self.table.lock().removed(removed.ino, false));
            reply_empty(reply, r);
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        guarded("symlink", || {
            self.pending.flush_all(&self.fs);
            let mut node = NewNode::new(Kind::Symlink, 0o777);
            node.target = target.as_os_str().as_bytes().to_vec();
            let r = self.make(req, parent, link_name, node);
            self.reply_entry(reply, r);
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guarded("rename", || {
            self.pending.flush_all(&self.fs);
            let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                RenameMode::Exchange
            } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                RenameMode::NoReplace
            } else if flags.is_empty() {
                RenameMode::Replace
            } else {
                return reply.error(Errno::EINVAL);
            };
            let (name, newname) = (name_bytes(name), name_bytes(newname));
            let r = (|| {
                let od = self.path(parent)?;
                let nd = self.path(newparent)?;
                let done = self.fs.rename(&od, name, &nd, newname, mode)?;
                let mut t = self.table.lock();
                if let Some(rep) = done.replaced {
                    t.removed(rep.ino, rep.inode_loc);
                }
                t.renamed(done.ino, newparent.0, newname);
                if let Some(other) = done.exchanged {
                    t.renamed(other, parent.0, name);
                }
                Ok(())
            })();
            reply_empty(reply, r);
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guarded("link", || {
            self.pending.flush_all(&self.fs);
            let r = (|| {
                let old = self.loc(ino)?;
                let dir = self.path(newparent)?;
                let a = self.fs.link(&old, &dir, name_bytes(newname))?;
                let mut t = self.table.lock();
                t.linked(a.ino);
                t.remember(a.ino, newparent.0, name_bytes(newname), &Loc::Inode(a.ino));
                Ok(a)
            })();
            self.reply_entry(reply, r);
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guarded("open", || {
            self.fs.open_file(ino.0);
            reply.opened(FileHandle(0), FopenFlags::empty());
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.opts.counters.reads.fetch_add(1, Ordering::Relaxed);
        guarded("read", || {
            self.pending.flush_all(&self.fs);
            match self
                .loc(ino)
                .and_then(|l| self.fs.read(&l, offset, size as usize))
            {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let c = &self.opts.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        guarded("write", || {
            let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
            let end = offset.checked_add(data.len() as u64);
            if end.is_none_or(|e| e > wodfs_fs::FILE_BYTES_MAX) {
                return reply.error(Errno::EFBIG);
            }
            match self
                .loc(ino)
                .and_then(|l| self.pending.write(&self.fs, ino.0, l, offset, data, kill))
            {
                Ok(_) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guarded("flush", || {
            reply_empty(reply, self.pending.settle(&self.fs, ino.0));
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded("release", || {
            let settled = self.pending.settle(&self.fs, ino.0);
            let released = self.fs.release_file(ino.0);
            reply_empty(reply, settled.and(released))
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.opts.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        guarded("fsync", || match self.pending.settle(&self.fs, ino.0) {
            Ok(()) => sync_in_background(&self.fs, reply),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, DirHandle::default());
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.pending.flush_all(&self.fs);
        guarded("readdir", || match self.list(ino, fh, offset) {
            Ok(entries) => {
                for (cookie, name, attr, _) in entries {
                    let name = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(attr.ino), cookie, file_type(attr.kind), name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.pending.flush_all(&self.fs);
        guarded("readdirplus", || match self.list(ino, fh, offset) {
            Ok(entries) => {
                for (cookie, name, attr, loc) in entries {
                    let os = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(attr.ino), cookie, os, &TTL, &file_attr(&attr), GEN) {
                        break;
                    }
                    // The kernel takes a reference for every entry but . and ..
                    if name != b"." && name != b".." {
                        self.entry(ino, &name, &attr, &loc);
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.opts.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        sync_in_background(&self.fs, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || {
            self.pending.flush_all(&self.fs);
            let s = self.fs.statfs();
            reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_bytes,
                s.name_bytes_max,
                s.block_bytes,
            );
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        guarded("setxattr", || {
            self.pending.flush_all(&self.fs);
            let how = match flags {
                0 => XattrSet::Upsert,
                libc::XATTR_CREATE => XattrSet::Create,
                libc::XATTR_REPLACE => XattrSet::Replace,
                _ => return reply.error(Errno::EINVAL),
            };
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.set_xattr(&l, name_bytes(name), value, how));
            reply_empty(reply, r);
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guarded("getxattr", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.get_xattr(&l, name_bytes(name)));
            reply_xattr(reply, size, r);
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.list_xattr(&l))
                .map(|names| {
                    let mut out = Vec::new();
                    for n in names {
                        out.extend_from_slice(&n);
                        out.push(0);
                    }
                    out
                });
            reply_xattr(reply, size, r);
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("removexattr", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.remove_xattr(&l, name_bytes(name)));
            reply_empty(reply, r);
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel has checked already.
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        guarded("create", || {
            self.pending.flush_all(&self.fs);
            let node = NewNode::new(Kind::File, (mode & !umask & 0o7777) as u16);
            match self.make(req, parent, name, node) {
                Ok(a) => {
                    self.fs.open_file(a.ino);
                    reply.created(
                        &TTL,
                        &file_attr(&a),
                        GEN,
                        FileHandle(0),
                        FopenFlags::empty(),
                    );
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guarded("fallocate", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.fallocate(&l, offset, length, mode))
                .map(|_| ());
            reply_empty(reply, r);
        });
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guarded("lseek", || {
            self.pending.flush_all(&self.fs);
            let whence = match whence {
                libc::SEEK_DATA => Seek::Data,
                libc::SEEK_HOLE => Seek::Hole,
                libc::SEEK_SET => return reply.offset(offset),
                _ => return reply.error(Errno::EINVAL),
            };
            let Ok(off) = u64::try_from(offset) else {
                return reply.error(Errno::ENXIO);
            };
            match self.loc(ino).and_then(|l| self.fs.seek(&l, off, whence)) {
                Ok(o) => reply.offset(o as i64),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        guarded("copy_file_range", || {
            self.pending.flush_all(&self.fs);
            let r = (|| {
                let src = self.loc(ino_in)?;
                let dst = self.loc(ino_out)?;
                // Replies carry a 32-bit count; the kernel loops for more.
                let len = len.min(1 << 30);
                self.fs.copy_range(&src, offset_in, &dst, offset_out, len)
            })();
            match r {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        guarded("ioctl", || {
            self.pending.flush_all(&self.fs);
            if cmd == WODFS_IOC_SYNC {
                match self.fs.checkpoint() {
                    Ok(()) => reply.ioctl(0, &[]),
                    Err(e) => reply.error(errno(&e)),
                }
            } else {
                reply.error(Errno::ENOTTY);
            }
        });
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
