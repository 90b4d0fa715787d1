//! Requests that look up, create, link, rename and remove names.

// The signatures mirror fuser's `Filesystem` trait, argument for argument.
#![allow(clippy::too_many_arguments)]

use super::*;

impl WodFuse {
    pub(super) fn do_lookup(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
    ) {
        guarded("lookup", || {
            // Pending bytes change no name: only the attributes of the file
            // found, which its run answers for (rsync's generator looks up
            // the next names while the receiver's last file waits for its
            // times and mode).
            let r = (|| {
                let dir = self.path(parent)?;
                let path = dir.join(name_bytes(name))?;
                match self.fs.try_resolve(&path)? {
                    Some((a, loc)) => {
                        let a = self.pending.attr_of(&self.fs, a, &loc)?;
                        self.entry(parent, name_bytes(name), &a, &loc);
                        Ok(Some(a))
                    }
                    None => Ok(None),
                }
            })();
            match r {
                Ok(Some(a)) => reply.entry(&TTL, &file_attr(&a), GEN),
                Ok(None) => reply.entry(&TTL, &negative_attr(), GEN),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn do_forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        guarded("forget", || self.table.lock().forget(ino.0, nlookup));
    }

    pub(super) fn do_readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        guarded("readlink", || {
            self.pending.flush_all(&self.fs);
            match self.loc(ino).and_then(|l| self.fs.readlink(&l)) {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn do_mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        guarded("mknod", || {
            let Some(kind) =
                Kind::from_mode(mode).filter(|k| *k != Kind::Dir && *k != Kind::Symlink)
            else {
                return reply.error(Errno::EINVAL);
            };
            let mut node = NewNode::new(kind, (mode & !umask & 0o7777) as u16);
            node.rdev = rdev;
            let r = self.make(req, parent, name, node);
            self.reply_entry(reply, r);
        });
    }

    pub(super) fn do_mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        guarded("mkdir", || {
            let perm = mode & !umask & 0o7777;
            let node = NewNode::new(Kind::Dir, perm as u16);
            let r = self.make(req, parent, name, node);
            self.reply_entry(reply, r);
        });
    }

    pub(super) fn do_unlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.remove("unlink", parent, name, reply, Fs::unlink);
    }

    pub(super) fn do_rmdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.remove("rmdir", parent, name, reply, Fs::rmdir);
    }

    /// Unlink and rmdir: the removal, then the inode table learns what is
    /// left of the file (an open one lives on under its inode).
    fn remove(
        &self,
        what: &'static str,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        op: fn(&Fs, &FsPath, &[u8]) -> FsResult<wodfs_fs::Removed>,
    ) {
        guarded(what, || {
            self.pending.flush_all(&self.fs);
            let r = self
                .path(parent)
                .and_then(|d| op(&self.fs, &d, name_bytes(name)));
            let r = r.map(|removed| self.table.lock().removed(&removed));
            reply_empty(reply, r);
        });
    }

    pub(super) fn do_symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        guarded("symlink", || {
            let mut node = NewNode::new(Kind::Symlink, 0o777);
            node.target = target.as_os_str().as_bytes().to_vec();
            let r = self.make(req, parent, link_name, node);
            self.reply_entry(reply, r);
        });
    }

    pub(super) fn do_rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        guarded("rename", || {
            let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                RenameMode::Exchange
            } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                RenameMode::NoReplace
            } else if flags.is_empty() {
                RenameMode::Replace
            } else {
                return reply.error(Errno::EINVAL);
            };
            let (name, newname) = (name_bytes(name), name_bytes(newname));
            let r = (|| {
                let od = self.path(parent)?;
                let nd = self.path(newparent)?;
                let done = self
                    .pending
                    .rename(&self.fs, &od, name, &nd, newname, mode)?;
                let mut t = self.table.lock();
                if let Some(rep) = &done.replaced {
                    t.removed(rep);
                }
                t.renamed(done.ino, newparent.0, newname);
                if let Some(other) = done.exchanged {
                    t.renamed(other, parent.0, name);
                }
                Ok(())
            })();
            reply_empty(reply, r);
        });
    }

    pub(super) fn do_link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        guarded("link", || {
            self.pending.flush_all(&self.fs);
            let r = (|| {
                let old = self.loc(ino)?;
                let dir = self.path(newparent)?;
                let a = self.fs.link(&old, &dir, name_bytes(newname))?;
                let mut t = self.table.lock();
                t.linked(a.ino);
                t.remember(a.ino, newparent.0, name_bytes(newname), &Loc::Inode(a.ino));
                Ok(a)
            })();
            self.reply_entry(reply, r);
        });
    }

    pub(super) fn do_create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        guarded("create", || {
            let node = NewNode::new(Kind::File, (mode & !umask & 0o7777) as u16);
            self.pending.make_answering_first(
                &self.fs,
                // The runs are held back: written after the answer.
                || {
                    self.make_with(req, parent, name, node, |dir, name, node| {
                        self.fs.make(dir, name, node)
                    })
                },
                |made| match made {
                    Ok(a) => {
                        self.fs.open_file(a.ino);
                        reply.created(&TTL, &file_attr(&a), GEN, FileHandle(0), self.open_flags());
                    }
                    Err(e) => reply.error(errno(&e)),
                },
            );
        });
    }
}
