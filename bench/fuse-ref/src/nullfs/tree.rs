//! The nullfs namespace: inodes, directories and their entries, all in
//! memory behind one lock held by `NullFs`.
//!
//! Invariants: every directory entry names a live inode; a directory's
//! `nlink` is 2 plus its subdirectories; an inode is dropped once it has no
//! name (`nlink == 0`) and the kernel holds no reference (`lookups == 0`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};

use super::data::FileData;
use crate::common::BLOCK_BYTES;

/// Readdir cookies 1 and 2 are "." and ".."; entries count from here.
const FIRST_COOKIE: u64 = 3;
const ROOT: u64 = 1;

#[derive(Debug)]
pub enum Body {
    File(FileData),
    Dir(Directory),
    Symlink(PathBuf),
    Special,
}

/// Entries keyed by name and by a cookie that never changes while the
/// entry exists, so a readdir that resumes after deletions skips nothing.
#[derive(Debug)]
pub struct Directory {
    parent: u64,
    by_name: HashMap<OsString, (u64, u64)>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

impl Directory {
    fn new(parent: u64) -> Self {
        Directory {
            parent,
            by_name: HashMap::new(),
            by_cookie: BTreeMap::new(),
            next_cookie: FIRST_COOKIE,
        }
    }

    fn get(&self, name: &OsStr) -> Option<u64> {
        self.by_name.get(name).map(|&(_, ino)| ino)
    }

    fn insert(&mut self, name: &OsStr, ino: u64) {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.by_name.insert(name.to_os_string(), (cookie, ino));
        self.by_cookie.insert(cookie, name.to_os_string());
    }

    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let (cookie, ino) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }

    /// Points an existing name at another inode, keeping its cookie.
    fn repoint(&mut self, name: &OsStr, ino: u64) {
        if let Some(entry) = self.by_name.get_mut(name) {
            entry.1 = ino;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

#[derive(Debug)]
pub struct Inode {
    pub kind: FileType,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
    pub lookups: u64,
    pub body: Body,
    pub xattrs: BTreeMap<OsString, Vec<u8>>,
}

impl Inode {
    pub fn attr(&self, ino: u64) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: self.size,
            blocks: self.size.div_ceil(512),
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: BLOCK_BYTES,
            flags: 0,
        }
    }

    pub fn dir(&self) -> Result<&Directory, Errno> {
        match &self.body {
            Body::Dir(dir) => Ok(dir),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Directory, Errno> {
        match &mut self.body {
            Body::Dir(dir) => Ok(dir),
            _ => Err(Errno::ENOTDIR),
        }
    }

    pub fn touch_modified(&mut self, now: SystemTime) {
        self.mtime = now;
        self.ctime = now;
    }
}

/// What a new inode is made of.
#[derive(Debug)]
pub struct NewInode {
    pub kind: FileType,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub symlink: Option<PathBuf>,
}

/// One entry of a directory listing.
#[derive(Debug)]
pub struct Listed {
    pub cookie: u64,
    pub ino: u64,
    pub name: OsString,
}

#[derive(Debug)]
pub struct Tree {
    /// Boxed: an inode is about 250 bytes, and the map keeps up to twice
    /// as many slots as entries (three times while it grows), a million
    /// of them in TableFS.
    inodes: HashMap<u64, Box<Inode>>,
    next_ino: u64,
}

impl Tree {
    pub fn new(uid: u32, gid: u32) -> Self {
        let now = SystemTime::now();
        let root = Inode {
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid,
            gid,
            rdev: 0,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            // The kernel never forgets the root.
            lookups: 1,
            body: Body::Dir(Directory::new(ROOT)),
            xattrs: BTreeMap::new(),
        };
        Tree {
            inodes: HashMap::from([(ROOT, Box::new(root))]),
            next_ino: ROOT + 1,
        }
    }

    pub fn inode_count(&self) -> u64 {
        self.inodes.len() as u64
    }

    pub fn stored_bytes(&self) -> u64 {
        self.inodes
            .values()
            .map(|inode| match &inode.body {
                Body::File(data) => data.stored_bytes(),
                _ => 0,
            })
            .sum()
    }

    pub fn get(&self, ino: u64) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).map(|i| &**i).ok_or(Errno::ENOENT)
    }

    pub fn get_mut(&mut self, ino: u64) -> Result<&mut Inode, Errno> {
        self.inodes
            .get_mut(&ino)
            .map(|i| &mut **i)
            .ok_or(Errno::ENOENT)
    }

    /// The inode `name` in `parent` names, if any, counting one kernel
    /// reference when found.
    pub fn lookup(&mut self, parent: u64, name: &OsStr) -> Result<Option<FileAttr>, Errno> {
        let dir = self.get(parent)?.dir()?;
        let ino = if name == "." {
            Some(parent)
        } else if name == ".." {
            Some(dir.parent)
        } else {
            dir.get(name)
        };
        match ino {
            Some(ino) => {
                let inode = self.get_mut(ino)?;
                inode.lookups += 1;
                Ok(Some(inode.attr(ino)))
            }
            None => Ok(None),
        }
    }

    pub fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_sub(count);
            self.drop_if_unused(ino);
        }
    }

    fn drop_if_unused(&mut self, ino: u64) {
        if let Some(inode) = self.inodes.get(&ino) {
            if inode.nlink == 0 && inode.lookups == 0 {
                self.inodes.remove(&ino);
            }
        }
    }

    /// Creates an inode under `parent`; the kernel holds one reference.
    pub fn create(&mut self, parent: u64, name: &OsStr, new: NewInode) -> Result<FileAttr, Errno> {
        let now = SystemTime::now();
        let parent_inode = self.get(parent)?;
        if parent_inode.dir()?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        // A set-group-ID directory hands its group (and, to directories,
        // the bit itself) to new entries.
        let mut gid = new.gid;
        let mut perm = new.perm;
        if u32::from(parent_inode.perm) & libc::S_ISGID != 0 {
            gid = parent_inode.gid;
            if new.kind == FileType::Directory {
                perm |= libc::S_ISGID as u16;
            }
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let (body, nlink, size) = match new.kind {
            FileType::Directory => (Body::Dir(Directory::new(parent)), 2, 0),
            FileType::RegularFile => (Body::File(FileData::default()), 1, 0),
            FileType::Symlink => {
                let target = new.symlink.unwrap_or_default();
                let size = target.as_os_str().len() as u64;
                (Body::Symlink(target), 1, size)
            }
            _ => (Body::Special, 1, 0),
        };
        let inode = Inode {
            kind: new.kind,
            perm,
            nlink,
            uid: new.uid,
            gid,
            rdev: new.rdev,
            size,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            lookups: 1,
            body,
            xattrs: BTreeMap::new(),
        };
        let attr = inode.attr(ino);
        self.inodes.insert(ino, Box::new(inode));
        let parent_inode = self.get_mut(parent)?;
        parent_inode.dir_mut()?.insert(name, ino);
        parent_inode.touch_modified(now);
        if new.kind == FileType::Directory {
            parent_inode.nlink += 1;
        }
        Ok(attr)
    }

    pub fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<FileAttr, Errno> {
        let now = SystemTime::now();
        if self.get(ino)?.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        if self.get(parent)?.dir()?.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let parent_inode = self.get_mut(parent)?;
        parent_inode.dir_mut()?.insert(name, ino);
        parent_inode.touch_modified(now);
        let inode = self.get_mut(ino)?;
        inode.nlink += 1;
        inode.ctime = now;
        inode.lookups += 1;
        Ok(inode.attr(ino))
    }

    /// Removes a name: a non-directory for `unlink`, an empty directory
    /// for `rmdir`.
    pub fn remove(&mut self, parent: u64, name: &OsStr, want_dir: bool) -> Result<(), Errno> {
        let now = SystemTime::now();
        let ino = self.get(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let inode = self.get(ino)?;
        let is_dir = inode.kind == FileType::Directory;
        if want_dir && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        if !want_dir && is_dir {
            return Err(Errno::EISDIR);
        }
        if is_dir && !inode.dir()?.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        let parent_inode = self.get_mut(parent)?;
        parent_inode.dir_mut()?.remove(name);
        parent_inode.touch_modified(now);
        if is_dir {
            parent_inode.nlink -= 1;
        }
        self.unname(ino, now);
        Ok(())
    }

    /// One name of `ino` is gone.
    fn unname(&mut self, ino: u64, now: SystemTime) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.ctime = now;
            inode.nlink = if inode.kind == FileType::Directory {
                0
            } else {
                inode.nlink.saturating_sub(1)
            };
        }
        self.drop_if_unused(ino);
    }

    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let now = SystemTime::now();
        let ino = self.get(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let target = self.get(new_parent)?.dir()?.get(new_name);
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let other = target.ok_or(Errno::ENOENT)?;
            return self.exchange(parent, name, ino, new_parent, new_name, other, now);
        }
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        if target == Some(ino) {
            return Ok(());
        }
        let moving_dir = self.get(ino)?.kind == FileType::Directory;
        if let Some(other) = target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            let other_inode = self.get(other)?;
            let other_is_dir = other_inode.kind == FileType::Directory;
            if moving_dir && !other_is_dir {
                return Err(Errno::ENOTDIR);
            }
            if !moving_dir && other_is_dir {
                return Err(Errno::EISDIR);
            }
            if other_is_dir && !other_inode.dir()?.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
        }
        if let Some(other) = target {
            let dest = self.get_mut(new_parent)?;
            dest.dir_mut()?.remove(new_name);
            if moving_dir {
                dest.nlink -= 1;
            }
            self.unname(other, now);
        }
        let source = self.get_mut(parent)?;
        source.dir_mut()?.remove(name);
        source.touch_modified(now);
        if moving_dir {
            source.nlink -= 1;
        }
        let dest = self.get_mut(new_parent)?;
        dest.dir_mut()?.insert(new_name, ino);
        dest.touch_modified(now);
        if moving_dir {
            dest.nlink += 1;
        }
        let inode = self.get_mut(ino)?;
        inode.ctime = now;
        if let Body::Dir(dir) = &mut inode.body {
            dir.parent = new_parent;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &mut self,
        parent: u64,
        name: &OsStr,
        ino: u64,
        new_parent: u64,
        new_name: &OsStr,
        other: u64,
        now: SystemTime,
    ) -> Result<(), Errno> {
        let ino_is_dir = self.get(ino)?.kind == FileType::Directory;
        let other_is_dir = self.get(other)?.kind == FileType::Directory;
        self.get_mut(parent)?.dir_mut()?.repoint(name, other);
        self.get_mut(new_parent)?.dir_mut()?.repoint(new_name, ino);
        if parent != new_parent && ino_is_dir != other_is_dir {
            let (gains, loses) = if ino_is_dir {
                (new_parent, parent)
            } else {
                (parent, new_parent)
            };
            self.get_mut(gains)?.nlink += 1;
            self.get_mut(loses)?.nlink -= 1;
        }
        for (dir, moved) in [(parent, other), (new_parent, ino)] {
            self.get_mut(dir)?.touch_modified(now);
            let inode = self.get_mut(moved)?;
            inode.ctime = now;
            if let Body::Dir(d) = &mut inode.body {
                d.parent = dir;
            }
        }
        Ok(())
    }

    /// Up to `max` entries after `offset` (a cookie; 0 = from the start),
    /// including "." and "..".
    pub fn list(&self, ino: u64, offset: u64, max: usize) -> Result<Vec<Listed>, Errno> {
        let dir = self.get(ino)?.dir()?;
        let mut out = Vec::new();
        if offset < 1 {
            out.push(Listed {
                cookie: 1,
                ino,
                name: ".".into(),
            });
        }
        if offset < 2 {
            out.push(Listed {
                cookie: 2,
                ino: dir.parent,
                name: "..".into(),
            });
        }
        let start = offset.max(FIRST_COOKIE - 1) + 1;
        for (&cookie, name) in dir.by_cookie.range(start..) {
            if out.len() >= max {
                break;
            }
            if let Some(child) = dir.get(name) {
                out.push(Listed {
                    cookie,
                    ino: child,
                    name: name.clone(),
                });
            }
        }
        Ok(out)
    }
}
