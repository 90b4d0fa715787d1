//! A second thread for large READs, so that two replies of a sequential
//! read are built and copied into the kernel at once.
//!
//! A large READ costs its thread two copies of every byte: ours, of the
//! blocks from the cached leaves into the reply, and the kernel's, of the
//! reply into the page cache (inside the reply's `writev`). On a cold
//! 4 GiB read with one request thread, that thread was on the CPU nearly
//! the whole time, and it was the limit: the device and the engine's
//! read-ahead threads waited for it. The kernel sends the READs of one
//! readahead window together (two 1 MiB requests for a 2 MiB window), so
//! the request thread hands the first to this worker and serves the next
//! itself.
//!
//! Only large READs come here: every other request, and a small READ (a
//! point read, where a thread hand-off would cost more than it saves),
//! stays on the request thread, whose order of work is unchanged. The
//! worker takes a job only when it is idle; otherwise the request thread
//! runs the job itself, so a READ never waits behind another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use parking_lot::Mutex;

/// A READ to answer: builds its reply and sends it.
pub(crate) type ReadJob = Box<dyn FnOnce() + Send>;

/// READs of at least this many bytes may go to the worker: the kernel's
/// readahead requests (up to 1 MiB each), not a program's small reads.
pub(crate) const HAND_OFF_MIN_BYTES: u32 = 256 << 10;

/// The worker thread; see the module documentation.
#[derive(Debug)]
pub(crate) struct ReadWorker {
    /// `None` once stopped.
    jobs: Mutex<Option<SyncSender<ReadJob>>>,
    /// Set by the request thread when it hands over a job, cleared by the
    /// worker when the job is done.
    busy: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ReadWorker {
    /// Starts the worker thread.
    pub fn start() -> std::io::Result<ReadWorker> {
        // One slot: a job is only sent when the worker is idle, so the
        // send never blocks.
        let (tx, rx) = sync_channel::<ReadJob>(1);
        let busy = Arc::new(AtomicBool::new(false));
        let worker_busy = Arc::clone(&busy);
        let thread = thread::Builder::new()
            .name("fuse-read".into())
            .spawn(move || {
                for job in rx {
                    job();
                    worker_busy.store(false, Ordering::Release);
                }
            })?;
        Ok(ReadWorker {
            jobs: Mutex::new(Some(tx)),
            busy,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Gives `job` to the worker if it is idle; otherwise hands it back
    /// for the caller to run.
    pub fn try_hand_off(&self, job: ReadJob) -> Result<(), ReadJob> {
        let jobs = self.jobs.lock();
        let Some(tx) = jobs.as_ref() else {
            return Err(job);
        };
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(job);
        }
        tx.try_send(job).map_err(|e| {
            self.busy.store(false, Ordering::Release);
            match e {
                std::sync::mpsc::TrySendError::Full(job)
                | std::sync::mpsc::TrySendError::Disconnected(job) => job,
            }
        })
    }

    /// Lets the worker finish the job it holds and stops it. Later
    /// hand-offs are refused (their callers run the job themselves).
    pub fn stop(&self) {
        drop(self.jobs.lock().take());
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ReadWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn an_idle_worker_takes_a_job_and_a_busy_one_hands_it_back() {
        let worker = ReadWorker::start().unwrap();
        let (release_tx, release_rx) = channel::<()>();
        let (done_tx, done_rx) = channel::<&str>();
        let first_done = done_tx.clone();
        let first: ReadJob = Box::new(move || {
            release_rx.recv().unwrap();
            first_done.send("first").unwrap();
        });
        assert!(
            worker.try_hand_off(first).is_ok(),
            "an idle worker takes a job"
        );
        let second: ReadJob = Box::new(move || done_tx.send("second").unwrap());
        let second = worker
            .try_hand_off(second)
            .expect_err("a busy worker hands the job back");
        second();
        assert_eq!(
            done_rx.recv().unwrap(),
            "second",
            "the caller ran it at once"
        );
        release_tx.send(()).unwrap();
        assert_eq!(done_rx.recv().unwrap(), "first");
        // The worker is idle again once its job returned.
        let mut taken = false;
        for _ in 0..1000 {
            let job: ReadJob = Box::new(|| {});
            if worker.try_hand_off(job).is_ok() {
                taken = true;
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        assert!(taken, "the worker takes jobs again after finishing one");
    }

    #[test]
    fn a_stopped_worker_finishes_its_job_and_refuses_more() {
        let worker = ReadWorker::start().unwrap();
        let (done_tx, done_rx) = channel::<()>();
        let job: ReadJob = Box::new(move || {
            thread::sleep(Duration::from_millis(20));
            done_tx.send(()).unwrap();
        });
        assert!(worker.try_hand_off(job).is_ok());
        worker.stop();
        assert!(done_rx.try_recv().is_ok(), "stop waited for the job");
        let job: ReadJob = Box::new(|| {});
        assert!(
            worker.try_hand_off(job).is_err(),
            "a stopped worker takes nothing"
        );
    }
}
