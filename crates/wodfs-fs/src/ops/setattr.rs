//! setattr: chmod, chown, utimens, truncate, in one batch per call.

use super::data::{resize_ops, FILE_BYTES_MAX};
use crate::attr::{Attr, Kind, Timespec};
use crate::error::{err, FsResult};
use crate::fs::{update_attr, Fs};
use crate::loc::Loc;

/// A time to set: a given one or the current time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// This time.
    At(Timespec),
    /// The current time.
    Now,
}

/// The changes of one setattr call; `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    /// New permission bits (file-type bits ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
    /// New change time.
    pub ctime: Option<Timespec>,
    /// Who truncates or chowns, for what that clears of set-user-ID and
    /// set-group-ID.
    pub kill_priv: crate::KillPriv,
}

impl SetAttr {
    /// True if this call changes the size (a truncate or an extension,
    /// which [`SetAttr::apply_to`] leaves to [`Fs::setattr`]).
    pub fn changes_size(&self) -> bool {
        self.size.is_some()
    }

    /// Applies every change but the size to `a`, at time `now`: what
    /// [`Fs::setattr`] does after a size change. The FUSE adapter uses it
    /// to answer a setattr of a file whose writes it still holds, and
    /// writes the result with them.
    pub fn apply_to(&self, a: &mut Attr, now: Timespec) {
        let pick = |t: SetTime| match t {
            SetTime::At(t) => t,
            SetTime::Now => now,
        };
        if self.uid.is_some() || self.gid.is_some() {
            if a.kind != Kind::Dir {
                a.perm = self.kill_priv.apply_chown(a.perm, a.gid);
            }
            a.uid = self.uid.unwrap_or(a.uid);
            a.gid = self.gid.unwrap_or(a.gid);
            a.ctime = now;
        }
        if let Some(mode) = self.mode {
            a.perm = (mode & 0o7777) as u16;
            a.ctime = now;
        }
        if let Some(t) = self.atime {
            a.atime = pick(t);
            a.ctime = now;
        }
        if let Some(t) = self.mtime {
            a.mtime = pick(t);
            a.ctime = now;
        }
        if let Some(t) = self.ctime {
            a.ctime = t;
        }
    }
}

impl Fs {
    /// Applies `set` to the object at `loc` and returns its attributes.
    pub fn setattr(&self, loc: &Loc, set: &SetAttr) -> FsResult<Attr> {
        let g = self.lock();
        let old = self.getattr(loc)?;
        let mut a = old.clone();
        let now = Timespec::now();
        let mut ops = Vec::new();
        if let Some(size) = set.size {
            match a.kind {
                Kind::File => {}
                Kind::Dir => return err(libc::EISDIR),
                _ => return err(libc::EINVAL),
            }
            if size > FILE_BYTES_MAX {
                return err(libc::EFBIG);
            }
            resize_ops(loc, a.size, size, &mut ops);
            a.size = size;
            a.mtime = now;
            a.ctime = now;
            a.perm = set.kill_priv.apply(a.perm, a.gid);
        }
        set.apply_to(&mut a, now);
        update_attr(loc, &old, &a, &mut ops);
        if !ops.is_empty() {
            g.write(&ops)?;
        }
        Ok(a)
    }
}
