//! The file-system handle: format, open, inode allocation, open-file
//! tracking, orphans, and the helpers every operation family shares.
//!
//! Invariants:
//! * Every namespace or attribute mutation runs under `ns` and commits
//!   as one engine batch ([`Tree::write`]), so a checkpoint holds all of an
//!   operation or none of it.
//! * The counter `sys:next_ino` is written in the same batch as the inode
//!   that used the number before it, so numbers never repeat after a crash.
//! * An orphan (unlinked while open) lives in the inode spaces with a
//!   marker `sys:orphan.<be64 ino>`; it is deleted at its last release or,
//!   after a crash, when the file system is opened.
//! * No stored byte at or past a file's size is non-zero, so growing a
//!   file never needs to clear anything.

use std::cell::Cell;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use wodfs_device::Device;
use wodfs_engine::{CatchUp, Config, IntMap, IntSet, Op, Tree};
use wodfs_schema::key_codec::{
    children_range, inode_blocks_range, inode_meta_key, inode_xattrs_range, meta_key, sys_key,
    PathSpace,
};
use wodfs_schema::FsPath;

use crate::attr::{Attr, Kind, Timespec};
use crate::attr_cache::{AttrCache, Lookup, Plan};
use crate::back_pressure::BackPressure;
use crate::error::{err, FsError, FsResult};
use crate::lazy_atime::PendingAtimes;
use crate::loc::Loc;

/// Inode number of the root directory (also FUSE's root).
pub const ROOT_INO: u64 = 1;
const FORMAT_MAGIC: &[u8] = b"wodfs-fs 1";
const ORPHAN_PREFIX: &[u8] = b"orphan.";

/// Key of the file-system format record.
pub(crate) fn format_key() -> Vec<u8> {
    sys_key(b"format").expect("valid sys name")
}

/// Key of the inode counter.
pub(crate) fn next_ino_key() -> Vec<u8> {
    sys_key(b"next_ino").expect("valid sys name")
}

/// Key of the orphan marker of `ino`.
pub(crate) fn orphan_key(ino: u64) -> Vec<u8> {
    let mut name = ORPHAN_PREFIX.to_vec();
    name.extend_from_slice(&ino.to_be_bytes());
    sys_key(&name).expect("valid sys name")
}

/// Prefix of every orphan marker.
pub(crate) fn orphan_prefix() -> Vec<u8> {
    sys_key(ORPHAN_PREFIX).expect("valid sys name")
}

/// Options of an opened file system.
#[derive(Debug, Clone, Copy)]
pub struct FsOptions {
    /// Update atime on read with relatime rules (atime older than mtime or
    /// ctime, or more than a day old).
    pub relatime: bool,
    /// With `relatime`: update atime on every read (`-o strictatime`).
    pub strictatime: bool,
    /// Delete orphans left by a crash when opening (off for a read-only
    /// check such as fsck).
    pub remove_orphans: bool,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            relatime: true,
            strictatime: false,
            remove_orphans: true,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    next_ino: u64,
    open: IntMap<u64, u32>,
    orphans: IntSet<u64>,
}

/// A mounted (opened) wodfs file system. `Send + Sync`.
#[derive(Debug)]
pub struct Fs {
    pub(crate) tree: Tree,
    ns: Mutex<()>,
    /// Attribute records read or written lately (see `attr_cache`).
    pub(crate) attrs: AttrCache,
    pub(crate) back_pressure: Arc<BackPressure>,
    inner: Mutex<Inner>,
    pub(crate) opts: FsOptions,
    /// Sequential readers, for read-ahead (see `read_streams`).
    pub(crate) read_streams: crate::read_streams::ReadStreams,
    /// Access times not yet written (see `lazy_atime`).
    pub(crate) atimes: PendingAtimes,
}

/// A namespace-lock guard; operations pass it to helpers that must run
/// under the lock. Batches written through it leave the engine's
/// back-pressure step ([`Tree::catch_up`]) until the lock is released, so
/// a writer that outruns the background threads waits for them alone,
/// not with every other request behind it; with a
/// [`crate::BackPressureWorker`] the writer does not wait either (see
/// `back_pressure`).
pub(crate) struct Guard<'a> {
    lock: Option<MutexGuard<'a, ()>>,
    tree: &'a Tree,
    attrs: &'a AttrCache,
    back_pressure: &'a BackPressure,
    atimes: &'a PendingAtimes,
    owed: Cell<Option<CatchUp>>,
}

impl Guard<'_> {
    /// Writes `ops` as one batch (see [`Tree::write`]), after the access
    /// times not yet written.
    pub(crate) fn write(&self, ops: &[Op]) -> FsResult<()> {
        self.write_atimes()?;
        let plan = AttrCache::plan(ops);
        self.settle(plan, self.tree.write_deferred(ops))
    }

    /// Writes `ops`, whose values move into the tree, after the access
    /// times not yet written.
    pub(crate) fn write_owned(&self, ops: Vec<Op>) -> FsResult<()> {
        self.write_atimes()?;
        let plan = AttrCache::plan(&ops);
        self.settle(plan, self.tree.write_owned_deferred(ops))
    }

    /// Writes the access times reads noted (`lazy_atime`) as one batch,
    /// if there are any.
    pub(crate) fn write_atimes(&self) -> FsResult<()> {
        let ops = self.atimes.take_ops();
        if ops.is_empty() {
            return Ok(());
        }
        let plan = AttrCache::plan(&ops);
        self.settle(plan, self.tree.write_owned_deferred(ops))
    }

    /// After a batch: the attribute cache follows it, and its catch-up is
    /// owed until the lock is released.
    fn settle(&self, plan: Plan, written: wodfs_engine::Result<CatchUp>) -> FsResult<()> {
        self.attrs.apply(plan, written.is_ok());
        let owed = written?;
        let before = self.owed.get().unwrap_or_default();
        self.owed.set(Some(before.and(owed)));
        Ok(())
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.lock = None;
        if let Some(owed) = self.owed.take() {
            self.back_pressure.pay(self.tree, owed);
        }
    }
}

impl Fs {
    /// Formats `dev` with an empty file system (root directory owned by
    /// `uid:gid`, mode 0755) and opens it.
    pub fn mkfs(dev: Box<dyn Device>, cfg: Config, uid: u32, gid: u32) -> FsResult<Fs> {
        let tree = Tree::create(dev, cfg)?;
        let root = Attr::new(ROOT_INO, Kind::Dir, 0o755, uid, gid, Timespec::now());
        tree.write(&[
            Op::Insert {
                key: format_key(),
                value: FORMAT_MAGIC.to_vec(),
            },
            Op::Insert {
                key: next_ino_key(),
                value: (ROOT_INO + 1).to_le_bytes().to_vec(),
            },
            Op::Insert {
                key: meta_key(&FsPath::root()),
                value: root.encode(),
            },
        ])?;
        tree.checkpoint()?;
        Fs::from_tree(tree, FsOptions::default())
    }

    /// Opens the file system on `dev` and removes orphans a crash left.
    pub fn open(dev: Box<dyn Device>, cache_bytes: usize, opts: FsOptions) -> FsResult<Fs> {
        let tree = Tree::open(dev, cache_bytes)?;
        Fs::from_tree(tree, opts)
    }

    /// Wraps an opened tree.
    pub fn from_tree(tree: Tree, opts: FsOptions) -> FsResult<Fs> {
        match tree.get(&format_key())? {
            Some(v) if v == FORMAT_MAGIC => {}
            Some(v) => {
                return Err(FsError::NotFs(format!(
                    "unknown format record {:?}",
                    String::from_utf8_lossy(&v)
                )))
            }
            None => return Err(FsError::NotFs("no format record".into())),
        }
        let next_ino = match tree.get(&next_ino_key())? {
            Some(v) if v.len() == 8 => u64::from_le_bytes(v.try_into().unwrap_or([0; 8])),
            _ => return Err(FsError::Corrupt("inode counter missing".into())),
        };
        let fs = Fs {
            tree,
            ns: Mutex::new(()),
            attrs: AttrCache::default(),
            back_pressure: Arc::default(),
            inner: Mutex::new(Inner {
                next_ino,
                ..Inner::default()
            }),
            opts,
            read_streams: Default::default(),
            atimes: PendingAtimes::default(),
        };
        if opts.remove_orphans {
            fs.remove_orphans()?;
        }
        Ok(fs)
    }

    /// The engine under the file system.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Makes everything done so far durable by flushing the engine's log
    /// (fsync, fsyncdir; cheap, group-committed).
    pub fn fsync(&self) -> FsResult<()> {
        self.write_atimes()?;
        Ok(self.tree.sync()?)
    }

    /// Writes the access times reads noted (`lazy_atime`), if any: under
    /// the namespace lock, which an fsync without them does not take.
    fn write_atimes(&self) -> FsResult<()> {
        if self.atimes.any() {
            self.lock().write_atimes()?;
        }
        Ok(())
    }

    /// Writes a checkpoint of the whole tree (unmount, `wodfs sync`); also
    /// makes everything durable and lets the log be reclaimed. On a device
    /// too full to place the checkpoint's nodes, everything is still made
    /// durable by syncing the log (replayed at the next mount), and that
    /// counts as success: the checkpoint is retried later.
    pub fn checkpoint(&self) -> FsResult<()> {
        self.write_atimes()?;
        match self.tree.checkpoint() {
            Err(wodfs_engine::Error::NoSpace {
                needed_bytes,
                free_bytes,
            }) => {
                log::warn!(
                    "no room for a checkpoint ({needed_bytes} bytes needed, {free_bytes} free in pieces): synced the log instead"
                );
                Ok(self.tree.sync()?)
            }
            r => Ok(r?),
        }
    }

    /// Largest number of file bytes one engine batch carries: a large
    /// write is split into batches this big, each under the log's record
    /// limit (a quarter of the log region).
    pub(crate) fn write_chunk_bytes(&self) -> usize {
        let log = self.tree.config().log_bytes as usize;
        (log / 8).clamp(16 << 10, 1 << 20) / 4096 * 4096
    }

    fn remove_orphans(&self) -> FsResult<()> {
        let mut ops = Vec::new();
        for kv in self.tree.scan_prefix(&orphan_prefix()) {
            let (key, _) = kv?;
            let ino = Loc::block_of(&key);
            log::info!("removing orphan inode {ino}");
            ops.extend(delete_inode_ops(ino));
            ops.push(Op::Delete { key });
        }
        if !ops.is_empty() {
            self.tree.write(&ops)?;
            self.attrs.clear();
        }
        Ok(())
    }

    pub(crate) fn lock(&self) -> Guard<'_> {
        self.back_pressure.settle_debt();
        Guard {
            lock: Some(self.ns.lock()),
            tree: &self.tree,
            attrs: &self.attrs,
            back_pressure: &self.back_pressure,
            atimes: &self.atimes,
            owed: Cell::new(None),
        }
    }

    /// Allocates an inode number; the caller must include the returned op
    /// in the batch that creates the inode.
    pub(crate) fn alloc_ino(&self, _g: &Guard<'_>) -> (u64, Op) {
        let mut inner = self.inner.lock();
        let ino = inner.next_ino;
        inner.next_ino += 1;
        (
            ino,
            Op::Insert {
                key: next_ino_key(),
                value: inner.next_ino.to_le_bytes().to_vec(),
            },
        )
    }

    /// Records one more open handle of `ino`.
    pub fn open_file(&self, ino: u64) {
        *self.inner.lock().open.entry(ino).or_insert(0) += 1;
    }

    /// Records the release of a handle of `ino`; the last release of an
    /// orphan deletes it.
    pub fn release_file(&self, ino: u64) -> FsResult<()> {
        let g = self.lock();
        let orphan_gone = {
            let mut inner = self.inner.lock();
            let count = inner.open.entry(ino).or_insert(1);
            *count -= 1;
            if *count == 0 {
                inner.open.remove(&ino);
                inner.orphans.remove(&ino)
            } else {
                false
            }
        };
        if orphan_gone {
            let mut ops = delete_inode_ops(ino);
            ops.push(Op::Delete {
                key: orphan_key(ino),
            });
            g.write(&ops)?;
        }
        Ok(())
    }

    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.inner.lock().open.contains_key(&ino)
    }

    pub(crate) fn mark_orphan(&self, ino: u64) {
        self.inner.lock().orphans.insert(ino);
    }

    /// Checks every cached attribute record against the tree (tests: a
    /// batch that forgot to update the cache shows up here). Returns the
    /// number of records checked.
    #[doc(hidden)]
    pub fn check_attr_cache(&self) -> FsResult<usize> {
        let records = self.attrs.snapshot();
        for (key, cached) in &records {
            let stored = self.stored_attr(key)?;
            if &stored != cached {
                return Err(FsError::Corrupt(format!(
                    "attribute cache holds {cached:?} for key {key:x?}, the tree {stored:?}"
                )));
            }
        }
        Ok(records.len())
    }

    /// The attributes stored under `key`, if any.
    pub(crate) fn get_attr(&self, key: &[u8]) -> FsResult<Option<Attr>> {
        let mut attr = match self.attrs.get(key) {
            Lookup::Hit(attr) => attr,
            Lookup::Miss { generation } => {
                let attr = self.stored_attr(key)?;
                self.attrs.fill(generation, [(key.to_vec(), attr.clone())]);
                attr
            }
        };
        if let Some(a) = attr.as_mut() {
            self.atimes.overlay(key, a);
        }
        Ok(attr)
    }

    /// The attributes the tree holds under `key`, past the cache.
    fn stored_attr(&self, key: &[u8]) -> FsResult<Option<Attr>> {
        match self.tree.get(key)? {
            Some(v) => Ok(Some(Attr::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Attributes and location of the object at `path` (pointers followed).
    pub fn resolve(&self, path: &FsPath) -> FsResult<(Attr, Loc)> {
        match self.try_resolve(path)? {
            Some(found) => Ok(found),
            None => err(libc::ENOENT),
        }
    }

    /// Like [`Fs::resolve`], `None` for a missing path.
    pub fn try_resolve(&self, path: &FsPath) -> FsResult<Option<(Attr, Loc)>> {
        let Some(attr) = self.get_attr(&meta_key(path))? else {
            return Ok(None);
        };
        if attr.is_linked() {
            let ino = attr.ino;
            let real = self.get_attr(&inode_meta_key(ino))?.ok_or_else(|| {
                FsError::Corrupt(format!("{path}: points at missing inode {ino}"))
            })?;
            return Ok(Some((real, Loc::Inode(ino))));
        }
        Ok(Some((attr, Loc::Path(path.clone()))))
    }

    /// Attributes at `loc`.
    pub fn getattr(&self, loc: &Loc) -> FsResult<Attr> {
        match loc {
            Loc::Path(p) => Ok(self.resolve(p)?.0),
            Loc::Inode(i) => self
                .get_attr(&inode_meta_key(*i))?
                .ok_or(FsError::Posix(libc::ENOENT)),
        }
    }

    /// Looks up a directory for a namespace change: it must exist and be a
    /// directory. Errors follow a walk from the root, so a missing or
    /// non-directory ancestor gives the errno Linux would.
    pub(crate) fn dir_attr(&self, dir: &FsPath) -> FsResult<Attr> {
        if let Some((attr, _)) = self.try_resolve(dir)? {
            if attr.kind == Kind::Dir {
                return Ok(attr);
            }
        }
        let mut cur = FsPath::root();
        for name in dir.names() {
            cur = cur.join(name)?;
            match self.try_resolve(&cur)? {
                None => return err(libc::ENOENT),
                Some((a, _)) if a.kind == Kind::Symlink => return err(libc::ELOOP),
                Some((a, _)) if a.kind != Kind::Dir => return err(libc::ENOTDIR),
                Some(_) => {}
            }
        }
        err(libc::ENOTDIR)
    }

    /// True if directory `dir` has no entries.
    pub(crate) fn dir_is_empty(&self, dir: &FsPath) -> FsResult<bool> {
        let r = children_range(PathSpace::Meta, dir);
        match self.tree.range(&r.start, Some(&r.end)).next() {
            None => Ok(true),
            Some(kv) => kv.map(|_| false).map_err(FsError::from),
        }
    }
}

/// Ops that delete every key of inode `ino`.
pub(crate) fn delete_inode_ops(ino: u64) -> Vec<Op> {
    let b = inode_blocks_range(ino);
    let x = inode_xattrs_range(ino);
    vec![
        Op::Delete {
            key: inode_meta_key(ino),
        },
        Op::DeleteRange {
            lo: b.start,
            hi: b.end,
        },
        Op::DeleteRange {
            lo: x.start,
            hi: x.end,
        },
    ]
}

/// The op that stores `attr` at `loc`.
pub(crate) fn put_attr(loc: &Loc, attr: &Attr) -> Op {
    Op::Insert {
        key: loc.meta_key(),
        value: attr.encode(),
    }
}

/// Bytes a logged patch costs besides its key and data: op kind, key
/// length, offset and data length (one-byte varints for attributes).
const PATCH_OVERHEAD_BYTES: usize = 4;

/// The ops that turn the stored record of `old` into that of `new`:
/// blind patches of the bytes that changed (chmod, utimes, the size and
/// times of a write) when they log fewer bytes than rewriting the whole
/// record, an insert otherwise, nothing when nothing changed. TableFS's
/// cold chmod/utime logged 30-40 % fewer bytes this way (session 4).
///
/// A patch of a missing value makes one of zeros, so this is only for a
/// record read under the same lock (the stored bytes are `old.encode()`:
/// decoding and encoding round-trip exactly) that no earlier op of the
/// same batch removes.
pub(crate) fn update_attr(loc: &Loc, old: &Attr, new: &Attr, ops: &mut Vec<Op>) {
    let key = loc.meta_key();
    let (was, now) = (old.encode(), new.encode());
    if was.len() != now.len() {
        ops.push(Op::Insert { key, value: now });
        return;
    }
    // Changed runs; a gap shorter than a patch's own cost is rewritten
    // rather than split into two patches.
    let per_patch = key.len() + PATCH_OVERHEAD_BYTES;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in (0..now.len()).filter(|&i| was[i] != now[i]) {
        match runs.last_mut() {
            Some((_, end)) if i - *end < per_patch => *end = i + 1,
            _ => runs.push((i, i + 1)),
        }
    }
    let patched: usize = runs.iter().map(|(s, e)| per_patch + e - s).sum();
    if patched >= per_patch + now.len() {
        ops.push(Op::Insert { key, value: now });
        return;
    }
    for (start, end) in runs {
        ops.push(Op::Patch {
            key: key.clone(),
            offset: start as u32,
            data: now[start..end].to_vec(),
        });
    }
}
