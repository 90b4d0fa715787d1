//! Creating and removing names: create, mknod, mkdir, symlink, link,
//! unlink, rmdir, lookup.

use wodfs_engine::Op;
use wodfs_schema::key_codec::{hardlink_moves, meta_key};
use wodfs_schema::{FsPath, PATH_BYTES_MAX};

use super::data::{Carried, HeldBytes};
use super::{pointer, Removed};
use crate::attr::{Attr, Kind, Timespec};
use crate::error::{err, FsResult};
use crate::fs::{put_attr, Fs, Guard};
use crate::loc::Loc;

/// What a new inode looks like.
#[derive(Debug, Clone)]
pub struct NewNode {
    /// Kind of object.
    pub kind: Kind,
    /// Permission bits (already masked by the umask).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u32,
    /// Symlink target.
    pub target: Vec<u8>,
}

impl NewNode {
    /// A new node of `kind` owned by root with mode `perm`.
    pub fn new(kind: Kind, perm: u16) -> NewNode {
        NewNode {
            kind,
            perm,
            uid: 0,
            gid: 0,
            rdev: 0,
            target: Vec::new(),
        }
    }
}

impl Fs {
    /// Attributes and location of `dir/name`.
    pub fn lookup(&self, dir: &FsPath, name: &[u8]) -> FsResult<(Attr, Loc)> {
        self.resolve(&dir.join(name)?)
    }

    /// Creates `dir/name` (any kind; a symlink needs `node.target`).
    /// Returns its attributes; the new object lives at its path. In a
    /// set-group-ID directory the new object takes the directory's group.
    pub fn make(&self, dir: &FsPath, name: &[u8], node: NewNode) -> FsResult<Attr> {
        let g = self.lock();
        let mut ops = Vec::new();
        let attr = self.make_ops(&g, dir, name, node, &mut ops)?;
        g.write_owned(ops)?;
        Ok(attr)
    }

    /// [`Fs::make`], writing `held` into the file at `loc` in the same
    /// batch, first: tar and git's checkout write a file and then create
    /// the next, and the FUSE adapter still holds the first one's bytes
    /// then. One batch where there were two, and a crash keeps the bytes
    /// whenever it keeps the new name. If they cannot go together (the
    /// bytes fill a batch of their own, or the creation fails), the bytes
    /// are written first and the creation is made alone.
    pub fn make_carrying(
        &self,
        dir: &FsPath,
        name: &[u8],
        node: NewNode,
        loc: &Loc,
        held: HeldBytes<'_>,
    ) -> Carried<Attr> {
        let fits = held.data.len() <= self.write_chunk_bytes() && held.end().is_some();
        if fits {
            self.back_pressure.pace_writer();
            let together = || -> FsResult<Attr> {
                let g = self.lock();
                let mut ops = Vec::new();
                self.held_ops(&g, loc, held, &mut ops)?;
                let attr = self.make_ops(&g, dir, name, node.clone(), &mut ops)?;
                g.write_owned(ops)?;
                Ok(attr)
            };
            if let Ok(attr) = together() {
                return Carried {
                    written: Ok(()),
                    done: Ok(attr),
                };
            }
        }
        // Nothing of a batch that failed was applied (or the store is
        // poisoned and these fail too): one after the other, each with
        // its own outcome.
        Carried {
            written: self.write_then_set(loc, held).map(drop),
            done: self.make(dir, name, node),
        }
    }

    /// Ops that create `dir/name` as [`Fs::make`] does, and its attributes.
    /// The caller holds the namespace lock.
    fn make_ops(
        &self,
        g: &Guard<'_>,
        dir: &FsPath,
        name: &[u8],
        node: NewNode,
        ops: &mut Vec<Op>,
    ) -> FsResult<Attr> {
        let path = dir.join(name)?;
        if node.kind == Kind::Symlink {
            if node.target.is_empty() {
                return err(libc::ENOENT);
            }
            if node.target.len() > PATH_BYTES_MAX {
                return err(libc::ENAMETOOLONG);
            }
        }
        let parent = self.dir_attr(dir)?;
        if self.try_resolve(&path)?.is_some() {
            return err(libc::EEXIST);
        }
        let now = Timespec::now();
        let (ino, counter) = self.alloc_ino(g);
        let mut attr = Attr::new(ino, node.kind, node.perm, node.uid, node.gid, now);
        // A set-group-ID directory gives new entries its group, and new
        // subdirectories its set-group-ID bit (BSD semantics).
        if parent.perm & (libc::S_ISGID as u16) != 0 {
            attr.gid = parent.gid;
            if node.kind == Kind::Dir {
                attr.perm |= libc::S_ISGID as u16;
            }
        }
        attr.rdev = node.rdev;
        if node.kind == Kind::Symlink {
            attr.size = node.target.len() as u64;
            attr.target = node.target;
        }
        let delta = i32::from(node.kind == Kind::Dir);
        ops.extend([
            counter,
            put_attr(&Loc::Path(path), &attr),
            self.touch_dir(dir, &parent, delta, now),
        ]);
        Ok(attr)
    }

    /// Removes the non-directory `dir/name`.
    pub fn unlink(&self, dir: &FsPath, name: &[u8]) -> FsResult<Removed> {
        self.remove(dir, name, false)
    }

    /// Removes the empty directory `dir/name`.
    pub fn rmdir(&self, dir: &FsPath, name: &[u8]) -> FsResult<Removed> {
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: &FsPath, name: &[u8], want_dir: bool) -> FsResult<Removed> {
        let path = dir.join(name)?;
        let g = self.lock();
        let parent = self.dir_attr(dir)?;
        let (attr, loc) = self.resolve(&path)?;
        match (want_dir, attr.kind == Kind::Dir) {
            (false, true) => return err(libc::EISDIR),
            (true, false) => return err(libc::ENOTDIR),
            (true, true) if !self.dir_is_empty(&path)? => return err(libc::ENOTEMPTY),
            _ => {}
        }
        let now = Timespec::now();
        let (mut ops, removed) = self.remove_name_ops(&path, &attr, &loc, now);
        ops.push(self.touch_dir(dir, &parent, -i32::from(want_dir), now));
        g.write(&ops)?;
        Ok(removed)
    }

    /// Gives the file at `old` the extra name `dir/name`. The file moves to
    /// the inode space if this is its second name (O(size) until the
    /// engine's range move is tree surgery); a `Loc::Path` of it the caller
    /// held is then stale, and writes through it would overwrite the name's
    /// pointer record: use `Loc::Inode(ino)` from here on.
    pub fn link(&self, old: &Loc, dir: &FsPath, name: &[u8]) -> FsResult<Attr> {
        let new = dir.join(name)?;
        let g = self.lock();
        let (attr, loc) = match old {
            Loc::Path(p) => self.resolve(p)?,
            Loc::Inode(_) => (self.getattr(old)?, old.clone()),
        };
        if attr.nlink == 0 {
            return err(libc::ENOENT);
        }
        let parent = self.dir_attr(dir)?;
        if self.try_resolve(&new)?.is_some() {
            return err(libc::EEXIST);
        }
        if attr.kind == Kind::Dir {
            return err(libc::EPERM);
        }
        let now = Timespec::now();
        let mut a = attr.clone();
        let Some(nlink) = a.nlink.checked_add(1) else {
            return err(libc::EMLINK);
        };
        a.nlink = nlink;
        a.ctime = now;
        let mut ops = Vec::new();
        if let Loc::Path(p) = &loc {
            for m in hardlink_moves(p, a.ino) {
                ops.push(Op::RangeMove {
                    from: m.from,
                    to: m.to,
                });
            }
            ops.push(Op::Insert {
                key: meta_key(p),
                value: pointer(&a),
            });
        }
        ops.push(put_attr(&Loc::Inode(a.ino), &a));
        ops.push(Op::Insert {
            key: meta_key(&new),
            value: pointer(&a),
        });
        ops.push(self.touch_dir(dir, &parent, 0, now));
        g.write(&ops)?;
        Ok(a)
    }

    /// The target of the symlink at `loc`.
    pub fn readlink(&self, loc: &Loc) -> FsResult<Vec<u8>> {
        let attr = self.getattr(loc)?;
        if attr.kind != Kind::Symlink {
            return err(libc::EINVAL);
        }
        Ok(attr.target)
    }
}
