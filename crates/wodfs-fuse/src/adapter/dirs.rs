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
        if self.listing_is_over(fh, offset) {
            reply.ok();
            return;
        }
        guarded("readdir", || match self.list(ino, fh, offset) {
            Ok(listing) => {
                let mut last = offset;
                let mut all = true;
                for (cookie, name, attr, _) in listing.entries {
                    let name = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(attr.ino), cookie, file_type(attr.kind), name) {
                        all = false;
                        break;
                    }
                    last = cookie;
                }
                if all && listing.complete {
                    self.listing_ends(fh, last);
                }
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
        if self.listing_is_over(fh, offset) {
            reply.ok();
            return;
        }
        guarded("readdirplus", || match self.list(ino, fh, offset) {
            Ok(listing) => {
                let mut last = offset;
                let mut all = true;
                for (cookie, name, attr, loc) in listing.entries {
                    let os = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(attr.ino), cookie, os, &TTL, &file_attr(&attr), GEN) {
                        all = false;
                        break;
                    }
                    last = cookie;
                    // The kernel takes a reference for every entry but . and ..
                    if name != b"." && name != b".." {
                        self.entry(ino, &name, &attr, &loc);
                    }
                }
                if all && listing.complete {
                    self.listing_ends(fh, last);
                }
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

    /// True if handle `fh`'s listing is known to end at `offset`: the
    /// request the kernel sends after the last entry of every directory
    /// it reads is answered without a lookup or a scan.
    fn listing_is_over(&self, fh: FileHandle, offset: u64) -> bool {
        let over = self
            .dirs
            .lock()
            .get(&fh.0)
            .is_some_and(|h| h.is_end(offset));
        if over {
            self.opts
                .counters
                .listing_ends
                .fetch_add(1, Ordering::Relaxed);
        }
        over
    }

    /// Records that handle `fh`'s listing ends after cookie `last`.
    fn listing_ends(&self, fh: FileHandle, last: u64) {
        if let Some(h) = self.dirs.lock().get_mut(&fh.0) {
            h.set_end(last);
        }
    }
}
