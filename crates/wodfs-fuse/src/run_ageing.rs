//! The thread that bounds how long written bytes wait in the write
//! coalescer ([`PendingWrites`]): every `commit` interval it writes the
//! runs begun before the previous tick, so that the engine's log sync,
//! which runs at the same interval, makes them durable within about three
//! intervals of the write even if no request follows it.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use wodfs_fs::Fs;

use crate::pending::PendingWrites;

/// The running thread; [`RunAgeing::stop`] ends it.
#[derive(Debug)]
pub struct RunAgeing {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl RunAgeing {
    /// Starts writing aged runs of `pending` into `fs` every `every`.
    pub fn start(
        pending: Arc<PendingWrites>,
        fs: Arc<Fs>,
        every: Duration,
    ) -> std::io::Result<RunAgeing> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::Builder::new()
            .name("wodfs-run-ageing".into())
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => pending.write_aged(&fs),
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            })?;
        Ok(RunAgeing { stop, thread })
    }

    /// Ends the thread (the runs left are the caller's to write).
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}
