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
//! data write waits up to [`pace_for`] for it (growing with the count, at
//! most [`PACE_MAX`]); only past [`BATCHES_WHILE_BUSY`] does every
//! operation wait for the worker in full.
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
//! The paces grow with the count (session 42): on the benchmark's loop
//! device since session 40, the log sync's device flush takes 0.3-0.7 s
//! and no write completes meanwhile, so a catch-up waits that long. With
//! a flat 5 ms pace and the full wait at 64, the stream reached 64 within
//! the flush and then the writer, and every request queued behind it,
//! waited out the rest at once: longest probe 506 / 561 ms, 6 / 7 over
//! 100 ms, p99 34 / 32 ms. Growing paces (5 ms more every 16, at most 25)
//! and the full wait at 96: 114 / 95 ms, 4 / 0 over 100 ms, p99 49 / 52
//! ms (a probe behind a paced write waits up to 25 ms), the writer at
//! 257 / 254 against 241 / 247 MiB/s, resident peak 342 / 306 against
//! 326 / 307 MiB (`run.py --fs wodfs --workload stall,seqio`, two runs
//! of each build, alternating).
//!
//! Without a worker (tests, `fsck`, the library used alone) the writer
//! pays inline once it has released the namespace lock.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use wodfs_engine::{CatchUp, Tree};

/// Catch-ups handed over while the worker is busy, past which each data
/// write waits for the worker to make progress ([`pace_for`]): a stream
/// that outruns binding is slowed a few milliseconds per batch, instead of
/// running on until every request must wait for the worker at once.
pub const PACE_FROM: u32 = 16;

/// The first pace: how long a data write waits at [`PACE_FROM`]; every
/// [`PACE_FROM`] catch-ups more add as much again, up to [`PACE_MAX`].
pub const PACE: Duration = Duration::from_millis(5);

/// The longest a data write waits to be paced: what a request queued
/// behind it waits at most, short of [`BATCHES_WHILE_BUSY`].
pub const PACE_MAX: Duration = Duration::from_millis(25);

/// Catch-ups handed over while the worker is busy, past which every
/// operation waits for it in full (bounds what writers add while one is
/// paid: each is at most one engine batch, 1 MiB for a stream). The paces
/// on the way here add up to 1.2 s: a catch-up that waits for a device
/// flush as long as that is absorbed by pacing alone.
pub const BATCHES_WHILE_BUSY: u32 = 96;

/// How long a data write waits for the worker when `handed` catch-ups were
/// handed over while it was busy: nothing below [`PACE_FROM`], then
/// [`PACE`] more for every [`PACE_FROM`], at most [`PACE_MAX`].
pub fn pace_for(handed: u32) -> Duration {
    (PACE * (handed / PACE_FROM)).min(PACE_MAX)
}

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
                // An idle worker is not woken for a catch-up whose only
                // work is asking the background thread for something
                // (most of a stream's writes): waking it took this
                // thread's CPU. A busy one is handed everything, which
                // paces the writer.
                if s.idle() && !tree.catch_up_asking(owed) {
                    return;
                }
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
    /// behind, wait up to [`pace_for`] for it to take them (or finish).
    pub(crate) fn pace_writer(&self) {
        let mut s = self.slot.lock();
        if !s.running || s.idle() || s.handed_while_busy < PACE_FROM {
            return;
        }
        let deadline = Instant::now() + pace_for(s.handed_while_busy);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_grows_in_steps_up_to_its_cap() {
        assert_eq!(pace_for(0), Duration::ZERO);
        assert_eq!(pace_for(PACE_FROM - 1), Duration::ZERO);
        assert_eq!(pace_for(PACE_FROM), PACE);
        assert_eq!(pace_for(2 * PACE_FROM - 1), PACE);
        assert_eq!(pace_for(2 * PACE_FROM), 2 * PACE);
        assert_eq!(pace_for(BATCHES_WHILE_BUSY - 1), PACE_MAX);
        assert_eq!(pace_for(u32::MAX), PACE_MAX);
        let mut last = Duration::ZERO;
        for handed in 0..2 * BATCHES_WHILE_BUSY {
            assert!(pace_for(handed) >= last, "the pace shrank at {handed}");
            last = pace_for(handed);
        }
    }

    /// The device flush behind a streaming write's log sync took up to 0.74
    /// s on the benchmark's loop device (`bench/RESULTS.md`, session 42):
    /// the paces before the full wait must outlast it, or the writer (and
    /// every request queued behind it) waits the rest of the flush at once.
    #[test]
    fn pacing_alone_outlasts_a_second_long_flush() {
        let paced: Duration = (PACE_FROM..BATCHES_WHILE_BUSY).map(pace_for).sum();
        assert!(paced >= Duration::from_secs(1), "{paced:?}");
        assert!(PACE_MAX <= Duration::from_millis(25));
    }
}
