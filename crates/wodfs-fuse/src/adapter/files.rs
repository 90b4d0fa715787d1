//! Requests on open files: data, durability, space, seeking, copying, ioctl.

// The signatures mirror fuser's `Filesystem` trait, argument for argument.
#![allow(clippy::too_many_arguments)]

use super::*;

use std::cell::RefCell;

use crate::read_worker::{ReadJob, HAND_OFF_MIN_BYTES};

thread_local! {
    /// Each thread's READ reply, reused from one request to the
    /// next (see `Fs::read_into`).
    static REPLY_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The largest reply buffer a request thread keeps between requests: the
/// largest READ the kernel sends (256 pages).
const MAX_KEPT_REPLY_BYTES: usize = 1 << 20;

/// Reads `size` bytes at `offset` of the file at `loc` into this thread's
/// reply buffer and sends them.
fn answer_read(fs: &Fs, loc: &Loc, offset: u64, size: u32, reply: ReplyData) {
    REPLY_BUFFER.with_borrow_mut(|out| {
        match fs.read_into(loc, offset, size as usize, out) {
            Ok(()) => reply.data(out),
            Err(e) => reply.error(errno(&e)),
        }
        // A buffer grown past the largest request the kernel sends (a
        // huge read through an odd path) is not kept.
        if out.capacity() > MAX_KEPT_REPLY_BYTES {
            *out = Vec::new();
        }
    });
}

impl WodFuse {
    pub(super) fn do_open(
        &self,
        _req: &Request,
        ino: INodeNo,
        _flags: OpenFlags,
        reply: ReplyOpen,
    ) {
        guarded("open", || {
            self.fs.open_file(ino.0);
            reply.opened(FileHandle(0), self.open_flags());
        });
    }

    pub(super) fn do_read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.opts.counters.reads.fetch_add(1, Ordering::Relaxed);
        guarded("read", || {
            // The file's own run only: other files' bytes change nothing
            // a READ returns, and their runs, gathered, are written
            // together later (TableFS's small-file queries: the previous
            // overwrite's run was a batch of its own, written here).
            self.pending.flush_one(&self.fs, ino.0);
            let loc = match self.loc(ino) {
                Ok(loc) => loc,
                Err(e) => return reply.error(errno(&e)),
            };
            let (Some(worker), true) = (&self.reads, size >= HAND_OFF_MIN_BYTES) else {
                return answer_read(&self.fs, &loc, offset, size, reply);
            };
            let fs = Arc::clone(&self.fs);
            let job: ReadJob = Box::new(move || {
                guarded("read", || answer_read(&fs, &loc, offset, size, reply));
            });
            match worker.try_hand_off(job) {
                Ok(()) => {
                    self.opts
                        .counters
                        .reads_handed_off
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(job) => job(),
            }
        });
    }

    pub(super) fn do_write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let c = &self.opts.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        guarded("write", || {
            let kill = if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                KillPriv::Caller {
                    pid: req.pid(),
                    fsgid: req.gid(),
                }
            } else {
                KillPriv::Keep
            };
            if wodfs_fs::file_end(offset, data.len() as u64).is_none() {
                return reply.error(Errno::EFBIG);
            }
            let loc = || self.loc(ino);
            match self.pending.write(&self.fs, ino.0, loc, offset, data, kill) {
                Ok(cleared_privs) => {
                    if cleared_privs {
                        self.opts.kernel.attributes_changed(ino.0);
                    }
                    reply.written(data.len() as u32)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn do_flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        guarded("flush", || {
            reply_empty(reply, self.pending.settle_own(&self.fs, ino.0));
        });
    }

    pub(super) fn do_release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        guarded("release", || {
            let settled = if self.pending.held_at_path(ino.0) {
                self.pending.take_error(ino.0)
            } else {
                self.pending.settle_own(&self.fs, ino.0)
            };
            let released = self.fs.release_file(ino.0);
            reply_empty(reply, settled.and(released))
        });
    }

    pub(super) fn do_fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.opts.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        guarded("fsync", || match self.pending.settle(&self.fs, ino.0) {
            Ok(()) => sync_in_background(&self.fs, reply),
            Err(e) => reply.error(errno(&e)),
        });
    }

    pub(super) fn do_fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        guarded("fallocate", || {
            self.pending.flush_all(&self.fs);
            let kill = modifier(req);
            let r = self
                .loc(ino)
                .and_then(|l| {
                    self.clearing_privs(ino, &l, kill, || {
                        self.fs.fallocate_as(&l, offset, length, mode, kill)
                    })
                })
                .map(|_| ());
            reply_empty(reply, r);
        });
    }

    pub(super) fn do_lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        guarded("lseek", || {
            self.pending.flush_all(&self.fs);
            let whence = match whence {
                libc::SEEK_DATA => Seek::Data,
                libc::SEEK_HOLE => Seek::Hole,
                libc::SEEK_SET => return reply.offset(offset),
                _ => return reply.error(Errno::EINVAL),
            };
            let Ok(off) = u64::try_from(offset) else {
                return reply.error(Errno::ENXIO);
            };
            match self.loc(ino).and_then(|l| self.fs.seek(&l, off, whence)) {
                Ok(o) => reply.offset(o as i64),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn do_copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        guarded("copy_file_range", || {
            self.pending.flush_all(&self.fs);
            let r = (|| {
                let src = self.loc(ino_in)?;
                let dst = self.loc(ino_out)?;
                // Replies carry a 32-bit count; the kernel loops for more.
                let len = len.min(1 << 30);
                let kill = modifier(req);
                self.clearing_privs(ino_out, &dst, kill, || {
                    self.fs
                        .copy_range(&src, offset_in, &dst, offset_out, len, kill)
                })
            })();
            match r {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub(super) fn do_ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        guarded("ioctl", || {
            self.pending.flush_all(&self.fs);
            if cmd == WODFS_IOC_SYNC {
                match self.fs.checkpoint() {
                    Ok(()) => reply.ioctl(0, &[]),
                    Err(e) => reply.error(errno(&e)),
                }
            } else {
                reply.error(Errno::ENOTTY);
            }
        });
    }
}
