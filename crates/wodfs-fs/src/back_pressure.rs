//! Back-pressure paid on a worker thread, off the request path.
//!
//! A writer that outruns the engine's background threads owes a catch-up
//! ([`Tree::catch_up`]): binding a stream's inserts or waiting for node
//! write-back, 100-200 ms at a time. Paid by the writer, it stops the
//! daemon's request thread, and every request queued behind the WRITE
//! (a `ls`, a create) waits as long (`bench/workloads/stall.py`).
//!
//! With a [`BackPressureWorker`] running, a catch-up that may wait is
//! handed to the worker instead, and requests go on while it pays. A
//! writer is still held to the device's pace, in small steps: once
//! [`PACE_FROM`] catch-ups are handed over while the worker is busy, each
//! data write waits up to [`PACE`] for it; only past
//! [`BATCHES_WHILE_BUSY`] does every operation wait for the worker in
//! full.
//!
//! Measured with `bench/workloads/stall.py` (4 GiB streamed, a probe every
//! 2 ms): the writer paying inline gave a longest probe of 146-258 ms and
//! 10-13 probes over 100 ms (eight runs). Handing catch-ups to the worker
//! with only the full wait (at 32) gave 93-206 ms and 0-2: the stream ran
//! 32 MiB ahead, then everything waited for one 80-170 ms catch-up.
//! Pacing gives 47-62 ms and none, p99 21-24 ms, the stream at 555-560
//! MiB/s as before; in a full run beside the reference file systems, p99
//! 16.6 ms and max 42.7 ms against nullfs's 23.1 and 49.0 (FUSE's own
//! floor under a streaming write). What remains is the engine's state
//! lock, held by each binding pass (5-28 ms with rounds of 8,192
//! inserts). Pacing every data write while the worker is busy at all (not
//! only past [`PACE_FROM`]) slowed the stream and raised p99 to 45 ms.
//!
//! Without a worker (tests, `fsck`, the library used alone) the writer
//! pays inline once it has released the namespace lock.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wodfs_engine::{CatchUp, Tree};

/// Catch-ups handed over while the worker is busy, past which each data
/// write waits up to [`PACE`] for the worker to make progress: a stream
/// that outruns binding is slowed a few milliseconds per batch, instead of
/// running on until every request must wait for the worker at once.
pub const PACE_FROM: u32 = 16;

/// The longest a data write waits to be paced.
pub const PACE: Duration = Duration::from_millis(5);

/// Catch-ups handed over while the worker is busy, past which every
/// operation waits for it in full (bounds what writers add while one is
/// paid: each is at most one engine batch, 1 MiB for a stream).
pub const BATCHES_WHILE_BUSY: u32 = 64;

#[derive(Debug, Default)]
struct Slot {
    running: bool,
    stop: bool,
    /// Owed and not yet taken by the worker.
    owed: Option<CatchUp>,
    /// The worker is paying a catch-up.
    busy: bool,
    /// Catch-ups handed over since the worker last took the slot.
    handed_while_busy: u32,
}

impl Slot {
    fn idle(&self) -> bool {
        !self.busy && self.owed.is_none()
    }
}

/// Where catch-ups go: to the worker when one runs, else paid inline.
#[derive(Debug, Default)]
pub(crate) struct BackPressure {
    slot: Mutex<Slot>,
    cv: Condvar,
}

impl BackPressure {
    /// Pays `owed` (the caller holds no lock): hands it to the worker if
    /// one runs and it may wait, else pays it now.
    pub(crate) fn pay(&self, tree: &Tree, owed: CatchUp) {
        if owed.may_wait() {
            let mut s = self.slot.lock();
            if s.running {
                if !s.idle() {
                    s.handed_while_busy += 1;
                }
                s.owed = Some(s.owed.unwrap_or_default().and(owed));
                self.cv.notify_all();
                return;
            }
        }
        // The operation is applied and logged, and an engine error here is
        // sticky: the next operation reports it.
        if let Err(e) = tree.catch_up(owed) {
            log::error!("catching up with the background threads: {e}");
        }
    }

    /// A data write's pace: once the worker is [`PACE_FROM`] catch-ups
    /// behind, wait up to [`PACE`] for it to take them (or finish).
    pub(crate) fn pace_writer(&self) {
        let mut s = self.slot.lock();
        if !s.running || s.idle() || s.handed_while_busy < PACE_FROM {
            return;
        }
        let deadline = Instant::now() + PACE;
        while s.running && !s.idle() && s.handed_while_busy >= PACE_FROM {
            if self.cv.wait_until(&mut s, deadline).timed_out() {
                return;
            }
        }
    }

    /// An operation's turn: it waits for the worker only once the worker
    /// is [`BATCHES_WHILE_BUSY`] catch-ups behind, so neither a `ls` nor
    /// the stream itself is slowed by one catch-up, and neither a stream
    /// nor a flood of creates can outrun the device by more than that.
    pub(crate) fn settle_debt(&self) {
        let mut s = self.slot.lock();
        while s.running && !s.idle() && s.handed_while_busy >= BATCHES_WHILE_BUSY {
            self.cv.wait(&mut s);
        }
    }
}

/// The thread that pays handed-over catch-ups; stops (paying what is
/// still owed) when dropped or [`BackPressureWorker::stop`]ped.
#[derive(Debug)]
pub struct BackPressureWorker {
    shared: Arc<BackPressure>,
    thread: Option<JoinHandle<()>>,
}

impl crate::Fs {
    /// Starts the worker that pays this file system's back-pressure (see
    /// the module `back_pressure`); a daemon starts it with the engine's
    /// background threads. One at a time.
    pub fn start_back_pressure_worker(&self) -> BackPressureWorker {
        let shared = Arc::clone(&self.back_pressure);
        {
            let mut s = shared.slot.lock();
            assert!(!s.running, "a back-pressure worker already runs");
            *s = Slot {
                running: true,
                ..Slot::default()
            };
        }
        let tree = self.tree.clone();
        let bp = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("wodfs-back-pressure".into())
            .spawn(move || {
                // However the thread ends, nobody waits for it any more.
                let _gone = Gone(Arc::clone(&bp));
                pay_handed_over(&tree, &bp);
            })
            .expect("spawning the back-pressure worker");
        BackPressureWorker {
            shared,
            thread: Some(thread),
        }
    }
}

/// The worker's loop: pays what is handed over until told to stop.
fn pay_handed_over(tree: &Tree, bp: &BackPressure) {
    loop {
        let owed = {
            let mut s = bp.slot.lock();
            s.busy = false;
            bp.cv.notify_all();
            while s.owed.is_none() && !s.stop {
                bp.cv.wait(&mut s);
            }
            let Some(owed) = s.owed.take() else {
                return;
            };
            s.busy = true;
            s.handed_while_busy = 0;
            owed
        };
        if let Err(e) = tree.catch_up(owed) {
            log::error!("catching up with the background threads: {e}");
        }
    }
}

/// Marks the worker gone when its thread ends, even by a panic.
struct Gone(Arc<BackPressure>);

impl Drop for Gone {
    fn drop(&mut self) {
        let mut s = self.0.slot.lock();
        s.running = false;
        s.busy = false;
        self.0.cv.notify_all();
    }
}

impl BackPressureWorker {
    /// Pays what is owed, then stops the thread; later catch-ups are paid
    /// inline again.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.shared.slot.lock().stop = true;
        self.shared.cv.notify_all();
        if thread.join().is_err() {
            log::error!("the back-pressure worker panicked");
        }
    }
}

impl Drop for BackPressureWorker {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
