//! Background durability: a thread that makes the log durable every
//! `log_sync_every` and checkpoints every `checkpoint_every` (BetrFS's
//! defaults: 1 s and 60 s) or when the log is half full, and a
//! write-back thread (see `writeback`). The same steps are public methods, so tests
//! drive them directly instead.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Tree;

/// Intervals of the background work.
#[derive(Clone, Copy, Debug)]
pub struct BackgroundConfig {
    /// How often the log is made durable: the most a crash can lose of
    /// writes nobody synced.
    pub log_sync_every: Duration,
    /// How often a checkpoint runs (one also runs when the log is 3/4 full).
    pub checkpoint_every: Duration,
    /// Flushes each periodic checkpoint may spend first pushing buffered
    /// range deletes down to prune what they cover, so space freed by
    /// deletes becomes free without waiting for space pressure.
    pub reclaim_flushes: usize,
    /// Run a second thread that writes back the dirty nodes eviction
    /// picks, so the threads that write do not serialize and compress
    /// them themselves.
    pub write_back_thread: bool,
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        BackgroundConfig {
            log_sync_every: Duration::from_secs(1),
            checkpoint_every: Duration::from_secs(60),
            reclaim_flushes: 64,
            write_back_thread: true,
        }
    }
}

/// How writers and `Background::stop` reach the background thread.
#[derive(Debug, Default)]
pub(crate) struct Wake {
    state: Mutex<WakeState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct WakeState {
    running: bool,
    stop: bool,
    bind_wanted: bool,
    write_out_wanted: bool,
}

impl Wake {
    /// Asks the running background thread to write the log's buffer out
    /// now; false if none runs.
    pub fn want_write_out(&self) -> bool {
        self.ask(|s| &mut s.write_out_wanted)
    }

    /// Asks the running background thread to bind the pending unbound
    /// inserts; false if none runs.
    pub fn want_bind(&self) -> bool {
        self.ask(|s| &mut s.bind_wanted)
    }

    fn ask(&self, flag: impl FnOnce(&mut WakeState) -> &mut bool) -> bool {
        let mut s = self.state.lock();
        if !s.running {
            return false;
        }
        let wanted = flag(&mut s);
        if !*wanted {
            *wanted = true;
            self.cv.notify_all();
        }
        true
    }
}

/// The running background thread; stops (after a last log sync) when
/// dropped or [`Background::stop`]ped.
#[derive(Debug)]
pub struct Background {
    tree: Tree,
    thread: Option<JoinHandle<Result<(), String>>>,
    write_back: Option<(Arc<super::writeback::Queue>, JoinHandle<()>)>,
    flush_ahead: Option<JoinHandle<()>>,
}

impl Tree {
    /// Starts the background thread for this tree.
    pub fn start_background(&self, cfg: BackgroundConfig) -> Background {
        *self.shared.wake.state.lock() = WakeState {
            running: true,
            ..WakeState::default()
        };
        let write_back = cfg.write_back_thread.then(|| self.start_write_back());
        let flush_ahead = cfg.write_back_thread.then(|| self.start_flush_ahead());
        let tree = self.clone();
        let thread = std::thread::Builder::new()
            .name("wodfs-background".into())
            .spawn(move || {
                // However the thread ends, writers stop counting on it.
                let t = tree.clone();
                let _not_running =
                    super::OnExit(move || t.shared.wake.state.lock().running = false);
                let tick = cfg.log_sync_every.min(Duration::from_millis(100));
                let mut last_sync = Instant::now();
                let mut last_checkpoint = Instant::now();
                let wake = &tree.shared.wake;
                loop {
                    let (bind, write_out) = {
                        let mut s = wake.state.lock();
                        if !s.stop && !s.bind_wanted && !s.write_out_wanted {
                            wake.cv.wait_for(&mut s, tick);
                        }
                        if s.stop {
                            break;
                        }
                        (
                            std::mem::take(&mut s.bind_wanted),
                            std::mem::take(&mut s.write_out_wanted),
                        )
                    };
                    // A sync due now binds and writes the buffer anyway.
                    let sync_due = last_sync.elapsed() >= cfg.log_sync_every;
                    if write_out && !sync_due {
                        tree.write_out_log().map_err(|e| e.to_string())?;
                    }
                    if bind && !sync_due {
                        tree.bind_now().map_err(|e| e.to_string())?;
                    }
                    if sync_due {
                        tree.sync().map_err(|e| e.to_string())?;
                        last_sync = Instant::now();
                    }
                    if last_checkpoint.elapsed() >= cfg.checkpoint_every {
                        tree.reclaim_space(cfg.reclaim_flushes)
                            .map_err(|e| e.to_string())?;
                        last_checkpoint = Instant::now();
                    } else if tree.log_half_full() {
                        // Here rather than in a writer's thread, which
                        // checkpoints itself only when the log is 3/4 full.
                        tree.checkpoint().map_err(|e| e.to_string())?;
                    }
                }
                tree.sync().map_err(|e| e.to_string())
            })
            .expect("spawning the background thread");
        Background {
            tree: self.clone(),
            thread: Some(thread),
            write_back,
            flush_ahead,
        }
    }

    /// Starts the thread that reads ahead the children flushes are about
    /// to take ([`super::flush_ahead`]).
    fn start_flush_ahead(&self) -> std::thread::JoinHandle<()> {
        self.shared.flush_ahead.start();
        let tree = self.clone();
        std::thread::Builder::new()
            .name("wodfs-flushread".into())
            .spawn(move || {
                // However the thread ends, the writer stops waiting on it.
                let t = tree.clone();
                let _ended = super::OnExit(move || t.shared.flush_ahead.ended());
                tree.shared.flush_ahead.run(tree.env())
            })
            .expect("spawning the flush read-ahead thread")
    }
}

impl Background {
    /// Stops the thread; returns the error that stopped it early, if any.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), String> {
        if let Some((queue, thread)) = self.write_back.take() {
            queue.stop();
            let _ = thread.join();
        }
        if let Some(thread) = self.flush_ahead.take() {
            self.tree.shared.flush_ahead.stop();
            let _ = thread.join();
        }
        {
            let wake = &self.tree.shared.wake;
            let mut s = wake.state.lock();
            s.stop = true;
            s.running = false;
            wake.cv.notify_all();
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("background thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}
