//! Background durability: a thread that makes the log durable every
//! `log_sync_every` and checkpoints every `checkpoint_every` (BetrFS's
//! defaults: 1 s and 60 s). The same steps are public methods, so tests
//! drive them directly instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        BackgroundConfig {
            log_sync_every: Duration::from_secs(1),
            checkpoint_every: Duration::from_secs(60),
            reclaim_flushes: 64,
        }
    }
}

/// The running background thread; stops (after a last log sync) when
/// dropped or [`Background::stop`]ped.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Tree {
    /// Starts the background thread for this tree.
    pub fn start_background(&self, cfg: BackgroundConfig) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let tree = self.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wodfs-background".into())
            .spawn(move || {
                let tick = cfg.log_sync_every.min(Duration::from_millis(100));
                let mut last_sync = Instant::now();
                let mut last_checkpoint = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    if last_sync.elapsed() >= cfg.log_sync_every {
                        tree.sync().map_err(|e| e.to_string())?;
                        last_sync = Instant::now();
                    }
                    if last_checkpoint.elapsed() >= cfg.checkpoint_every {
                        tree.reclaim_space(cfg.reclaim_flushes)
                            .map_err(|e| e.to_string())?;
                        last_checkpoint = Instant::now();
                    }
                }
                tree.sync().map_err(|e| e.to_string())
            })
            .expect("spawning the background thread");
        Background {
            stop,
            thread: Some(thread),
        }
    }
}

impl Background {
    /// Stops the thread; returns the error that stopped it early, if any.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
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
