//! Path resolution inside the model, with Linux's errno for each failure.

use std::collections::BTreeMap;

use super::{Body, EntryKind, Errno, Ino, Inode, Namespace, ROOT_INO};
use crate::path::FsPath;

/// Parses a caller's path; limit violations become `ENAMETOOLONG`.
pub(super) fn parse(path: impl AsRef<[u8]>) -> Result<FsPath, Errno> {
    FsPath::parse(path).map_err(Errno::from)
}

/// The last name of a non-root path (empty for the root, which callers
/// handle before asking).
pub(super) fn last_name(path: &FsPath) -> &[u8] {
    path.file_name().unwrap_or_default()
}

impl Namespace {
    pub(super) fn inode(&self, ino: Ino) -> &Inode {
        // Every inode number reachable from a directory entry is live; the
        // model never hands out others. verify() checks this.
        &self.inodes[&ino]
    }

    pub(super) fn inode_mut(&mut self, ino: Ino) -> &mut Inode {
        self.inodes.get_mut(&ino).expect("live inode")
    }

    pub(super) fn entries(&self, dir: Ino) -> &BTreeMap<Vec<u8>, Ino> {
        match &self.inode(dir).body {
            Body::Dir(entries) => entries,
            _ => panic!("inode {dir} is not a directory"),
        }
    }

    pub(super) fn entries_mut(&mut self, dir: Ino) -> &mut BTreeMap<Vec<u8>, Ino> {
        match &mut self.inode_mut(dir).body {
            Body::Dir(entries) => entries,
            _ => panic!("inode {dir} is not a directory"),
        }
    }

    pub(super) fn child(&self, dir: Ino, name: &[u8]) -> Option<Ino> {
        self.entries(dir).get(name).copied()
    }

    pub(super) fn kind_of(&self, ino: Ino) -> EntryKind {
        self.inode(ino).kind()
    }

    /// Walks every component but the last; returns the directory that holds
    /// (or would hold) the last name. For the root, returns the root.
    pub(super) fn walk_parent(&self, path: &FsPath) -> Result<Ino, Errno> {
        let mut dir = ROOT_INO;
        let depth = path.depth();
        for name in path.names().take(depth.saturating_sub(1)) {
            let next = self.child(dir, name).ok_or(Errno::ENOENT)?;
            match self.kind_of(next) {
                EntryKind::Dir => dir = next,
                EntryKind::File => return Err(Errno::ENOTDIR),
                EntryKind::Symlink => return Err(Errno::ELOOP),
            }
        }
        Ok(dir)
    }

    /// The inode `path` names, without following a final symlink.
    pub(super) fn lookup(&self, path: &FsPath) -> Result<Ino, Errno> {
        if path.is_root() {
            return Ok(ROOT_INO);
        }
        let dir = self.walk_parent(path)?;
        self.child(dir, last_name(path)).ok_or(Errno::ENOENT)
    }

    /// Allocates a new inode with one link.
    pub(super) fn alloc(&mut self, body: Body) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        let inode = Inode {
            body,
            links: 1,
            xattrs: BTreeMap::new(),
        };
        self.inodes.insert(ino, inode);
        ino
    }

    /// Removes one link to `ino`, freeing it when none is left.
    pub(super) fn drop_link(&mut self, ino: Ino) {
        let inode = self.inode_mut(ino);
        inode.links -= 1;
        if inode.links == 0 {
            self.inodes.remove(&ino);
        }
    }

    /// Length of the longest path at or below `ino`, whose path is
    /// `path_bytes` long.
    pub(super) fn deepest_path_bytes(&self, ino: Ino, path_bytes: usize) -> usize {
        // Below the root (`/`, one byte) no separator is added.
        let separator_bytes = usize::from(path_bytes > 1);
        match &self.inode(ino).body {
            Body::Dir(entries) => entries
                .iter()
                .map(|(name, &child)| {
                    let child_bytes = path_bytes + separator_bytes + name.len();
                    self.deepest_path_bytes(child, child_bytes)
                })
                .fold(path_bytes, usize::max),
            _ => path_bytes,
        }
    }
}
