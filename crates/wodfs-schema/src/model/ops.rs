//! Namespace and data operations of the model (all but rename and xattrs).
//!
//! Each operation checks in the order Linux does, so the first error the
//! model reports is the one the kernel would.

use std::collections::BTreeMap;

use super::resolve::{last_name, parse};
use super::{Body, EntryKind, Errno, Ino, Namespace, Stat, FILE_BYTES_MAX, ROOT_INO};
use crate::path::{FsPath, PATH_BYTES_MAX};

impl Namespace {
    /// Creates an empty regular file (`open(O_CREAT | O_EXCL)`).
    pub fn create(&mut self, path: impl AsRef<[u8]>) -> Result<(), Errno> {
        let path = parse(path)?;
        self.add_entry(&path, Body::File(Vec::new()))
    }

    /// Creates an empty directory.
    pub fn mkdir(&mut self, path: impl AsRef<[u8]>) -> Result<(), Errno> {
        let path = parse(path)?;
        self.add_entry(&path, Body::Dir(BTreeMap::new()))
    }

    /// Creates a symlink at `path` pointing to `target` (stored verbatim,
    /// never resolved).
    pub fn symlink(
        &mut self,
        target: impl AsRef<[u8]>,
        path: impl AsRef<[u8]>,
    ) -> Result<(), Errno> {
        let target = target.as_ref();
        // The kernel copies the target in first: an empty one is ENOENT.
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.contains(&0) {
            return Err(Errno::EINVAL);
        }
        if target.len() > PATH_BYTES_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let path = parse(path)?;
        self.add_entry(&path, Body::Symlink(target.to_vec()))
    }

    fn add_entry(&mut self, path: &FsPath, body: Body) -> Result<(), Errno> {
        if path.is_root() {
            return Err(Errno::EEXIST);
        }
        let dir = self.walk_parent(path)?;
        let name = last_name(path);
        if self.child(dir, name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.alloc(body);
        self.entries_mut(dir).insert(name.to_vec(), ino);
        Ok(())
    }

    /// Adds the name `new` for the object at `old` (`link`, which does not
    /// follow a symlink at `old`).
    pub fn link(&mut self, old: impl AsRef<[u8]>, new: impl AsRef<[u8]>) -> Result<(), Errno> {
        let old = parse(old)?;
        let new = parse(new)?;
        let ino = self.lookup(&old)?;
        if new.is_root() {
            return Err(Errno::EEXIST);
        }
        let dir = self.walk_parent(&new)?;
        let name = last_name(&new);
        if self.child(dir, name).is_some() {
            return Err(Errno::EEXIST);
        }
        if self.kind_of(ino) == EntryKind::Dir {
            return Err(Errno::EPERM);
        }
        self.inode_mut(ino).links += 1;
        self.entries_mut(dir).insert(name.to_vec(), ino);
        Ok(())
    }

    /// Removes a non-directory name; the object goes with its last name.
    pub fn unlink(&mut self, path: impl AsRef<[u8]>) -> Result<(), Errno> {
        let path = parse(path)?;
        if path.is_root() {
            return Err(Errno::EISDIR);
        }
        let dir = self.walk_parent(&path)?;
        let name = last_name(&path);
        let ino = self.child(dir, name).ok_or(Errno::ENOENT)?;
        if self.kind_of(ino) == EntryKind::Dir {
            return Err(Errno::EISDIR);
        }
        self.entries_mut(dir).remove(name);
        self.drop_link(ino);
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, path: impl AsRef<[u8]>) -> Result<(), Errno> {
        let path = parse(path)?;
        if path.is_root() {
            return Err(Errno::EBUSY);
        }
        let dir = self.walk_parent(&path)?;
        let name = last_name(&path);
        let ino = self.child(dir, name).ok_or(Errno::ENOENT)?;
        if self.kind_of(ino) != EntryKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        if !self.entries(ino).is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.entries_mut(dir).remove(name);
        self.drop_link(ino);
        Ok(())
    }

    fn file_bytes_mut(&mut self, path: &FsPath) -> Result<&mut Vec<u8>, Errno> {
        let ino = self.lookup(path)?;
        match &mut self.inode_mut(ino).body {
            Body::File(bytes) => Ok(bytes),
            Body::Dir(_) => Err(Errno::EISDIR),
            Body::Symlink(_) => Err(Errno::ELOOP),
        }
    }

    fn file_bytes(&self, path: &FsPath) -> Result<&[u8], Errno> {
        let ino = self.lookup(path)?;
        match &self.inode(ino).body {
            Body::File(bytes) => Ok(bytes),
            Body::Dir(_) => Err(Errno::EISDIR),
            Body::Symlink(_) => Err(Errno::ELOOP),
        }
    }

    /// Writes `data` at `offset` (`pwrite`), zero-filling any gap past the
    /// old end. An empty write changes nothing.
    pub fn write(&mut self, path: impl AsRef<[u8]>, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let path = parse(path)?;
        let bytes = self.file_bytes_mut(&path)?;
        if data.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&end| end <= FILE_BYTES_MAX)
            .ok_or(Errno::EFBIG)?;
        let start = usize::try_from(offset).map_err(|_| Errno::EFBIG)?;
        let end = usize::try_from(end).map_err(|_| Errno::EFBIG)?;
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[start..end].copy_from_slice(data);
        Ok(())
    }

    /// Sets the file length, cutting or zero-extending (`truncate`).
    pub fn truncate(&mut self, path: impl AsRef<[u8]>, len: u64) -> Result<(), Errno> {
        // A length above i64::MAX is a negative off_t, which the kernel
        // rejects before it even looks the path up.
        if len > FILE_BYTES_MAX {
            return Err(Errno::EINVAL);
        }
        let path = parse(path)?;
        let bytes = self.file_bytes_mut(&path)?;
        let len = usize::try_from(len).map_err(|_| Errno::EFBIG)?;
        bytes.resize(len, 0);
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` (`pread`); short at end of file.
    pub fn read(&self, path: impl AsRef<[u8]>, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let path = parse(path)?;
        let bytes = self.file_bytes(&path)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let end = start.saturating_add(len).min(bytes.len());
        Ok(bytes[start..end].to_vec())
    }

    /// The whole content of a regular file.
    pub fn read_all(&self, path: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        let path = parse(path)?;
        Ok(self.file_bytes(&path)?.to_vec())
    }

    /// The target of a symlink.
    pub fn readlink(&self, path: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        let path = parse(path)?;
        let ino = self.lookup(&path)?;
        match &self.inode(ino).body {
            Body::Symlink(target) => Ok(target.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The names in a directory, in byte order (which is also wodfs key
    /// order, so a real `readdir` returns the same sequence).
    pub fn readdir(&self, path: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>, Errno> {
        let path = parse(path)?;
        let ino = self.lookup(&path)?;
        match &self.inode(ino).body {
            Body::Dir(entries) => Ok(entries.keys().cloned().collect()),
            Body::File(_) => Err(Errno::ENOTDIR),
            Body::Symlink(_) => Err(Errno::ELOOP),
        }
    }

    /// `lstat`: what `path` itself is.
    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Stat, Errno> {
        let path = parse(path)?;
        let ino = self.lookup(&path)?;
        Ok(self.stat_of(ino))
    }

    pub(super) fn stat_of(&self, ino: Ino) -> Stat {
        let inode = self.inode(ino);
        let (size, nlink) = match &inode.body {
            Body::Dir(entries) => {
                let subdirs = entries
                    .values()
                    .filter(|&&child| self.kind_of(child) == EntryKind::Dir)
                    .count() as u64;
                (0, 2 + subdirs)
            }
            Body::File(bytes) => (bytes.len() as u64, inode.links),
            Body::Symlink(target) => (target.len() as u64, inode.links),
        };
        Stat {
            ino,
            kind: inode.kind(),
            size,
            nlink,
        }
    }

    /// True if `path` names something.
    pub fn exists(&self, path: impl AsRef<[u8]>) -> bool {
        parse(path).and_then(|path| self.lookup(&path)).is_ok()
    }

    /// True if the root directory is empty.
    pub fn is_empty(&self) -> bool {
        self.entries(ROOT_INO).is_empty()
    }
}
