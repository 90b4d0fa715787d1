//! Observational equality of namespaces.
//!
//! Inode numbers are an accident of operation order (and a real file
//! system has its own), so models are compared by what a user can see:
//! paths, kinds, contents, xattrs, and which paths are hard links of each
//! other.

use std::collections::{BTreeMap, HashMap};

use super::{Body, EntryKind, Namespace};
use crate::path::FsPath;

/// What one path shows, independent of inode numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SnapshotEntry {
    /// The path.
    pub path: FsPath,
    /// What it names.
    pub kind: EntryKind,
    /// File bytes, symlink target, or empty for a directory.
    pub content: Vec<u8>,
    /// All xattrs of the object.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Link count as `stat` reports it.
    pub nlink: u64,
    /// Index (in the snapshot) of the first path naming the same object, so
    /// hard links share a value and everything else points at itself.
    pub link_group: usize,
}

impl Namespace {
    /// Every path with what it shows, in [`Namespace::walk`] order.
    pub fn snapshot(&self) -> Vec<SnapshotEntry> {
        let mut first_seen = HashMap::new();
        let mut out = Vec::new();
        for (index, entry) in self.walk().into_iter().enumerate() {
            let inode = self.inode(entry.ino);
            let content = match &inode.body {
                Body::Dir(_) => Vec::new(),
                Body::File(bytes) => bytes.clone(),
                Body::Symlink(target) => target.clone(),
            };
            let nlink = self.stat_of(entry.ino).nlink;
            let link_group = *first_seen.entry(entry.ino).or_insert(index);
            out.push(SnapshotEntry {
                path: entry.path,
                kind: entry.kind,
                content,
                xattrs: inode.xattrs.clone(),
                nlink,
                link_group,
            });
        }
        out
    }

    /// A description of the first visible difference, or `None` if the two
    /// namespaces are equal. Meant for test failure messages.
    pub fn first_difference(&self, other: &Namespace) -> Option<String> {
        let ours = self.snapshot();
        let theirs = other.snapshot();
        for (a, b) in ours.iter().zip(&theirs) {
            if a.path != b.path {
                return Some(format!("path {} vs {}", a.path, b.path));
            }
            if a != b {
                return Some(format!("at {}: {a:?} vs {b:?}", a.path));
            }
        }
        match ours.len().cmp(&theirs.len()) {
            std::cmp::Ordering::Less => Some(format!("only right has {}", theirs[ours.len()].path)),
            std::cmp::Ordering::Greater => {
                Some(format!("only left has {}", ours[theirs.len()].path))
            }
            std::cmp::Ordering::Equal => None,
        }
    }
}

impl PartialEq for Namespace {
    fn eq(&self, other: &Namespace) -> bool {
        self.snapshot() == other.snapshot()
    }
}

impl Eq for Namespace {}
