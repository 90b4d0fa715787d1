//! nullfs: a complete file system in memory with no storage below it, the
//! ceiling any FUSE file system can reach on this machine. File contents
//! are kept (reads return what was written), so it is a correct file
//! system for tar, rsync, git, postmark and fs_mark, just not a durable one.

mod data;
mod tree;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::common::{guarded, kill_suid_sgid, kind_from_mode, lock, BLOCK_BYTES, TTL};
use tree::{Body, NewInode, Tree};

/// Entries gathered per READDIR request; the reply buffer (at most a few
/// tens of KiB) fills before this many in practice.
const LIST_BATCH: usize = 1024;

const NO_GENERATION: Generation = Generation(0);

#[derive(Debug)]
pub struct NullFs {
    tree: Mutex<Tree>,
    /// Negotiate the kernel's writeback cache (`--writeback`).
    writeback_cache: bool,
}

impl NullFs {
    pub fn new(writeback_cache: bool) -> Self {
        NullFs {
            tree: Mutex::new(Tree::new(0, 0)),
            writeback_cache,
        }
    }

    fn create_inode(
        &self,
        parent: INodeNo,
        name: &OsStr,
        new: NewInode,
    ) -> Result<FileAttr, Errno> {
        lock(&self.tree).create(parent.0, name, new)
    }
}

/// A new inode owned by the caller; `mode` is masked by `umask`.
fn new_inode(req: &Request, kind: FileType, mode: u32, umask: u32) -> NewInode {
    NewInode {
        kind,
        perm: (mode & !umask & 0o7777) as u16,
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        symlink: None,
    }
}

/// A negative entry: the kernel caches "no such name" for `TTL`.
fn negative_attr() -> FileAttr {
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
        blksize: BLOCK_BYTES,
        flags: 0,
    }
}

fn time_of(time: TimeOrNow, now: SystemTime) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => now,
    }
}

fn reply_entry(reply: ReplyEntry, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, NO_GENERATION),
        Err(error) => reply.error(error),
    }
}

fn reply_empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(error) => reply.error(error),
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        wodfs_fuse::init_flags::negotiate(config, self.writeback_cache);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        guarded("lookup", || match lock(&self.tree).lookup(parent.0, name) {
            Ok(Some(attr)) => reply.entry(&TTL, &attr, NO_GENERATION),
            Ok(None) => reply.entry(&TTL, &negative_attr(), NO_GENERATION),
            Err(error) => reply.error(error),
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || lock(&self.tree).forget(ino.0, nlookup));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        guarded("getattr", || match lock(&self.tree).get(ino.0) {
            Ok(inode) => reply.attr(&TTL, &inode.attr(ino.0)),
            Err(error) => reply.error(error),
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
            let now = SystemTime::now();
            let mut tree = lock(&self.tree);
            let inode = match tree.get_mut(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            if let Some(size) = size {
                let Body::File(data) = &mut inode.body else {
                    let error = if inode.kind == FileType::Directory {
                        Errno::EISDIR
                    } else {
                        Errno::EINVAL
                    };
                    return reply.error(error);
                };
                if size < inode.size {
                    data.truncate(size);
                }
                inode.size = size;
                inode.touch_modified(now);
                if req.uid() != 0 {
                    inode.perm = kill_suid_sgid(u32::from(inode.perm)) as u16;
                }
            }
            if uid.is_some() || gid.is_some() {
                inode.uid = uid.unwrap_or(inode.uid);
                inode.gid = gid.unwrap_or(inode.gid);
                if inode.kind != FileType::Directory {
                    inode.perm = kill_suid_sgid(u32::from(inode.perm)) as u16;
                }
                inode.ctime = now;
            }
            if let Some(mode) = mode {
                inode.perm = (mode & 0o7777) as u16;
                inode.ctime = now;
            }
            if let Some(atime) = atime {
                inode.atime = time_of(atime, now);
                inode.ctime = now;
            }
            if let Some(mtime) = mtime {
                inode.mtime = time_of(mtime, now);
                inode.ctime = now;
            }
            if let Some(ctime) = ctime {
                inode.ctime = ctime;
            }
            reply.attr(&TTL, &inode.attr(ino.0));
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded("readlink", || match lock(&self.tree).get(ino.0) {
            Ok(inode) => match &inode.body {
                Body::Symlink(target) => reply.data(target.as_os_str().as_bytes()),
                _ => reply.error(Errno::EINVAL),
            },
            Err(error) => reply.error(error),
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
            let mut new = new_inode(req, kind_from_mode(mode), mode, umask);
            new.rdev = rdev;
            let made = self.create_inode(parent, name, new);
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
            let new = new_inode(req, FileType::Directory, mode, umask);
            let made = self.create_inode(parent, name, new);
            reply_entry(reply, made);
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("unlink", || {
            reply_empty(reply, lock(&self.tree).remove(parent.0, name, false));
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("rmdir", || {
            reply_empty(reply, lock(&self.tree).remove(parent.0, name, true));
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
            let mut new = new_inode(req, FileType::Symlink, 0o777, 0);
            new.symlink = Some(target.to_path_buf());
            let made = self.create_inode(parent, link_name, new);
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
            let renamed = lock(&self.tree).rename(parent.0, name, newparent.0, newname, flags);
            reply_empty(reply, renamed);
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
            reply_entry(reply, lock(&self.tree).link(ino.0, newparent.0, newname));
        });
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        guarded("open", || reply.opened(FileHandle(0), FopenFlags::empty()));
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
        guarded("read", || match lock(&self.tree).get(ino.0) {
            Ok(inode) => match &inode.body {
                Body::File(data) => reply.data(&data.read(offset, size as usize, inode.size)),
                _ => reply.error(Errno::EISDIR),
            },
            Err(error) => reply.error(error),
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
        guarded("write", || {
            let mut tree = lock(&self.tree);
            let inode = match tree.get_mut(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            let Body::File(contents) = &mut inode.body else {
                return reply.error(Errno::EISDIR);
            };
            contents.write(offset, data);
            inode.size = inode.size.max(offset + data.len() as u64);
            inode.touch_modified(SystemTime::now());
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                inode.perm = kill_suid_sgid(u32::from(inode.perm)) as u16;
            }
            reply.written(data.len() as u32);
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

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        guarded("readdir", || {
            let tree = lock(&self.tree);
            let listed = match tree.list(ino.0, offset, LIST_BATCH) {
                Ok(listed) => listed,
                Err(error) => return reply.error(error),
            };
            for entry in listed {
                let Ok(child) = tree.get(entry.ino) else {
                    continue;
                };
                if reply.add(INodeNo(entry.ino), entry.cookie, child.kind, &entry.name) {
                    break;
                }
            }
            reply.ok();
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        guarded("readdirplus", || {
            let mut tree = lock(&self.tree);
            let listed = match tree.list(ino.0, offset, LIST_BATCH) {
                Ok(listed) => listed,
                Err(error) => return reply.error(error),
            };
            for entry in listed {
                let Ok(child) = tree.get_mut(entry.ino) else {
                    continue;
                };
                let attr = child.attr(entry.ino);
                if reply.add(
                    INodeNo(entry.ino),
                    entry.cookie,
                    &entry.name,
                    &TTL,
                    &attr,
                    NO_GENERATION,
                ) {
                    break;
                }
                // The kernel takes a reference for every entry except
                // "." and "..".
                if entry.name != "." && entry.name != ".." {
                    child.lookups += 1;
                }
            }
            reply.ok();
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || {
            let tree = lock(&self.tree);
            let blocks: u64 = 1 << 32;
            let files: u64 = 1 << 32;
            let used = tree.stored_bytes().div_ceil(u64::from(BLOCK_BYTES));
            let free = blocks.saturating_sub(used);
            let ffree = files.saturating_sub(tree.inode_count());
            reply.statfs(
                blocks,
                free,
                free,
                files,
                ffree,
                BLOCK_BYTES,
                255,
                BLOCK_BYTES,
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
            let mut tree = lock(&self.tree);
            let inode = match tree.get_mut(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            let exists = inode.xattrs.contains_key(name);
            if flags & libc::XATTR_CREATE != 0 && exists {
                return reply.error(Errno::EEXIST);
            }
            if flags & libc::XATTR_REPLACE != 0 && !exists {
                return reply.error(Errno::from_i32(libc::ENODATA));
            }
            inode.xattrs.insert(name.to_os_string(), value.to_vec());
            inode.ctime = SystemTime::now();
            reply.ok();
        });
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        guarded("getxattr", || {
            let tree = lock(&self.tree);
            let value = match tree.get(ino.0) {
                Ok(inode) => inode.xattrs.get(name),
                Err(error) => return reply.error(error),
            };
            match value {
                None => reply.error(Errno::from_i32(libc::ENODATA)),
                Some(value) if size == 0 => reply.size(value.len() as u32),
                Some(value) if value.len() > size as usize => reply.error(Errno::ERANGE),
                Some(value) => reply.data(value),
            }
        });
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            let tree = lock(&self.tree);
            let inode = match tree.get(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            let mut names = Vec::new();
            for name in inode.xattrs.keys() {
                names.extend_from_slice(name.as_bytes());
                names.push(0);
            }
            if size == 0 {
                reply.size(names.len() as u32);
            } else if names.len() > size as usize {
                reply.error(Errno::ERANGE);
            } else {
                reply.data(&names);
            }
        });
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        guarded("removexattr", || {
            let mut tree = lock(&self.tree);
            let inode = match tree.get_mut(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            match inode.xattrs.remove(name) {
                Some(_) => {
                    inode.ctime = SystemTime::now();
                    reply.ok();
                }
                None => reply.error(Errno::from_i32(libc::ENODATA)),
            }
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
        _flags: i32,
        reply: ReplyCreate,
    ) {
        guarded("create", || {
            let new = new_inode(req, FileType::RegularFile, mode, umask);
            match self.create_inode(parent, name, new) {
                Ok(attr) => reply.created(
                    &TTL,
                    &attr,
                    NO_GENERATION,
                    FileHandle(0),
                    FopenFlags::empty(),
                ),
                Err(error) => reply.error(error),
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
            let mut tree = lock(&self.tree);
            let inode = match tree.get_mut(ino.0) {
                Ok(inode) => inode,
                Err(error) => return reply.error(error),
            };
            let size = inode.size;
            let Body::File(data) = &mut inode.body else {
                return reply.error(Errno::ENODEV);
            };
            let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
            let operation = mode & !libc::FALLOC_FL_KEEP_SIZE;
            let end = offset.saturating_add(length);
            match operation {
                0 => {}
                libc::FALLOC_FL_PUNCH_HOLE if keep_size => data.zero(offset, length, size),
                libc::FALLOC_FL_ZERO_RANGE => data.zero(offset, length, size),
                // Never claim a mode that is not implemented: fsx probes.
                _ => return reply.error(Errno::from_i32(libc::EOPNOTSUPP)),
            }
            if !keep_size && end > size {
                inode.size = end;
            }
            inode.touch_modified(SystemTime::now());
            reply.ok();
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
