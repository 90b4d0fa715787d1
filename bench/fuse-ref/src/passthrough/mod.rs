//! passthrough: forwards every operation to a directory of a kernel file
//! system, to measure what FUSE costs on top of it. Paths are rebuilt per
//! request from the inode table; a descriptor is open only while the
//! application has the file (or directory listing) open.

mod inodes;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{
    DirBuilderExt, DirEntryExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use rustix::fs::{Timespec, Timestamps, XattrFlags};

use crate::common::{
    errno, guarded, kill_suid_sgid, kind_from_mode, lock, system_time, BLOCK_BYTES, TTL,
};
use inodes::Inodes;

/// Open flags handled by the kernel or meaningless for the backing file:
/// the kernel appends itself, at the size it holds (a backing O_APPEND
/// would make pwrite ignore the offset), and with the writeback cache may
/// read a write-only file.
const STRIPPED_OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_APPEND
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_TRUNC
    | libc::O_NOCTTY
    | libc::O_DIRECT;

#[derive(Debug)]
struct DirListing {
    /// (name, kind, backing inode), "." and ".." excluded.
    entries: Vec<(std::ffi::OsString, FileType, u64)>,
}

/// What a SETATTR asks to change; `None` leaves a field alone.
#[derive(Debug)]
struct AttrChange {
    mode: Option<u32>,
    owner: (Option<u32>, Option<u32>),
    size: Option<u64>,
    times: (Option<TimeOrNow>, Option<TimeOrNow>),
}

#[derive(Debug, Default)]
struct Handles {
    files: HashMap<u64, Arc<File>>,
    dirs: HashMap<u64, DirListing>,
    next: u64,
}

impl Handles {
    fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

#[derive(Debug)]
pub struct Passthrough {
    inodes: Mutex<Inodes>,
    handles: Mutex<Handles>,
    root: PathBuf,
    /// Negotiate the kernel's writeback cache (`--writeback`).
    writeback_cache: bool,
}

fn attr_from(meta: &Metadata, ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: system_time(meta.atime(), meta.atime_nsec()),
        mtime: system_time(meta.mtime(), meta.mtime_nsec()),
        ctime: system_time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind_from_mode(meta.mode()),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

fn kind_of(file_type: fs::FileType) -> FileType {
    FileType::from_std(file_type).unwrap_or(FileType::RegularFile)
}

fn timespec(time: Option<TimeOrNow>) -> Timespec {
    match time {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(time)) => match time.duration_since(UNIX_EPOCH) {
            Ok(since) => Timespec {
                tv_sec: since.as_secs() as i64,
                tv_nsec: i64::from(since.subsec_nanos()),
            },
            Err(before) => {
                let before = before.duration();
                let mut tv_sec = -(before.as_secs() as i64);
                let mut tv_nsec = -i64::from(before.subsec_nanos());
                if tv_nsec < 0 {
                    tv_sec -= 1;
                    tv_nsec += 1_000_000_000;
                }
                Timespec { tv_sec, tv_nsec }
            }
        },
    }
}

fn rustix_errno(error: rustix::io::Errno) -> Errno {
    Errno::from_i32(error.raw_os_error())
}

impl Passthrough {
    pub fn new(backing: &Path, writeback_cache: bool) -> io::Result<Self> {
        let root = fs::canonicalize(backing)?;
        let meta = fs::metadata(&root)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.display()),
            ));
        }
        // Modes arrive already masked by the caller's umask.
        rustix::process::umask(rustix::fs::Mode::empty());
        Ok(Passthrough {
            inodes: Mutex::new(Inodes::new(root.clone(), meta.ino())),
            handles: Mutex::new(Handles::default()),
            root,
            writeback_cache,
        })
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        lock(&self.inodes).path(ino.0)
    }

    fn child_path(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        lock(&self.inodes).child_path(parent.0, name)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        lock(&self.handles)
            .files
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Looks `name` up in `parent` on the backing file system and counts a
    /// kernel reference; `None` when it does not exist.
    fn lookup_child(
        &self,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<Option<(FileAttr, Generation)>, Errno> {
        let path = self.child_path(parent, name)?;
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(errno(error)),
        };
        let mut inodes = lock(&self.inodes);
        let ino = inodes.fuse_ino(meta.ino());
        let generation = inodes.remember(ino, parent.0, name);
        Ok(Some((attr_from(&meta, ino), Generation(generation))))
    }

    /// After creating `name`: give it to the caller and count a reference.
    fn created(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
    ) -> Result<(FileAttr, Generation), Errno> {
        if req.uid() != 0 || req.gid() != 0 {
            let path = self.child_path(parent, name)?;
            std::os::unix::fs::lchown(&path, Some(req.uid()), Some(req.gid())).map_err(errno)?;
        }
        self.lookup_child(parent, name)?.ok_or(Errno::ENOENT)
    }

    fn stat(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr, Errno> {
        let file = fh.and_then(|fh| self.file(fh).ok());
        if file.is_none() {
            // Bound first: a guard in an `if let` scrutinee lives through
            // the whole statement (edition 2021).
            let deleted = lock(&self.inodes).deleted_attr(ino.0);
            if let Some(attr) = deleted {
                return Ok(attr);
            }
        }
        let meta = match file {
            Some(file) => file.metadata(),
            None => fs::symlink_metadata(self.path(ino)?),
        }
        .map_err(errno)?;
        Ok(attr_from(&meta, ino.0))
    }

    /// Removes `name` (a directory for rmdir) and forgets the name.
    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let path = self.child_path(parent, name)?;
        let meta = fs::symlink_metadata(&path).map_err(errno)?;
        if dir {
            fs::remove_dir(&path).map_err(errno)?;
        } else {
            fs::remove_file(&path).map_err(errno)?;
        }
        let mut inodes = lock(&self.inodes);
        let ino = inodes.fuse_ino(meta.ino());
        let last = (dir || meta.nlink() <= 1).then(|| attr_from(&meta, ino));
        inodes.unlinked(ino, parent.0, name, last);
        Ok(())
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let from = self.child_path(parent, name)?;
        let to = self.child_path(new_parent, new_name)?;
        let moved = fs::symlink_metadata(&from).map_err(errno)?;
        let replaced = fs::symlink_metadata(&to).ok();
        let rename_flags = rustix::fs::RenameFlags::from_bits_retain(flags.bits());
        rustix::fs::renameat_with(rustix::fs::CWD, &from, rustix::fs::CWD, &to, rename_flags)
            .map_err(rustix_errno)?;
        let mut inodes = lock(&self.inodes);
        let moved_ino = inodes.fuse_ino(moved.ino());
        if let Some(replaced) = replaced {
            let replaced_ino = inodes.fuse_ino(replaced.ino());
            if replaced_ino == moved_ino {
                // Two names of one inode: rename(2) did nothing.
                return Ok(());
            }
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                inodes.renamed(replaced_ino, new_parent.0, new_name, parent.0, name);
            } else {
                let last = (replaced.is_dir() || replaced.nlink() <= 1)
                    .then(|| attr_from(&replaced, replaced_ino));
                inodes.unlinked(replaced_ino, new_parent.0, new_name, last);
            }
        }
        inodes.renamed(moved_ino, parent.0, name, new_parent.0, new_name);
        Ok(())
    }

    fn do_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        change: AttrChange,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        if fh.is_none() {
            let deleted = lock(&self.inodes).deleted_attr(ino.0);
            if let Some(attr) = deleted {
                return Ok(self.change_deleted(ino, attr, &change));
            }
        }
        let AttrChange {
            mode,
            owner,
            size,
            times,
        } = change;
        let path = self.path(ino);
        let file = fh.and_then(|fh| self.file(fh).ok());
        if let Some(mode) = mode {
            let permissions = fs::Permissions::from_mode(mode & 0o7777);
            match &file {
                Some(file) => file.set_permissions(permissions),
                None => fs::set_permissions(path.clone()?, permissions),
            }
            .map_err(errno)?;
        }
        if owner.0.is_some() || owner.1.is_some() {
            std::os::unix::fs::lchown(path.clone()?, owner.0, owner.1).map_err(errno)?;
            // The daemon is root, so the backing chown keeps set-ID bits;
            // HANDLE_KILLPRIV_V2 makes clearing them our job.
            self.kill_priv(&path.clone()?, mode.is_some())?;
        }
        if let Some(size) = size {
            match &file {
                Some(file) => file.set_len(size),
                None => OpenOptions::new()
                    .write(true)
                    .open(path.clone()?)
                    .and_then(|file| file.set_len(size)),
            }
            .map_err(errno)?;
            if req.uid() != 0 {
                self.kill_priv(&path.clone()?, mode.is_some())?;
            }
        }
        if times.0.is_some() || times.1.is_some() {
            let stamps = Timestamps {
                last_access: timespec(times.0),
                last_modification: timespec(times.1),
            };
            match &file {
                Some(file) => rustix::fs::futimens(file, &stamps),
                None => rustix::fs::utimensat(
                    rustix::fs::CWD,
                    &path.clone()?,
                    &stamps,
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                ),
            }
            .map_err(rustix_errno)?;
        }
        self.stat(ino, fh)
    }

    /// A deleted inode has no path: keep its attributes in memory so the
    /// kernel's last SETATTRs (time flushes on writeback) succeed.
    fn change_deleted(&self, ino: INodeNo, mut attr: FileAttr, change: &AttrChange) -> FileAttr {
        let now = SystemTime::now();
        let resolve = |time: TimeOrNow| match time {
            TimeOrNow::SpecificTime(time) => time,
            TimeOrNow::Now => now,
        };
        if let Some(mode) = change.mode {
            attr.perm = (mode & 0o7777) as u16;
        }
        attr.uid = change.owner.0.unwrap_or(attr.uid);
        attr.gid = change.owner.1.unwrap_or(attr.gid);
        if let Some(size) = change.size {
            attr.size = size;
        }
        if let Some(atime) = change.times.0 {
            attr.atime = resolve(atime);
        }
        if let Some(mtime) = change.times.1 {
            attr.mtime = resolve(mtime);
        }
        lock(&self.inodes).set_deleted_attr(ino.0, attr);
        attr
    }

    fn kill_priv(&self, path: &Path, mode_was_set: bool) -> Result<(), Errno> {
        if mode_was_set {
            return Ok(());
        }
        let meta = fs::symlink_metadata(path).map_err(errno)?;
        let mode = meta.mode() & 0o7777;
        let killed = kill_suid_sgid(mode);
        if !meta.is_dir() && !meta.is_symlink() && killed != mode {
            fs::set_permissions(path, fs::Permissions::from_mode(killed)).map_err(errno)?;
        }
        Ok(())
    }

    fn open_backing(&self, ino: INodeNo, flags: i32) -> Result<FileHandle, Errno> {
        let path = self.path(ino)?;
        let mut options = OpenOptions::new();
        options.read(true);
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            options.write(true);
        }
        options.custom_flags(flags & !STRIPPED_OPEN_FLAGS);
        let file = match options.open(&path) {
            // Read access was added for the kernel's page cache; the file
            // may still refuse it to a caller that only writes.
            Err(error) if error.raw_os_error() == Some(libc::EACCES) => OpenOptions::new()
                .write(true)
                .custom_flags(flags & !STRIPPED_OPEN_FLAGS)
                .open(&path),
            other => other,
        }
        .map_err(errno)?;
        let mut handles = lock(&self.handles);
        let id = handles.next_id();
        handles.files.insert(id, Arc::new(file));
        Ok(FileHandle(id))
    }

    fn listing(&self, ino: INodeNo, fh: FileHandle, offset: u64) -> Result<(), Errno> {
        let mut handles = lock(&self.handles);
        let needs_listing = offset == 0 || !handles.dirs.contains_key(&fh.0);
        drop(handles);
        if needs_listing {
            let path = self.path(ino)?;
            let mut entries = Vec::new();
            for entry in fs::read_dir(&path).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let kind = entry.file_type().map(kind_of).map_err(errno)?;
                entries.push((entry.file_name(), kind, entry.ino()));
            }
            handles = lock(&self.handles);
            handles.dirs.insert(fh.0, DirListing { entries });
        }
        Ok(())
    }

    /// "." and ".." then the listing; offset n resumes after entry n.
    fn dir_entries(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Vec<(u64, std::ffi::OsString, FileType, u64)>, Errno> {
        self.listing(ino, fh, offset)?;
        let handles = lock(&self.handles);
        let listing = handles.dirs.get(&fh.0).ok_or(Errno::EBADF)?;
        let inodes = lock(&self.inodes);
        let mut out = Vec::new();
        if offset < 1 {
            out.push((1, ".".into(), FileType::Directory, ino.0));
        }
        if offset < 2 {
            out.push((2, "..".into(), FileType::Directory, ino.0));
        }
        let skip = offset.saturating_sub(2) as usize;
        for (index, (name, kind, backing)) in listing.entries.iter().enumerate().skip(skip) {
            if out.len() >= 1024 {
                break;
            }
            out.push((
                index as u64 + 3,
                name.clone(),
                *kind,
                inodes.fuse_ino(*backing),
            ));
        }
        Ok(out)
    }
}

fn reply_entry(reply: ReplyEntry, result: Result<(FileAttr, Generation), Errno>) {
    match result {
        Ok((attr, generation)) => reply.entry(&TTL, &attr, generation),
        Err(error) => reply.error(error),
    }
}

fn reply_empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(error) => reply.error(error),
    }
}

fn reply_attr(reply: ReplyAttr, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(error) => reply.error(error),
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, result: rustix::io::Result<usize>, buf: &[u8]) {
    match result {
        Ok(len) if size == 0 => reply.size(len as u32),
        Ok(len) => reply.data(&buf[..len]),
        Err(error) => reply.error(rustix_errno(error)),
    }
}

fn negative_entry(reply: ReplyEntry) {
    let attr = FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK_BYTES,
        flags: 0,
    };
    reply.entry(&TTL, &attr, Generation(0));
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        wodfs_fuse::init_flags::negotiate(config, self.writeback_cache);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded("lookup", || match self.lookup_child(parent, name) {
            Ok(Some((attr, generation))) => reply.entry(&TTL, &attr, generation),
            Ok(None) => negative_entry(reply),
            Err(error) => reply.error(error),
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || lock(&self.inodes).forget(ino.0, nlookup));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded("getattr", || reply_attr(reply, self.stat(ino, fh)));
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
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guarded("setattr", || {
            let change = AttrChange {
                mode,
                owner: (uid, gid),
                size,
                times: (atime, mtime),
            };
            let result = self.do_setattr(req, ino, change, fh);
            reply_attr(reply, result);
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded("readlink", || {
            match self.path(ino).and_then(|p| fs::read_link(p).map_err(errno)) {
                Ok(target) => reply.data(target.as_os_str().as_bytes()),
                Err(error) => reply.error(error),
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
            let made = self.child_path(parent, name).and_then(|path| {
                let file_type = rustix::fs::FileType::from_raw_mode(mode);
                let perm = rustix::fs::Mode::from_raw_mode(mode & !umask & 0o7777);
                rustix::fs::mknodat(rustix::fs::CWD, &path, file_type, perm, u64::from(rdev))
                    .map_err(rustix_errno)?;
                self.created(req, parent, name)
            });
            reply_entry(reply, made);
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
            let made = self.child_path(parent, name).and_then(|path| {
                fs::DirBuilder::new()
                    .mode(mode & !umask & 0o7777)
                    .create(&path)
                    .map_err(errno)?;
                self.created(req, parent, name)
            });
            reply_entry(reply, made);
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("unlink", || {
            reply_empty(reply, self.remove(parent, name, false))
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("rmdir", || {
            reply_empty(reply, self.remove(parent, name, true))
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
            let made = self.child_path(parent, link_name).and_then(|path| {
                std::os::unix::fs::symlink(target, &path).map_err(errno)?;
                self.created(req, parent, link_name)
            });
            reply_entry(reply, made);
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
            reply_empty(
                reply,
                self.do_rename(parent, name, newparent, newname, flags),
            );
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
            let made = self.path(ino).and_then(|from| {
                let to = self.child_path(newparent, newname)?;
                fs::hard_link(&from, &to).map_err(errno)?;
                self.lookup_child(newparent, newname)?.ok_or(Errno::ENOENT)
            });
            reply_entry(reply, made);
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        guarded("open", || match self.open_backing(ino, flags.0) {
            Ok(fh) => reply.opened(fh, FopenFlags::empty()),
            Err(error) => reply.error(error),
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        guarded("read", || {
            let file = match self.file(fh) {
                Ok(file) => file,
                Err(error) => return reply.error(error),
            };
            let mut buf = vec![0u8; size as usize];
            let mut filled = 0;
            while filled < buf.len() {
                match file.read_at(&mut buf[filled..], offset + filled as u64) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                    Err(error) => return reply.error(errno(error)),
                }
            }
            reply.data(&buf[..filled]);
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        guarded("write", || {
            let written = self.file(fh).and_then(|file| {
                file.write_all_at(data, offset).map_err(errno)?;
                if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    let mode = file.metadata().map_err(errno)?.mode() & 0o7777;
                    let killed = kill_suid_sgid(mode);
                    if killed != mode {
                        file.set_permissions(fs::Permissions::from_mode(killed))
                            .map_err(errno)?;
                    }
                }
                Ok(())
            });
            match written {
                Ok(()) => reply.written(data.len() as u32),
                Err(error) => reply.error(error),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded("release", || {
            lock(&self.handles).files.remove(&fh.0);
            reply.ok();
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded("fsync", || {
            let synced = self.file(fh).and_then(|file| {
                if datasync {
                    file.sync_data()
                } else {
                    file.sync_all()
                }
                .map_err(errno)
            });
            reply_empty(reply, synced);
        });
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guarded("opendir", || {
            // The listing is read at the first READDIR, not here: no
            // descriptor stays open between requests.
            let id = lock(&self.handles).next_id();
            reply.opened(FileHandle(id), FopenFlags::empty());
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || match self.dir_entries(ino, fh, offset) {
            Ok(entries) => {
                for (cookie, name, kind, child) in entries {
                    if reply.add(INodeNo(child), cookie, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(error) => reply.error(error),
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
        guarded("readdirplus", || {
            let entries = match self.dir_entries(ino, fh, offset) {
                Ok(entries) => entries,
                Err(error) => return reply.error(error),
            };
            let dir_path = match self.path(ino) {
                Ok(path) => path,
                Err(error) => return reply.error(error),
            };
            for (cookie, name, _kind, _child) in entries {
                let dot = name == "." || name == "..";
                let Ok(meta) = fs::symlink_metadata(dir_path.join(&name)) else {
                    // Gone since the listing was read.
                    continue;
                };
                let mut inodes = lock(&self.inodes);
                let child = if dot {
                    ino.0
                } else {
                    inodes.fuse_ino(meta.ino())
                };
                let attr = attr_from(&meta, child);
                // Sized without counting: an entry that does not fit is
                // not sent, and the kernel takes no reference for it.
                let generation = Generation(0);
                if reply.add(INodeNo(child), cookie, &name, &TTL, &attr, generation) {
                    break;
                }
                // The kernel takes a reference for every entry except
                // "." and "..".
                if !dot {
                    inodes.remember(child, ino.0, &name);
                }
            }
            reply.ok();
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
        guarded("releasedir", || {
            lock(&self.handles).dirs.remove(&fh.0);
            reply.ok();
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        guarded("fsyncdir", || {
            let synced = self.path(ino).and_then(|path| {
                let dir = File::open(path).map_err(errno)?;
                if datasync {
                    dir.sync_data()
                } else {
                    dir.sync_all()
                }
                .map_err(errno)
            });
            reply_empty(reply, synced);
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || match rustix::fs::statvfs(&self.root) {
            Ok(st) => reply.statfs(
                st.f_blocks,
                st.f_bfree,
                st.f_bavail,
                st.f_files,
                st.f_ffree,
                st.f_bsize as u32,
                st.f_namemax as u32,
                st.f_frsize as u32,
            ),
            Err(error) => reply.error(rustix_errno(error)),
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
            let set = self.path(ino).and_then(|path| {
                let flags = XattrFlags::from_bits_retain(flags as u32);
                rustix::fs::lsetxattr(&path, name, value, flags).map_err(rustix_errno)
            });
            reply_empty(reply, set);
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guarded("getxattr", || {
            let path = match self.path(ino) {
                Ok(path) => path,
                Err(error) => return reply.error(error),
            };
            let mut buf = vec![0u8; size as usize];
            let got = rustix::fs::lgetxattr(&path, name, &mut buf[..]);
            reply_xattr(reply, size, got, &buf);
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            let path = match self.path(ino) {
                Ok(path) => path,
                Err(error) => return reply.error(error),
            };
            let mut buf = vec![0u8; size as usize];
            let got = rustix::fs::llistxattr(&path, &mut buf[..]);
            reply_xattr(reply, size, got, &buf);
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("removexattr", || {
            let removed = self
                .path(ino)
                .and_then(|path| rustix::fs::lremovexattr(&path, name).map_err(rustix_errno));
            reply_empty(reply, removed);
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel has already checked.
        reply.ok();
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
        guarded("create", || {
            let made = self.child_path(parent, name).and_then(|path| {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(mode & !umask & 0o7777)
                    .custom_flags(flags & !STRIPPED_OPEN_FLAGS)
                    .open(&path)
                    .map_err(errno)?;
                let (attr, generation) = self.created(req, parent, name)?;
                let mut handles = lock(&self.handles);
                let id = handles.next_id();
                handles.files.insert(id, Arc::new(file));
                Ok((attr, generation, FileHandle(id)))
            });
            match made {
                Ok((attr, generation, fh)) => {
                    reply.created(&TTL, &attr, generation, fh, FopenFlags::empty())
                }
                Err(error) => reply.error(error),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guarded("fallocate", || {
            let done = self.file(fh).and_then(|file| {
                let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
                rustix::fs::fallocate(&*file, flags, offset, length).map_err(rustix_errno)
            });
            reply_empty(reply, done);
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // Terminal probes (TCGETS from isatty) and the like: not a tty.
        reply.error(Errno::ENOTTY);
    }
}
