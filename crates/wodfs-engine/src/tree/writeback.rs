//! Writing dirty nodes back outside the tree's lock.
//!
//! Serializing a node (encoding, LZ4, checksums) is the bulk of what an
//! eviction or a checkpoint costs, and it needs only the node: a cached
//! entry is immutable while it is shared (the writer changes a node by
//! taking it out and putting a new entry back). So the image is built from
//! a shared entry with no lock held; the write lock is taken twice, briefly:
//! once to allocate the extent, once to commit. The commit points the block
//! at the new extent and marks the entry clean only if the entry is still
//! the cached one; a node changed meanwhile stays dirty and its unused
//! extent is released. The device write happens between the two, so a
//! clean entry's extent always holds its bytes (a reader that drops and
//! reloads a partition reads what was written).
//!
//! Two calls never write one node at once: each claims its blocks in
//! [`Writing`] first. The write-back thread and a writer pass over a node
//! another call is writing; a checkpoint and a sync, which need the node
//! clean afterwards, wait for that call to finish and then look again.
//! Without the claims a sync's binding pass and the write-back thread
//! wrote the same leaf side by side, and one of the two copies was dropped
//! as stale: a quarter of the node bytes of a 4 GiB sequential write
//! (1,013 MiB in 255 nodes). The page cache absorbed the second copy
//! while nodes were written through it; writing them direct showed it.
//!
//! Four users: the write-back thread, which takes the nodes eviction
//! queues (so request threads hand the work to the other core instead of
//! doing it); a writer the thread cannot keep up with, which writes the
//! next dirty node beside it instead of waiting; the checkpoint, which
//! cleans the dirty nodes this way before it takes the lock to serialize
//! whatever is still dirty; and a sync, which writes the nodes holding
//! the values it is about to bind.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::cache::CacheEntry;
use super::Tree;
use crate::error::Result;
use crate::format::node::encode_node;
use crate::int_hash::{IntMap, IntSet};
use crate::table::{BlockNum, Extent};

/// Nodes the write-back thread takes per round trip of the lock: one, so
/// it holds one node image beyond the cache budget.
const BATCH: usize = 1;

/// The queue between eviction (producer, under the write lock) and the
/// write-back thread.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    jobs: Mutex<VecDeque<BlockNum>>,
    ready: Condvar,
    stop: AtomicBool,
    /// Nodes the thread has finished: a writer that found the queue full
    /// waits for this to move (without the tree's lock) instead of
    /// writing nodes itself under the lock, which stalled every other
    /// request for 100-150 ms at a time.
    finished: Mutex<u64>,
    progress: Condvar,
}

impl Queue {
    fn push(&self, b: BlockNum) {
        self.jobs.lock().push_back(b);
        self.ready.notify_one();
    }

    /// The next few blocks; `None` once stopped.
    fn next_batch(&self) -> Option<Vec<BlockNum>> {
        let mut jobs = self.jobs.lock();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            if !jobs.is_empty() {
                let n = jobs.len().min(BATCH);
                return Some(jobs.drain(..n).collect());
            }
            self.ready.wait(&mut jobs);
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // Under each condvar's mutex, so no waiter misses the flag between
        // its check and its wait.
        {
            let _jobs = self.jobs.lock();
            self.ready.notify_all();
        }
        let _finished = self.finished.lock();
        self.progress.notify_all();
    }

    /// How many nodes the thread has finished so far.
    pub fn finished(&self) -> u64 {
        *self.finished.lock()
    }

    /// Waits until the thread has finished a node after `seen` of them
    /// (or it stops, or `timeout` passes).
    pub fn wait_past(&self, seen: u64, timeout: std::time::Duration) {
        let mut f = self.finished.lock();
        if *f == seen && !self.stop.load(Ordering::Relaxed) {
            self.progress.wait_for(&mut f, timeout);
        }
    }

    fn finish(&self, n: usize) {
        *self.finished.lock() += n as u64;
        self.progress.notify_all();
    }
}

/// The state's side of asynchronous write-back (under the write lock).
#[derive(Debug, Default)]
pub(crate) struct Queued {
    /// The running thread's queue; `None`: eviction writes inline.
    pub queue: Option<Arc<Queue>>,
    /// Blocks queued and not yet committed, with their size when queued.
    blocks: IntMap<BlockNum, usize>,
    /// Sum of those sizes: dirty bytes eviction no longer has to act on.
    pub bytes: usize,
    /// Eviction found the queue full and left the cache over its budget:
    /// the writer waits for the thread before its next batch
    /// ([`super::CatchUp`]).
    pub behind: bool,
}

impl Queued {
    pub fn contains(&self, b: BlockNum) -> bool {
        self.blocks.contains_key(&b)
    }

    /// Queues `b` (of `size` cache bytes) if the thread runs and is not too
    /// far behind (`limit` bytes queued, or one node however large);
    /// false means the caller writes it itself.
    pub fn offer(&mut self, b: BlockNum, size: usize, limit: usize) -> bool {
        let Some(q) = &self.queue else {
            return false;
        };
        if self.bytes > 0 && self.bytes + size > limit {
            return false;
        }
        self.blocks.insert(b, size);
        self.bytes += size;
        q.push(b);
        true
    }

    fn done(&mut self, b: BlockNum) {
        if let Some(size) = self.blocks.remove(&b) {
            self.bytes -= size;
        }
    }

    /// The thread stopped: whatever it did not take stays dirty.
    fn clear(&mut self) {
        if let Some(q) = self.queue.take() {
            q.stop();
        }
        self.blocks.clear();
        self.bytes = 0;
    }
}

/// Why nodes are written back (names the phase for fault injection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum For {
    /// The write-back thread, for eviction.
    Queue,
    /// A checkpoint's first step.
    Checkpoint,
    /// A sync's first step: nodes holding values about to be bound.
    Binding,
    /// A writer the write-back thread could not keep up with, writing a
    /// node beside it (`Tree::wait_for_write_back`).
    Writer,
}

/// Blocks some call of [`Tree::write_back_unlocked`] is writing now.
#[derive(Debug, Default)]
pub(crate) struct Writing {
    blocks: Mutex<IntSet<BlockNum>>,
    done: Condvar,
}

impl Writing {
    /// Claims `blocks` for the caller until the claim drops. With `wait`,
    /// claims all of them, after waiting until no other call holds any
    /// (holding none itself meanwhile, so two waiters cannot deadlock);
    /// without, claims those no other call holds and passes over the rest.
    fn claim(&self, blocks: &[BlockNum], wait: bool) -> WritingClaim<'_> {
        let mut held = self.blocks.lock();
        if wait {
            while blocks.iter().any(|b| held.contains(b)) {
                self.done.wait(&mut held);
            }
        }
        let claimed = blocks
            .iter()
            .filter(|&&b| held.insert(b))
            .copied()
            .collect();
        WritingClaim {
            writing: self,
            blocks: claimed,
        }
    }
}

/// Blocks claimed in [`Writing`]; dropping the claim (however the write
/// ended) releases them and wakes the calls waiting for them.
struct WritingClaim<'a> {
    writing: &'a Writing,
    blocks: Vec<BlockNum>,
}

impl Drop for WritingClaim<'_> {
    fn drop(&mut self) {
        let mut held = self.writing.blocks.lock();
        for b in &self.blocks {
            held.remove(b);
        }
        drop(held);
        self.writing.done.notify_all();
    }
}

/// A node being written: its entry as snapshot, its image, its extent.
struct Job {
    b: BlockNum,
    entry: Arc<CacheEntry>,
    image: crate::format::node::NodeImage,
    extent: Option<Extent>,
    /// Its image reached the device.
    written: bool,
}

impl Tree {
    /// Writes the given dirty nodes back with the lock held only to
    /// allocate and to commit (see the module comment). Blocks that are
    /// clean, the root, or being written by a checkpoint are skipped, and
    /// so are those another call is writing, unless `why` needs them clean
    /// (then this call waits for the other).
    pub(crate) fn write_back_unlocked(&self, blocks: &[BlockNum], why: For) -> Result<()> {
        self.check_poison()?;
        let env = self.env();
        let needs_clean = matches!(why, For::Checkpoint | For::Binding);
        let claim = self.shared.writing_back.claim(blocks, needs_clean);
        let entries: Vec<(BlockNum, Arc<CacheEntry>)> = {
            let st = self.shared.state.read();
            claim
                .blocks
                .iter()
                .filter_map(|&b| {
                    let e = st.cache.peek(b)?;
                    let eligible = e.dirty
                        && b != st.root
                        && !st.writing.contains(&b)
                        && e.node.is_fully_loaded();
                    eligible.then_some((b, e))
                })
                .collect()
        };
        let mut jobs: Vec<Job> = entries
            .into_iter()
            .map(|(b, entry)| {
                let image =
                    encode_node(&entry.node, b, env.cfg.compression, env.cfg.partition_bytes);
                Job {
                    b,
                    entry,
                    image,
                    extent: None,
                    written: false,
                }
            })
            .collect();
        {
            let mut st = self.shared.state.write();
            for j in &mut jobs {
                if !st.cache.is_current(j.b, &j.entry) {
                    continue;
                }
                let len = j.image.bytes.len() as u64;
                // No room: the node stays dirty; the checkpoint's reserve
                // and admission control deal with a full device.
                if let Ok(offset) = st.table.allocate(len) {
                    j.extent = Some(Extent {
                        offset,
                        len: crate::alloc::round_up(len),
                        header_len: j.image.header_len,
                        header_crc: j.image.header_crc,
                    });
                }
            }
        }
        let mut failed = None;
        env.dev.annotate(match why {
            For::Queue => "writeback",
            For::Checkpoint => "checkpoint.nodes",
            For::Binding => "bind.nodes",
            For::Writer => "writeback.writer",
        });
        for j in &mut jobs {
            if let Some(x) = j.extent {
                // A binding pass writes the leaves holding a sequential
                // stream's values.
                let written = if why == For::Binding {
                    env.write_stream(x.offset, &j.image.bytes)
                } else {
                    env.write(x.offset, &j.image.bytes)
                };
                if let Err(e) = written {
                    failed = Some(e);
                    break;
                }
                j.written = true;
            }
        }
        let mut st = self.shared.state.write();
        for j in jobs {
            let Job {
                b,
                entry,
                image,
                extent,
                written,
            } = j;
            let current = st.cache.is_current(b, &entry) && entry.dirty;
            drop(entry);
            if let Some(x) = extent {
                if current && failed.is_none() {
                    st.table.relocate(b, x);
                    st.cache.mark_clean(b, |node| image.set_places(node));
                    env.stats.add_unlocked_write(image.bytes.len());
                } else {
                    env.stats
                        .add_stale_write(if written { image.bytes.len() } else { 0 });
                    st.table.release(x.offset, x.len);
                }
            }
        }
        if why == For::Queue {
            for &b in blocks {
                st.writeback.done(b);
            }
        }
        drop(st);
        match failed {
            Some(e) => self.poison(Err(e)),
            None => Ok(()),
        }
    }

    /// Starts the write-back thread: from now on eviction queues dirty
    /// nodes for it instead of writing them in the caller's thread.
    pub(crate) fn start_write_back(&self) -> (Arc<Queue>, std::thread::JoinHandle<()>) {
        let queue = Arc::new(Queue::default());
        self.shared.state.write().writeback.queue = Some(queue.clone());
        let tree = self.clone();
        let q = queue.clone();
        let thread = std::thread::Builder::new()
            .name("wodfs-writeback".into())
            .spawn(move || {
                // However the thread ends (error, panic), eviction goes
                // back to writing inline and nothing stays queued.
                let t = tree.clone();
                let _unqueue = super::OnExit(move || t.shared.state.write().writeback.clear());
                while let Some(batch) = q.next_batch() {
                    // An error poisons the tree; the next request reports it.
                    let r = tree.write_back_unlocked(&batch, For::Queue);
                    q.finish(batch.len());
                    if r.is_err() {
                        break;
                    }
                }
            })
            .expect("spawning the write-back thread");
        (queue, thread)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use wodfs_device::MemDevice;

    use super::{Queue, Writing};
    use crate::tree::{Op, Tree};
    use crate::Config;

    /// A writer over budget whose write-back thread takes nothing must
    /// write nodes itself, outside the lock, and go on: with a queue that
    /// nobody drains it would otherwise wait for the thread forever.
    #[test]
    fn a_writer_writes_nodes_when_the_thread_does_not() {
        let cfg = Config {
            node_bytes: 64 << 10,
            partition_bytes: 8 << 10,
            cache_bytes: 1 << 20,
            log_bytes: 4 << 20,
            ..Config::default()
        };
        let tree = Tree::create(Box::new(MemDevice::new(256 << 20)), cfg).unwrap();
        // A queue with no thread behind it: eviction fills it and then
        // finds the thread behind.
        tree.shared.state.write().writeback.queue = Some(Arc::new(Queue::default()));
        let writer = tree.clone();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut x: u64 = 1;
            for _ in 0..400 {
                let ops: Vec<Op> = (0..50)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        Op::Insert {
                            key: x.to_be_bytes().to_vec(),
                            value: vec![7; 200],
                        }
                    })
                    .collect();
                writer.write(&ops).unwrap();
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("the writer finished (4 MiB into a 1 MiB cache)");
        assert!(tree.stats().unlocked_writes > 0, "{:?}", tree.stats());
        tree.verify().unwrap();
    }

    /// A call that may pass over nodes takes only those no other call is
    /// writing; one that needs them clean waits until the other's claim
    /// drops, and then holds all of them.
    #[test]
    fn two_calls_never_write_one_node_at_once() {
        let writing = Writing::default();
        let first = writing.claim(&[1, 2], false);
        assert_eq!(first.blocks, [1, 2]);
        let passing = writing.claim(&[2, 3], false);
        assert_eq!(passing.blocks, [3], "2 is the first call's");
        drop(passing);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let waiting = writing.claim(&[2, 3], true);
                tx.send(waiting.blocks.clone()).unwrap();
            });
            assert!(
                rx.recv_timeout(Duration::from_millis(100)).is_err(),
                "claimed 2 while the first call held it"
            );
            drop(first);
            let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(got, [2, 3]);
        });
        assert!(writing.blocks.lock().is_empty(), "every claim released");
    }
}
