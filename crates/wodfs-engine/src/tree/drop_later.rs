//! Freeing on the other core.
//!
//! A node written back and then stripped of its partitions (eviction,
//! `Cache::strip`) frees everything those partitions held: an open
//! buffer's B-tree, with a key, a list and a value per message; a leaf's
//! decoded entries. That was a tenth of the writer's time under random
//! inserts (engine-compare), on the thread every write waits for, while
//! the second core was mostly idle. So the writer hands such garbage to a
//! thread that only frees.
//!
//! The queue is short and never waits: when it is full, the caller frees
//! inline, so memory that the cache no longer counts but that is not yet
//! freed stays bounded by a few nodes' worth (see [`QUEUE_DEPTH`]).

use std::any::Any;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

/// Batches of garbage waiting for the freeing thread. Each is at most one
/// node's partitions (a node size, 4 MiB by default, accounted; more in
/// the allocator).
const QUEUE_DEPTH: usize = 4;

type Garbage = Box<dyn Any + Send>;

/// The process's freeing thread, started on first use; it lives as long as
/// the process (it holds nothing between items).
fn queue() -> Option<&'static SyncSender<Garbage>> {
    static QUEUE: OnceLock<Option<SyncSender<Garbage>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Garbage>(QUEUE_DEPTH);
            std::thread::Builder::new()
                .name("wodfs-free".into())
                .spawn(move || {
                    for garbage in rx {
                        drop(garbage);
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Frees `garbage` on the freeing thread, or here if its queue is full
/// (or it could not be started).
pub(crate) fn drop_later<T: Send + 'static>(garbage: T) {
    let Some(tx) = queue() else {
        return drop(garbage);
    };
    match tx.try_send(Box::new(garbage)) {
        Ok(()) => {}
        Err(TrySendError::Full(g) | TrySendError::Disconnected(g)) => drop(g),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::drop_later;

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Everything handed over is freed, whether queued or inline.
    #[test]
    fn everything_handed_over_is_freed() {
        let freed = Arc::new(AtomicUsize::new(0));
        for _ in 0..1000 {
            drop_later(Counted(freed.clone()));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while freed.load(Ordering::SeqCst) < 1000 {
            assert!(Instant::now() < deadline, "{freed:?} of 1000 freed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
