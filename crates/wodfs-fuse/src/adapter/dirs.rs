//! Directory handles and listings. A handle keeps the names it returned,
//! each once, so cookie `3 + i` resumes after name `i` however the
//! directory changed, and the cookie where its listing ended
//! (`dir_handle.rs`).

// The signatures mirror fuser's `Filesystem` trait, argument for argument.
#![allow(clippy::too_many_arguments)]

use super::*;

impl WodFuse {
    pub(super) fn do_opendir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _flags: OpenFlags,
        reply: ReplyOpen,
    ) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, DirHandle::default());
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    pub(super) fn do_readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.pending.flush_all(&self.fs);
        guarded("readdir", || match self.list(ino, fh, offset) {
            Ok(listing) => {
                self.deliver(fh, offset, listing, |cookie, name, attr, _| {
                    let name = OsStr::from_bytes(&name);
                    reply.add(INodeNo(attr.ino), cookie, file_type(attr.kind), name)
                });
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    pub(super) fn do_readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.pending.flush_all(&self.fs);
        guarded("readdirplus", || match self.list(ino, fh, offset) {
            Ok(listing) => {
                self.deliver(fh, offset, listing, |cookie, name, attr, loc| {
                    let os = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(attr.ino), cookie, os, &TTL, &file_attr(&attr), GEN) {
                        return true;
                    }
                    // The kernel takes a reference for every entry but . and ..
                    if name != b"." && name != b".." {
                        self.entry(ino, &name, &attr, &loc);
                    }
                    false
                });
                reply.ok();
            }
            Err(e) => reply.error(errno(&e)),
        });
    }

    pub(super) fn do_releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    pub(super) fn do_fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.opts.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        sync_in_background(&self.fs, reply);
    }

    /// Hands `listing`'s entries to `add` (which answers true when the
    /// reply is full) and, if every one went in and they reach the end of
    /// the directory, records on the handle that its listing ends there.
    fn deliver(
        &self,
        fh: FileHandle,
        offset: u64,
        listing: Listing,
        mut add: impl FnMut(u64, Vec<u8>, Attr, Loc) -> bool,
    ) {
        let mut last = offset;
        for (cookie, name, attr, loc) in listing.entries {
            if add(cookie, name, attr, loc) {
                return;
            }
            last = cookie;
        }
        if listing.complete {
            if let Some(h) = self.dirs.lock().get_mut(&fh.0) {
                h.set_end(last);
            }
        }
    }
}
