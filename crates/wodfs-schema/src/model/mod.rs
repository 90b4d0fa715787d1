//! An in-memory model of a POSIX namespace, the oracle for file-system
//! tests.
//!
//! Crash tests replay operations on the model and compare the recovered
//! file system with it; the FUSE exerciser issues each operation to both and
//! compares results. So the model is small and obviously right rather than
//! fast: directories, regular files with their bytes, symlinks, hard links
//! with link counts, and xattrs.
//!
//! Semantics follow Linux, with these deliberate choices:
//!
//! * Paths are absolute and canonical ([`FsPath`] rules); a malformed path
//!   is `EINVAL`, an over-long name or path `ENAMETOOLONG`.
//! * Symlinks are never followed, as with `openat2(RESOLVE_NO_SYMLINKS)`:
//!   a symlink met while walking, or as the target of a data operation
//!   (`write`, `truncate`, `read`, `readdir`), yields `ELOOP`. Operations
//!   that act on a link itself (`unlink`, `rename`, `link`, `stat`,
//!   `readlink`, xattrs as with `l*xattr`) work on symlinks.
//! * A directory rename that would push a descendant past
//!   [`crate::PATH_BYTES_MAX`] fails with `ENAMETOOLONG`: wodfs keys are
//!   full paths, so it must refuse what ext4 would allow.
//! * Times, modes, owners and open-but-unlinked files are not modelled.
//! * Files are plain byte vectors: keep write offsets modest.
//!
//! Equality ([`PartialEq`]) is observational: two models are equal when
//! they show the same paths, kinds, contents, xattrs and hard-link groups,
//! whatever inode numbers they used internally.

mod compare;
mod errno;
mod ops;
mod rename;
mod resolve;
mod verify;
mod xattr;

use std::collections::BTreeMap;

pub use compare::SnapshotEntry;
pub use errno::Errno;

use crate::path::FsPath;

/// The model's own inode number; unrelated to any real file system's.
pub type Ino = u64;

/// Inode number of the root directory.
pub const ROOT_INO: Ino = 1;

/// Largest file size, as for a signed 64-bit `off_t`.
pub const FILE_BYTES_MAX: u64 = i64::MAX as u64;

/// Largest xattr value (Linux `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_BYTES_MAX: usize = 65536;

/// What kind of object a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
}

/// What `lstat` reports, as far as the model tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stat {
    /// The model's inode number (stable across renames, shared by links).
    pub ino: Ino,
    /// The object's kind.
    pub kind: EntryKind,
    /// File length, symlink target length, or 0 for a directory.
    pub size: u64,
    /// Link count: names for files and symlinks, `2 + subdirectories` for
    /// directories (the Linux convention).
    pub nlink: u64,
}

/// How `rename` treats an existing destination (Linux `renameat2` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenameMode {
    /// Plain `rename`: an existing compatible destination is replaced.
    Replace,
    /// `RENAME_NOREPLACE`: fail with `EEXIST` if the destination exists.
    NoReplace,
    /// `RENAME_EXCHANGE`: swap the two names; both must exist.
    Exchange,
}

/// How `set_xattr` treats an existing attribute (`setxattr` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum XattrMode {
    /// Flags 0: create or replace.
    Upsert,
    /// `XATTR_CREATE`: fail with `EEXIST` if it exists.
    Create,
    /// `XATTR_REPLACE`: fail with `ENODATA` if it does not exist.
    Replace,
}

/// One path found by [`Namespace::walk`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WalkEntry {
    /// The path.
    pub path: FsPath,
    /// What it names.
    pub kind: EntryKind,
    /// The model's inode number.
    pub ino: Ino,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Dir(BTreeMap<Vec<u8>, Ino>),
    File(Vec<u8>),
    Symlink(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inode {
    body: Body,
    /// Directory entries naming this inode (0 for the root).
    links: u64,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inode {
    fn kind(&self) -> EntryKind {
        match self.body {
            Body::Dir(_) => EntryKind::Dir,
            Body::File(_) => EntryKind::File,
            Body::Symlink(_) => EntryKind::Symlink,
        }
    }
}

/// The namespace model: an empty root directory to start with.
#[derive(Debug, Clone)]
pub struct Namespace {
    inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
}

impl Default for Namespace {
    fn default() -> Namespace {
        Namespace::new()
    }
}

impl Namespace {
    /// A namespace holding only an empty root directory.
    pub fn new() -> Namespace {
        let root = Inode {
            body: Body::Dir(BTreeMap::new()),
            links: 0,
            xattrs: BTreeMap::new(),
        };
        Namespace {
            inodes: BTreeMap::from([(ROOT_INO, root)]),
            next_ino: ROOT_INO + 1,
        }
    }

    /// Every path in pre-order: a directory, then each entry in name byte
    /// order with its subtree. The root comes first.
    pub fn walk(&self) -> Vec<WalkEntry> {
        let mut out = Vec::new();
        self.walk_from(FsPath::root(), ROOT_INO, &mut out);
        out
    }

    fn walk_from(&self, path: FsPath, ino: Ino, out: &mut Vec<WalkEntry>) {
        let Some(inode) = self.inodes.get(&ino) else {
            return;
        };
        out.push(WalkEntry {
            path: path.clone(),
            kind: inode.kind(),
            ino,
        });
        if let Body::Dir(entries) = &inode.body {
            for (name, &child) in entries {
                // Names in the model were validated on insert; a path that
                // no longer fits is skipped here and reported by verify().
                if let Ok(child_path) = path.join(name) {
                    self.walk_from(child_path, child, out);
                }
            }
        }
    }

    /// Number of live inodes, the root included.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }
}
