//! Write coalescing: consecutive writes to one file are gathered into one
//! engine write of up to [`COALESCE_BYTES`], so streams written in 4–128
//! KiB pieces (`cp`, `tar`, `rsync`) reach the engine as large batches.
//!
//! Invariants:
//! * At most one pending run per inode: bytes `[offset, offset + len)` not
//!   yet handed to the core, at the location the file had when they were
//!   written; all runs together hold at most about [`PENDING_BYTES_MAX`].
//!   A run may be empty: the continuation of a stream whose bytes so far
//!   are written.
//! * Every request other than WRITE and FORGET flushes all pending runs
//!   before it does anything, so no request ever observes a state without
//!   them (sizes, contents, renames that change a location).
//! * A flush that fails (it runs on behalf of some other request) keeps its
//!   errno for the inode; the next fsync, flush or release of that inode
//!   reports it, as the kernel reports a failed page writeback.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use wodfs_fs::{Attr, Fs, FsError, FsResult, KillPriv, Loc};

use crate::adapter::RequestCounters;

/// Largest run gathered before it is written.
pub const COALESCE_BYTES: usize = 1 << 20;

/// Most bytes held in all runs together; past it every run is written
/// (many files written at once must not pin unbounded memory).
pub const PENDING_BYTES_MAX: usize = 64 << 20;

#[derive(Debug)]
struct Run {
    loc: Loc,
    offset: u64,
    data: Vec<u8>,
    kill_priv: KillPriv,
}

impl Run {
    /// A run with nothing gathered yet, continued by a write at `offset`.
    fn empty(loc: Loc, offset: u64, kill_priv: KillPriv) -> Run {
        Run {
            loc,
            offset,
            data: Vec::new(),
            kill_priv,
        }
    }
}

/// Pending runs by inode, and errors of failed flushes.
#[derive(Debug, Default)]
pub struct PendingWrites {
    runs: Mutex<HashMap<u64, Run>>,
    errors: Mutex<HashMap<u64, i32>>,
    counters: Arc<RequestCounters>,
}

impl PendingWrites {
    /// Empty, counting engine writes in `counters`.
    pub fn new(counters: Arc<RequestCounters>) -> PendingWrites {
        PendingWrites {
            counters,
            ..PendingWrites::default()
        }
    }

    /// Takes a WRITE: appends it to the inode's run if it continues it,
    /// otherwise writes the old run and starts a new one. Returns whether
    /// the write cleared set-user-ID or set-group-ID, which leaves the
    /// kernel's cached mode stale.
    pub fn write(
        &self,
        fs: &Fs,
        ino: u64,
        loc: Loc,
        offset: u64,
        data: &[u8],
        kill_priv: KillPriv,
    ) -> FsResult<bool> {
        let mut runs = self.runs.lock();
        if let Some(run) = runs.get_mut(&ino) {
            let continues = run.loc == loc
                && run.offset + run.data.len() as u64 == offset
                && run.kill_priv == kill_priv
                && run.data.len() + data.len() <= COALESCE_BYTES;
            if continues {
                run.data.extend_from_slice(data);
                if run.data.len() == COALESCE_BYTES {
                    // The run stays, empty, for the rest of the stream.
                    let full = std::mem::take(&mut run.data);
                    let at = run.offset;
                    run.offset += full.len() as u64;
                    return self
                        .write_run(fs, &loc, at, &full, kill_priv)
                        .map(|_| false);
                }
                return Ok(false);
            }
            let old = runs.remove(&ino).expect("present");
            self.write_run(fs, &old.loc, old.offset, &old.data, old.kill_priv)?;
        }
        if kill_priv != KillPriv::Keep {
            // The first write of an unprivileged run is the one that can
            // clear privileges: it is written now, so the caller can tell
            // the kernel, and the run continues after it, empty.
            let before = fs.getattr(&loc)?.perm;
            let after = self.write_run(fs, &loc, offset, data, kill_priv)?.perm;
            let end = offset + data.len() as u64;
            runs.insert(ino, Run::empty(loc, end, kill_priv));
            return Ok(after != before);
        }
        if data.len() >= COALESCE_BYTES / 2 {
            return self
                .write_run(fs, &loc, offset, data, kill_priv)
                .map(|_| false);
        }
        runs.insert(
            ino,
            Run {
                loc,
                offset,
                data: data.to_vec(),
                kill_priv,
            },
        );
        let held: usize = runs.values().map(|r| r.data.len()).sum();
        if held > PENDING_BYTES_MAX {
            drop(runs);
            self.flush_all(fs);
        }
        Ok(false)
    }

    /// Writes every pending run (errors are kept per inode).
    pub fn flush_all(&self, fs: &Fs) {
        let mut runs = self.runs.lock();
        if runs.is_empty() {
            return;
        }
        for (ino, run) in runs.drain().filter(|(_, run)| !run.data.is_empty()) {
            if let Err(e) = self.write_run(fs, &run.loc, run.offset, &run.data, run.kill_priv) {
                log::error!("deferred write of inode {ino} failed: {e}");
                self.errors.lock().insert(ino, e.errno());
            }
        }
    }

    /// Writes every pending run, then reports (and forgets) a failed
    /// deferred write of `ino`.
    pub fn settle(&self, fs: &Fs, ino: u64) -> FsResult<()> {
        self.flush_all(fs);
        match self.errors.lock().remove(&ino) {
            Some(code) => Err(FsError::Posix(code)),
            None => Ok(()),
        }
    }

    fn write_run(
        &self,
        fs: &Fs,
        loc: &Loc,
        offset: u64,
        data: &[u8],
        kill_priv: KillPriv,
    ) -> FsResult<Attr> {
        self.counters.engine_writes.fetch_add(1, Ordering::Relaxed);
        fs.write(loc, offset, data, kill_priv)
    }
}
