//! Write coalescing: consecutive writes to one file are gathered into one
//! engine write of up to [`COALESCE_BYTES`], so streams written in 4–128
//! KiB pieces (`cp`, `tar`, `rsync`) reach the engine as large batches.
//!
//! Invariants:
//! * At most one pending run per inode: bytes `[offset, offset + len)` not
//!   yet handed to the core, at the location the file had when they were
//!   written; all runs together hold at most about [`PENDING_BYTES_MAX`].
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
use wodfs_fs::{Fs, FsError, FsResult, Loc};

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
    kill_priv: bool,
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
    /// otherwise writes the old run and starts a new one.
    pub fn write(
        &self,
        fs: &Fs,
        ino: u64,
        loc: Loc,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
    ) -> FsResult<()> {
        let mut runs = self.runs.lock();
        if let Some(run) = runs.get_mut(&ino) {
            let continues = run.loc == loc
                && run.offset + run.data.len() as u64 == offset
                && run.kill_priv == kill_priv
                && run.data.len() + data.len() <= COALESCE_BYTES;
            if continues {
                run.data.extend_from_slice(data);
                if run.data.len() == COALESCE_BYTES {
                    let run = runs.remove(&ino).expect("present");
                    return self.write_run(fs, &run);
                }
                return Ok(());
            }
            let old = runs.remove(&ino).expect("present");
            self.write_run(fs, &old)?;
        }
        if data.len() >= COALESCE_BYTES / 2 {
            self.counters.engine_writes.fetch_add(1, Ordering::Relaxed);
            return fs.write(&loc, offset, data, kill_priv).map(|_| ());
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
        Ok(())
    }

    /// Writes every pending run (errors are kept per inode).
    pub fn flush_all(&self, fs: &Fs) {
        let mut runs = self.runs.lock();
        if runs.is_empty() {
            return;
        }
        for (ino, run) in runs.drain() {
            if let Err(e) = self.write_run(fs, &run) {
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

    fn write_run(&self, fs: &Fs, run: &Run) -> FsResult<()> {
        self.counters.engine_writes.fetch_add(1, Ordering::Relaxed);
        fs.write(&run.loc, run.offset, &run.data, run.kill_priv)
            .map(|_| ())
    }
}
