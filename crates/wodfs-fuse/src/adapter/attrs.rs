//! Requests on attributes, extended attributes and file-system statistics.

// The signatures mirror fuser's `Filesystem` trait, argument for argument.
#![allow(clippy::too_many_arguments)]

use super::*;

/// Longest xattr name (Linux `XATTR_NAME_MAX`); the kernel rejects longer.
const XATTR_NAME_BYTES_MAX: usize = 255;

impl WodFuse {
    pub(super) fn do_getattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        guarded("getattr", || {
            // The kernel asks after a write made its copy stale (on the
            // next open, or a setattr by path): answered from the run, which
            // stays pending for the setattrs that may follow.
            // Other files' bytes do not change these attributes: without a
            // run of its own, no run is written (the kernel asks for a
            // directory's after a file is created in it, between a file's
            // close and its setattrs).
            match self.pending.set_attr(&self.fs, ino.0, &SetAttr::default()) {
                FromRun::Answered(attr) => return reply_attr(reply, Ok(attr)),
                FromRun::Cannot => self.pending.flush_all(&self.fs),
                FromRun::NoRun => {}
            }
            let r = match self.loc(ino) {
                Ok(l) => self.fs.getattr(&l),
                // Removed while the kernel still holds it (fstat of an
                // open directory after rmdir): its last attributes.
                Err(e) => self.table.lock().gone_attr(ino.0).ok_or(e),
            };
            reply_attr(reply, r);
        });
    }

    pub(super) fn do_setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        guarded("setattr", || {
            let set = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
                ctime: ctime.map(Into::into),
                kill_priv: modifier(req),
            };
            let from_run = match self.pending.set_attr(&self.fs, ino.0, &set) {
                FromRun::NoRun => match self.loc(ino) {
                    Ok(loc) => self.pending.hold_attr(&self.fs, ino.0, loc, &set),
                    Err(_) => FromRun::Cannot,
                },
                other => other,
            };
            if let FromRun::Answered(attr) = from_run {
                return reply_attr(reply, Ok(attr));
            }
            self.pending.flush_all(&self.fs);
            let r = self.loc(ino).and_then(|l| self.fs.setattr(&l, &set));
            reply_attr(reply, r);
        });
    }

    pub(super) fn do_statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        guarded("statfs", || {
            self.pending.flush_all(&self.fs);
            let s = self.fs.statfs();
            reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_bytes,
                s.name_bytes_max,
                s.block_bytes,
            );
        });
    }

    pub(super) fn do_setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        guarded("setxattr", || {
            self.pending.flush_all(&self.fs);
            // Before the change, so a failure half-way cannot leave a stale mark.
            self.table.lock().xattr_set(ino.0);
            let how = match flags {
                0 => XattrSet::Upsert,
                libc::XATTR_CREATE => XattrSet::Create,
                libc::XATTR_REPLACE => XattrSet::Replace,
                _ => return reply.error(Errno::EINVAL),
            };
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.set_xattr(&l, name_bytes(name), value, how));
            reply_empty(reply, r);
        });
    }

    pub(super) fn do_getxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        guarded("getxattr", || {
            if self.known_xattr_free(ino, name) {
                return reply.error(Errno::ENODATA);
            }
            // No run is written: runs hold no xattrs, and the mark that
            // says a file never had one is changed by SETXATTR alone, which
            // writes the runs first. The kernel asks before the first write
            // of every file it looked up (TableFS's small-file overwrites:
            // the previous file's run was written here).
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.get_xattr(&l, name_bytes(name)));
            reply_xattr(reply, size, r);
        });
    }

    pub(super) fn do_listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        guarded("listxattr", || {
            if self.table.lock().is_xattr_free(ino.0) {
                return reply_xattr(reply, size, Ok(Vec::new()));
            }
            // No run is written, as for GETXATTR.
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.list_xattr(&l))
                .map(|names| {
                    let mut out = Vec::new();
                    for n in names {
                        out.extend_from_slice(&n);
                        out.push(0);
                    }
                    out
                });
            reply_xattr(reply, size, r);
        });
    }

    pub(super) fn do_removexattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        guarded("removexattr", || {
            self.pending.flush_all(&self.fs);
            let r = self
                .loc(ino)
                .and_then(|l| self.fs.remove_xattr(&l, name_bytes(name)));
            reply_empty(reply, r);
        });
    }

    /// True if `ino` has no xattrs by the inode table's mark (and `name`
    /// is one the core would look up rather than reject).
    fn known_xattr_free(&self, ino: INodeNo, name: &OsStr) -> bool {
        let len = name.len();
        (1..=XATTR_NAME_BYTES_MAX).contains(&len) && self.table.lock().is_xattr_free(ino.0)
    }

    pub(super) fn do_access(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mask: AccessFlags,
        reply: ReplyEmpty,
    ) {
        // default_permissions: the kernel has checked already.
        reply.ok();
    }
}
