//! The inodes the kernel holds, each with the names it is known by
//! (parent inode + name), so a path is rebuilt by walking up and a
//! directory rename changes one entry. No file descriptor is kept per
//! inode: the process may hold at most 20,000, and benchmarks touch
//! hundreds of thousands of files.
//!
//! A FUSE inode number is the backing file system's inode number, with the
//! backing root and number 1 swapped (FUSE's root is 1), so `st_ino` and
//! readdir's `d_ino` agree. When the backing file system reuses the number
//! of a file that was deleted while the kernel still held it, the entry is
//! "reborn" with a new generation, which tells the kernel it is another file.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use fuser::{Errno, FileAttr};

pub const ROOT: u64 = 1;

#[derive(Debug)]
struct Node {
    /// Names this inode is reachable by; the first one builds its path.
    /// Empty for the root and for a deleted inode still held by the kernel.
    links: Vec<(u64, OsString)>,
    lookups: u64,
    generation: u64,
    /// Attributes at deletion, for a deleted inode the kernel still holds:
    /// it may still GETATTR it or flush its times (SETATTR) with no open
    /// file, and an error there would surface as a writeback error. Boxed:
    /// it is rare, and inline it made every slot of the map (one per inode
    /// the kernel holds, a million in TableFS) three times larger.
    deleted: Option<Box<FileAttr>>,
}

#[derive(Debug)]
pub struct Inodes {
    root_path: PathBuf,
    root_backing_ino: u64,
    nodes: HashMap<u64, Node>,
    next_generation: u64,
}

impl Inodes {
    pub fn new(root_path: PathBuf, root_backing_ino: u64) -> Self {
        let root = Node {
            links: Vec::new(),
            lookups: 1,
            generation: 0,
            deleted: None,
        };
        Inodes {
            root_path,
            root_backing_ino,
            nodes: HashMap::from([(ROOT, root)]),
            next_generation: 1,
        }
    }

    /// The FUSE inode number for a backing inode number (an involution).
    pub fn fuse_ino(&self, backing_ino: u64) -> u64 {
        if backing_ino == self.root_backing_ino {
            ROOT
        } else if backing_ino == ROOT {
            self.root_backing_ino
        } else {
            backing_ino
        }
    }

    pub fn path(&self, ino: u64) -> Result<PathBuf, Errno> {
        let mut names: Vec<&OsStr> = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.nodes.get(&at).ok_or(Errno::ESTALE)?;
            let (parent, name) = node.links.first().ok_or(Errno::ENOENT)?;
            names.push(name);
            at = *parent;
            if names.len() > 4096 {
                return Err(Errno::ELOOP);
            }
        }
        let mut path = self.root_path.clone();
        for name in names.iter().rev() {
            path.push(name);
        }
        Ok(path)
    }

    pub fn child_path(&self, parent: u64, name: &OsStr) -> Result<PathBuf, Errno> {
        let mut path = self.path(parent)?;
        path.push(name);
        Ok(path)
    }

    /// The kernel learned `ino` as `name` in `parent` and holds one more
    /// reference; returns the generation to answer with.
    pub fn remember(&mut self, ino: u64, parent: u64, name: &OsStr) -> u64 {
        if ino == ROOT {
            return 0;
        }
        let next_generation = &mut self.next_generation;
        let node = self.nodes.entry(ino).or_insert_with(|| Node {
            links: Vec::new(),
            lookups: 0,
            generation: 0,
            deleted: None,
        });
        if node.deleted.take().is_some() {
            // The backing file system gave the number to a new file. The
            // kernel still counts its references to the old one under the
            // same number, so the lookup count carries over.
            node.links.clear();
            node.generation = *next_generation;
            *next_generation += 1;
        }
        node.lookups += 1;
        if !node.links.iter().any(|(p, n)| *p == parent && n == name) {
            node.links.push((parent, name.to_os_string()));
        }
        node.generation
    }

    pub fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(count);
            if node.lookups == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// `name` in `parent` (naming `ino`) is gone. `last` holds the
    /// inode's final attributes when that was its last name, so the number
    /// may be reused.
    pub fn unlinked(&mut self, ino: u64, parent: u64, name: &OsStr, last: Option<FileAttr>) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.links.retain(|(p, n)| !(*p == parent && n == name));
            if let Some(mut attr) = last {
                attr.nlink = 0;
                node.deleted = Some(Box::new(attr));
                node.links.clear();
            }
        }
    }

    /// The attributes of a deleted inode the kernel still holds.
    pub fn deleted_attr(&self, ino: u64) -> Option<FileAttr> {
        self.nodes
            .get(&ino)
            .and_then(|node| node.deleted.as_deref().copied())
    }

    pub fn set_deleted_attr(&mut self, ino: u64, attr: FileAttr) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if node.deleted.is_some() {
                node.deleted = Some(Box::new(attr));
            }
        }
    }

    /// `ino` moved from `name` in `parent` to `new_name` in `new_parent`.
    pub fn renamed(
        &mut self,
        ino: u64,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            let new_link = (new_parent, new_name.to_os_string());
            match node
                .links
                .iter_mut()
                .find(|(p, n)| *p == parent && n == name)
            {
                Some(link) => *link = new_link,
                None => node.links.insert(0, new_link),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn attr(ino: u64) -> FileAttr {
        FileAttr {
            ino: fuser::INodeNo(ino),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: fuser::FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn paths_follow_renames_of_ancestors() {
        let mut inodes = Inodes::new(PathBuf::from("/b"), 2);
        assert_eq!(inodes.fuse_ino(2), ROOT);
        assert_eq!(inodes.fuse_ino(1), 2);
        inodes.remember(10, ROOT, OsStr::new("d"));
        inodes.remember(11, 10, OsStr::new("f"));
        assert_eq!(inodes.path(11).unwrap(), PathBuf::from("/b/d/f"));
        inodes.renamed(10, ROOT, OsStr::new("d"), ROOT, OsStr::new("e"));
        assert_eq!(inodes.path(11).unwrap(), PathBuf::from("/b/e/f"));
    }

    #[test]
    fn a_reused_number_gets_a_new_generation_and_keeps_its_count() {
        let mut inodes = Inodes::new(PathBuf::from("/b"), 2);
        let first = inodes.remember(10, ROOT, OsStr::new("a"));
        inodes.unlinked(10, ROOT, OsStr::new("a"), Some(attr(10)));
        assert_eq!(inodes.deleted_attr(10).map(|a| a.nlink), Some(0));
        let second = inodes.remember(10, ROOT, OsStr::new("b"));
        assert_ne!(first, second);
        assert_eq!(inodes.path(10).unwrap(), PathBuf::from("/b/b"));
        inodes.forget(10, 1);
        assert!(inodes.path(10).is_ok());
        inodes.forget(10, 1);
        assert_eq!(inodes.path(10), Err(Errno::ESTALE));
    }

    #[test]
    fn hard_links_fall_back_to_a_remaining_name() {
        let mut inodes = Inodes::new(PathBuf::from("/b"), 2);
        inodes.remember(10, ROOT, OsStr::new("a"));
        inodes.remember(10, ROOT, OsStr::new("b"));
        inodes.unlinked(10, ROOT, OsStr::new("a"), None);
        assert_eq!(inodes.path(10).unwrap(), PathBuf::from("/b/b"));
    }
}
