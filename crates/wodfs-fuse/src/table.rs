//! The in-memory inode table: what the kernel holds, by inode number.
//!
//! Invariants:
//! * Every inode the kernel may name (it got it from lookup, create,
//!   mkdir, mknod, symlink, link or readdirplus, and has not forgotten it)
//!   has an entry; the root (1) always has one.
//! * An entry stores its parent inode and its name, so a path is rebuilt
//!   by walking up, and renaming a directory updates one entry. The kernel
//!   does not forget a directory while it holds inodes inside it, so the
//!   walk always reaches the root.
//! * An entry marked `inode_loc` (hard-linked or open-but-unlinked file)
//!   is addressed by inode number, not path; one marked `gone` has no name
//!   and no data left, only the attributes it had when it went (an open
//!   directory that was removed still answers `fstat`).
//! * A path built for an inode is kept (a few, by inode number) only while
//!   it is the inode's path: before an entry changes (a rename, a removal,
//!   a move to the inode space, the kernel forgetting it), the kept paths
//!   at and below its path are dropped; a lookup that finds an entry
//!   under another name than the table's drops every kept path. Nothing
//!   else changes a path, so a name changed elsewhere in the tree (an
//!   `rm -rf` unlinking file after file) leaves the directories' kept
//!   paths in place.
//! * An entry marked `xattr_free` was created through this mount and has
//!   had no SETXATTR since: it has no extended attributes, so GETXATTR
//!   (the kernel asks for `security.capability` before the first write of
//!   every file) and LISTXATTR are answered without reading the tree. Only
//!   this daemon changes the file system, so the mark stays true; it is
//!   never set on an inode found by lookup, whose history is unknown.

use wodfs_engine::IntMap;
use wodfs_fs::{Attr, FsPath, Loc, Removed, ROOT_INO};

/// One inode the kernel holds. Kept small, since there is one per inode
/// in the kernel's cache and the map keeps about twice as many slots
/// (while it grows, three times): TokuBench's 500,000 files made the
/// table 266 MiB when the rare `gone` attributes were held inline (about
/// 170 bytes a slot); boxed, and the name a boxed slice, a slot is 56
/// bytes.
#[derive(Debug, Clone)]
struct Node {
    parent: u64,
    name: Box<[u8]>,
    lookups: u64,
    inode_loc: bool,
    gone: Option<Box<Attr>>,
    xattr_free: bool,
}

/// A table with fewer entries than a quarter of its slots, and more than
/// this many slots, gives the rest back (the kernel forgets inodes in
/// bulk when it shrinks its caches).
const SHRINK_ABOVE_SLOTS: usize = 1 << 16;

/// Paths built lately, kept for the requests that follow on the same
/// inodes (an untar sends a file's CREATE, WRITEs, SETATTRs and RELEASE
/// one after another, and LOOKUP and CREATE name its directory): slot
/// `ino % RECENT_SLOTS`. Building a path walks the table up to the root
/// and copies every name: 3.8 % of the request thread in an untar.
const RECENT_SLOTS: usize = 8;

/// A path built from the table, still the inode's.
#[derive(Debug, Clone)]
struct Recent {
    ino: u64,
    path: FsPath,
}

/// The slot of `ino`'s kept path.
fn slot_of(ino: u64) -> usize {
    (ino % RECENT_SLOTS as u64) as usize
}

/// Inode number → (parent, name, lookup count).
#[derive(Debug)]
pub struct InodeTable {
    /// Hashed as the engine hashes its own integers: inode numbers are
    /// ours, so SipHash's defence against chosen keys buys nothing.
    nodes: IntMap<u64, Node>,
    /// Paths built lately (see the module invariants for when one goes).
    recent: [Option<Recent>; RECENT_SLOTS],
}

impl Default for InodeTable {
    fn default() -> Self {
        InodeTable::new()
    }
}

impl InodeTable {
    /// A table holding only the root.
    pub fn new() -> InodeTable {
        let root = Node {
            parent: ROOT_INO,
            name: Box::default(),
            lookups: 1,
            inode_loc: false,
            gone: None,
            xattr_free: false,
        };
        InodeTable {
            nodes: IntMap::from_iter([(ROOT_INO, root)]),
            recent: Default::default(),
        }
    }

    /// The path of `ino`, or `None` if it is unknown, gone or has no path.
    pub fn path(&mut self, ino: u64) -> Option<FsPath> {
        if let Some(path) = self.kept(ino) {
            return Some(path.clone());
        }
        let path = self.build_path(ino)?;
        self.recent[slot_of(ino)] = Some(Recent {
            ino,
            path: path.clone(),
        });
        Some(path)
    }

    /// The kept path of `ino`, if any.
    fn kept(&self, ino: u64) -> Option<&FsPath> {
        self.recent[slot_of(ino)]
            .as_ref()
            .filter(|r| r.ino == ino)
            .map(|r| &r.path)
    }

    /// Drops the kept path of `ino`.
    fn drop_kept(&mut self, ino: u64) {
        let slot = &mut self.recent[slot_of(ino)];
        if slot.as_ref().is_some_and(|r| r.ino == ino) {
            *slot = None;
        }
    }

    /// Drops the kept paths of `ino` and of everything below it, before
    /// its entry changes.
    fn drop_kept_below(&mut self, ino: u64) {
        // Built, not kept: keeping it would evict another inode's path
        // from its slot only to drop it again below.
        match self.kept(ino).cloned().or_else(|| self.build_path(ino)) {
            Some(old) => {
                for slot in &mut self.recent {
                    if slot.as_ref().is_some_and(|r| old.contains(&r.path)) {
                        *slot = None;
                    }
                }
            }
            // No path (unknown, gone, or addressed by inode number):
            // nothing kept lies below it.
            None => self.drop_kept(ino),
        }
    }

    fn build_path(&self, ino: u64) -> Option<FsPath> {
        let mut names = Vec::with_capacity(16);
        let mut cur = ino;
        while cur != ROOT_INO {
            let n = self.nodes.get(&cur)?;
            if n.gone.is_some() {
                return None;
            }
            names.push(&n.name[..]);
            cur = n.parent;
            if names.len() > 4096 {
                return None;
            }
        }
        names.reverse();
        FsPath::from_names(names).ok()
    }

    /// Where the keys of `ino` live.
    pub fn loc(&mut self, ino: u64) -> Option<Loc> {
        let n = self.nodes.get(&ino)?;
        if n.inode_loc {
            return Some(Loc::Inode(ino));
        }
        self.path(ino).map(Loc::Path)
    }

    /// Records one more kernel reference to `ino`, named `name` in
    /// `parent`.
    pub fn remember(&mut self, ino: u64, parent: u64, name: &[u8], loc: &Loc) {
        if ino == ROOT_INO {
            return;
        }
        let n = self.nodes.entry(ino).or_insert_with(|| Node {
            parent,
            name: name.into(),
            lookups: 0,
            inode_loc: false,
            gone: None,
            xattr_free: false,
        });
        let inode_loc = matches!(loc, Loc::Inode(_));
        let moved =
            n.parent != parent || *n.name != *name || n.inode_loc != inode_loc || n.gone.is_some();
        n.parent = parent;
        if *n.name != *name {
            n.name = name.into();
        }
        n.lookups += 1;
        n.inode_loc = inode_loc;
        n.gone = None;
        if moved {
            // Found elsewhere than the table thought (rare): the paths
            // below its old name are not worth finding.
            self.recent = Default::default();
        }
    }

    /// `ino` was just created through this mount: it has no xattrs.
    pub fn created(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.xattr_free = true;
        }
    }

    /// An xattr of `ino` may have been set.
    pub fn xattr_set(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.xattr_free = false;
        }
    }

    /// True if `ino` is known to have no xattrs (see the module invariants).
    pub fn is_xattr_free(&self, ino: u64) -> bool {
        self.nodes
            .get(&ino)
            .is_some_and(|n| n.xattr_free && n.gone.is_none())
    }

    /// Drops `count` kernel references to `ino`.
    pub fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT_INO {
            return;
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups = n.lookups.saturating_sub(count);
            if n.lookups == 0 {
                self.drop_kept_below(ino);
                self.nodes.remove(&ino);
                let slots = self.nodes.capacity();
                if slots > SHRINK_ABOVE_SLOTS && self.nodes.len() < slots / 4 {
                    self.nodes.shrink_to(self.nodes.len() * 2);
                }
            }
        }
    }

    /// `ino` was renamed to `name` in `parent`.
    pub fn renamed(&mut self, ino: u64, parent: u64, name: &[u8]) {
        self.drop_kept_below(ino);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
            n.name = name.into();
        }
    }

    /// A name of `r.ino` was removed; `r.inode_loc` says whether the file
    /// lives on in the inode space.
    pub fn removed(&mut self, r: &Removed) {
        self.drop_kept_below(r.ino);
        if let Some(n) = self.nodes.get_mut(&r.ino) {
            if r.inode_loc {
                n.inode_loc = true;
            } else {
                n.gone = Some(Box::new(r.attr.clone()));
            }
        }
    }

    /// The last attributes of `ino` if it is gone but still held.
    pub fn gone_attr(&self, ino: u64) -> Option<Attr> {
        self.nodes
            .get(&ino)
            .and_then(|n| n.gone.as_deref().cloned())
    }

    /// `ino` now lives in the inode space (it got a second name).
    pub fn linked(&mut self, ino: u64) {
        self.drop_kept_below(ino);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.inode_loc = true;
        }
    }

    /// Number of inodes the kernel holds (root included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if only... never: the root is always there.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removal(ino: u64, inode_loc: bool) -> Removed {
        let now = wodfs_fs::Timespec::now();
        Removed {
            ino,
            inode_loc,
            attr: Attr::new(ino, wodfs_fs::Kind::Dir, 0o755, 0, 0, now),
        }
    }

    #[test]
    fn paths_follow_renames_of_ancestors() {
        let mut t = InodeTable::new();
        let p = |s: &str| Loc::Path(FsPath::parse(s).unwrap());
        t.remember(2, 1, b"a", &p("/a"));
        t.remember(3, 2, b"b", &p("/a/b"));
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/a/b");
        t.renamed(2, 1, b"z");
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/z/b");
        t.removed(&removal(3, true));
        assert_eq!(t.loc(3), Some(Loc::Inode(3)));
        assert_eq!(t.gone_attr(3), None);
        t.removed(&removal(2, false));
        assert_eq!(t.path(2), None);
        assert_eq!(t.gone_attr(2).map(|a| a.ino), Some(2));
        t.forget(3, 1);
        assert_eq!(t.loc(3), None);
        assert_eq!(t.len(), 2);
    }

    /// A path kept from an earlier request is not used after any change
    /// of names: an inode forgotten and found again under another name, a
    /// lookup that finds it elsewhere, a second name.
    #[test]
    fn kept_paths_follow_every_change_of_names() {
        let mut t = InodeTable::new();
        let p = |s: &str| Loc::Path(FsPath::parse(s).unwrap());
        t.remember(2, 1, b"d", &p("/d"));
        t.remember(3, 2, b"f", &p("/d/f"));
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/d/f");
        t.forget(3, 1);
        assert_eq!(t.path(3), None);
        t.remember(3, 1, b"g", &p("/g"));
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/g");
        t.remember(3, 2, b"h", &p("/d/h"));
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/d/h");
        assert_eq!(t.loc(3), Some(p("/d/h")));
        t.linked(3);
        assert_eq!(t.loc(3), Some(Loc::Inode(3)));
        // Inodes that share a slot do not answer for each other.
        let other = 3 + RECENT_SLOTS as u64;
        t.remember(other, 1, b"o", &p("/o"));
        assert_eq!(t.path(2).unwrap().as_bytes(), b"/d");
        assert_eq!(t.path(other).unwrap().as_bytes(), b"/o");
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/d/h");
        t.renamed(2, 1, b"e");
        assert_eq!(t.path(3).unwrap().as_bytes(), b"/e/h");
    }

    /// One change of the table, as the adapter makes them.
    #[derive(Debug, Clone)]
    enum Change {
        Remember(u64, u64, u8),
        Renamed(u64, u64, u8),
        Removed(u64, bool),
        Linked(u64),
        Forget(u64),
        Ask,
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        let ino = 1u64..12;
        prop_oneof![
            (ino.clone(), ino.clone(), 0u8..4).prop_map(|(i, p, n)| Change::Remember(i, p, n)),
            (ino.clone(), ino.clone(), 0u8..4).prop_map(|(i, p, n)| Change::Renamed(i, p, n)),
            (ino.clone(), any::<bool>()).prop_map(|(i, l)| Change::Removed(i, l)),
            ino.clone().prop_map(Change::Linked),
            ino.prop_map(Change::Forget),
            Just(Change::Ask),
        ]
    }

    proptest::proptest! {
        /// Whatever happens to the table, a path it answers is the one
        /// built from its entries now: a kept path never outlives a
        /// change that moves it (renames of ancestors, removals, second
        /// names, forgotten and found-again inodes, slot collisions).
        #[test]
        fn kept_paths_are_always_the_built_ones(
            changes in proptest::collection::vec(change(), 1..200),
        ) {
            let mut t = InodeTable::new();
            let name = |n: u8| [b'a' + n];
            for c in changes {
                match c {
                    Change::Remember(i, p, n) if i != p && !t.is_below(p, i) => {
                        let path = t.build_path(p).and_then(|d| d.join(&name(n)).ok());
                        if let Some(path) = path {
                            t.remember(i, p, &name(n), &Loc::Path(path));
                        }
                    }
                    Change::Renamed(i, p, n) if i != p && !t.is_below(p, i) => {
                        t.renamed(i, p, &name(n))
                    }
                    Change::Removed(i, l) => t.removed(&removal(i, l)),
                    Change::Linked(i) => t.linked(i),
                    Change::Forget(i) => t.forget(i, 1),
                    _ => {}
                }
                for ino in 1..12 {
                    let built = t.build_path(ino);
                    proptest::prop_assert_eq!(t.path(ino), built, "inode {} after {:?}", ino, c);
                }
            }
        }
    }

    impl InodeTable {
        /// True if `ino` is `above` or lies below it (test helper: renames
        /// into one's own subtree are refused before they reach the table).
        fn is_below(&self, mut ino: u64, above: u64) -> bool {
            for _ in 0..64 {
                if ino == above {
                    return true;
                }
                match self.nodes.get(&ino) {
                    Some(n) if ino != ROOT_INO => ino = n.parent,
                    _ => return false,
                }
            }
            true
        }
    }

    #[test]
    fn only_created_inodes_without_setxattr_are_xattr_free() {
        let mut t = InodeTable::new();
        let p = |s: &str| Loc::Path(FsPath::parse(s).unwrap());
        t.remember(2, 1, b"looked-up", &p("/looked-up"));
        assert!(!t.is_xattr_free(2), "history unknown");
        t.remember(3, 1, b"new", &p("/new"));
        t.created(3);
        assert!(t.is_xattr_free(3));
        t.remember(3, 1, b"new", &p("/new"));
        assert!(t.is_xattr_free(3), "a second lookup keeps the mark");
        t.xattr_set(3);
        assert!(!t.is_xattr_free(3));
        t.created(4);
        assert!(!t.is_xattr_free(4), "unknown inodes are not marked");
        assert!(!t.is_xattr_free(1), "the root is never marked");
    }

    /// A slot of the map (inode number and entry) stays at 56 bytes: the
    /// table holds one per inode the kernel caches.
    #[test]
    fn a_slot_is_small() {
        assert!(std::mem::size_of::<(u64, Node)>() <= 56);
    }

    /// Forgetting most inodes gives the map's slots back.
    #[test]
    fn forgetting_most_inodes_shrinks_the_table() {
        let mut t = InodeTable::new();
        let p = Loc::Path(FsPath::parse("/f").unwrap());
        let n = 200_000u64;
        for ino in 2..n {
            t.remember(ino, 1, b"f", &p);
        }
        let grown = t.nodes.capacity();
        assert!(grown >= n as usize);
        for ino in 2..n - 100 {
            t.forget(ino, 1);
        }
        assert_eq!(t.len(), 101);
        assert!(
            t.nodes.capacity() <= SHRINK_ABOVE_SLOTS,
            "{} slots for 101 inodes",
            t.nodes.capacity()
        );
        assert_eq!(t.path(n - 1).map(|p| p.to_string()), Some("/f".into()));
    }
}
