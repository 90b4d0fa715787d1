//! Writing dirty nodes back outside the tree's lock.
//!
//! Serializing a node (encoding, LZ4, checksums) is the bulk of what an
//! eviction or a checkpoint costs, and it needs only the node: a cached
//! entry is immutable while it is shared (the writer changes a node by
//! taking it out and putting a new entry back). So the image is built from
//! a shared entry with no lock held. The extent comes from the allocator,
//! under the write lock; the commit, also under it, points the block at
//! the new extent and marks the entry clean only if the cached entry is
//! still the version that was written; a node changed meanwhile stays
//! dirty and its unused extent is released. The device write happens
//! before the commit, so a clean entry's extent always holds its bytes (a
//! reader that drops and reloads a partition reads what was written).
//!
//! The write-back thread takes no lock at all on its way. A writer holds
//! the write lock for a whole batch (about 55 ms of random inserts), and
//! the thread used to wait for it three times per node: in engine-compare's
//! random inserts 3.5 s of its 6 s of work were spent waiting, and the
//! writer serialized 41 % of the nodes itself. Now eviction sets device
//! space aside for each node it queues ([`Reserved`], sized by
//! [`image_bound`]), the thread looks the node up in the cache directly
//! (its own mutex), and it publishes its commit ([`Commit`]) for the next
//! holder of the write lock to apply: eviction, a writer about to take a
//! node ([`State::take_full`]), a checkpoint, or the thread itself when
//! the lock is free.
//!
//! Any call skips the device write of a node the writer changed after its
//! image was made (checked just before the write): the commit would drop
//! the copy as stale anyway.
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
//! A call with several nodes (a sync's binding pass) encodes each while
//! the ones before it are written, up to four nodes' worth at once
//! (`in_flight`); all of them are committed together at the end.
//!
//! Four users: the write-back thread, which takes the nodes eviction
//! queues (so request threads hand the work to the other core instead of
//! doing it); a writer the thread cannot keep up with, which writes the
//! next dirty node beside it instead of waiting; the checkpoint, which
//! cleans the dirty nodes this way before it takes the lock to serialize
//! whatever is still dirty; and a sync, which writes the nodes holding
//! the values it is about to bind.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::cache::CacheEntry;
use super::in_flight::{InFlight, IN_FLIGHT_NODES};
use super::state::{Env, State};
use super::Tree;
use crate::error::Result;
use crate::format::node::encode_node_into;
use crate::int_hash::{IntMap, IntSet};
use crate::node::Node;
use crate::table::{BlockNum, Extent};

/// Nodes the write-back thread takes at a time: one, so it holds one node
/// image beyond the cache budget.
const BATCH: usize = 1;

/// Device space set aside for a queued node's image, under the lock, when
/// it is queued: the thread places the image there without taking the
/// lock to allocate, and gives back what the image does not use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reserved {
    pub offset: u64,
    pub len: u64,
}

/// Room for `node`'s image, set aside when it is queued: its partitions
/// as they are (compression only shrinks them) and a generous allowance
/// for the header, partition table and buffer summaries. An image that
/// does not fit is placed under the lock instead.
pub(crate) fn image_bound(node: &Node) -> u64 {
    let content = node.content_bytes() as u64;
    content + content / 16 + 64 * 1024
}

/// A node handed to the write-back thread.
#[derive(Clone, Copy, Debug)]
struct Handoff {
    b: BlockNum,
    space: Option<Reserved>,
    /// Cache bytes counted in [`Queue::in_flight`] for it.
    size: usize,
}

/// The queue between eviction (producer, under the write lock) and the
/// write-back thread.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    jobs: Mutex<VecDeque<Handoff>>,
    ready: Condvar,
    stop: AtomicBool,
    /// Nodes the thread has finished: a writer that found the queue full
    /// waits for this to move (without the tree's lock) instead of
    /// writing nodes itself under the lock, which stalled every other
    /// request for 100-150 ms at a time.
    finished: Mutex<u64>,
    progress: Condvar,
    /// What the thread wrote, for whoever next holds the write lock to
    /// commit ([`State::apply_commits`]): the thread does not wait for a
    /// lock that a writer holds for a whole batch.
    commits: Mutex<Vec<Commit>>,
    /// `commits` is not empty (checked without its mutex).
    has_commits: AtomicBool,
    /// Cache bytes of the nodes queued that the thread has not finished:
    /// what limits the queue. A node it has finished no longer waits for
    /// it, though its commit may not be applied yet (the writer holds the
    /// lock): counting those too left the thread idle while the writer
    /// serialized twice as many nodes itself.
    in_flight: AtomicUsize,
}

impl Queue {
    fn push(&self, job: Handoff) {
        self.in_flight.fetch_add(job.size, Ordering::Relaxed);
        self.jobs.lock().push_back(job);
        self.ready.notify_one();
    }

    /// The next few nodes; `None` once stopped.
    fn next_batch(&self) -> Option<Vec<Handoff>> {
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

    fn publish(&self, done: Vec<Commit>, sizes: usize) {
        let mut commits = self.commits.lock();
        commits.extend(done);
        self.has_commits.store(true, Ordering::Release);
        drop(commits);
        self.in_flight.fetch_sub(sizes, Ordering::Relaxed);
    }

    fn take_commits(&self) -> Vec<Commit> {
        if !self.has_commits.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut commits = self.commits.lock();
        self.has_commits.store(false, Ordering::Release);
        std::mem::take(&mut *commits)
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
    /// Blocks queued and not yet committed, with their size when queued
    /// and the space set aside for them (given back here if the thread
    /// stops before it commits them).
    blocks: IntMap<BlockNum, (usize, Option<Reserved>)>,
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
    /// far behind (`limit` bytes it has not finished, see
    /// [`Queue::in_flight`], or one node however large), with
    /// the space `reserve` sets aside for its image (none: the thread
    /// allocates under the lock); false means the caller writes it itself.
    pub fn offer(
        &mut self,
        b: BlockNum,
        size: usize,
        limit: usize,
        reserve: impl FnOnce() -> Option<Reserved>,
    ) -> bool {
        let Some(q) = &self.queue else {
            return false;
        };
        let in_flight = q.in_flight.load(Ordering::Relaxed);
        if in_flight > 0 && in_flight + size > limit {
            return false;
        }
        let space = reserve();
        self.blocks.insert(b, (size, space));
        self.bytes += size;
        q.push(Handoff { b, space, size });
        true
    }

    /// The thread is done with `b` (it gives back the node's space itself).
    fn done(&mut self, b: BlockNum) {
        if let Some((size, _)) = self.blocks.remove(&b) {
            self.bytes -= size;
        }
    }

    /// The thread stopped: whatever it did not take stays dirty. Returns
    /// the space set aside for those nodes, for the caller to free.
    fn clear(&mut self) -> Vec<Reserved> {
        if let Some(q) = self.queue.take() {
            q.stop();
        }
        self.bytes = 0;
        self.blocks.drain().filter_map(|(_, (_, r))| r).collect()
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

/// The outcome of writing one node back, applied under the write lock
/// ([`State::apply_commit`]): the block moves to the new extent if the
/// cached node is still the version that was written; otherwise, or if
/// nothing was written, the space goes back.
#[derive(Debug)]
pub(crate) struct Commit {
    b: BlockNum,
    /// What the call made of the node; `None`: not encoded (clean, gone,
    /// or another call's).
    encoded: Option<Encoded>,
    space: Option<Reserved>,
    /// Handed over by eviction: its queue entry ends here.
    queued: bool,
}

/// A node's image as a write-back call made and placed it.
#[derive(Debug)]
struct Encoded {
    /// The cache entry's version the image was made from.
    version: u64,
    /// The image's partition places and summaries (its bytes dropped).
    image: crate::format::node::NodeImage,
    image_len: usize,
    extent: Option<Extent>,
    /// The image reached the device (and so may be committed).
    written: bool,
}

/// Records the writes that ended: a commit's image counts as written
/// only if its write succeeded; the first error is kept.
fn settle(
    ended: Vec<(Commit, Result<()>)>,
    commits: &mut Vec<Commit>,
    failed: &mut Option<crate::error::Error>,
) {
    for (mut c, r) in ended {
        match r {
            Ok(()) => {
                if let Some(e) = &mut c.encoded {
                    e.written = true;
                }
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
        commits.push(c);
    }
}

impl State {
    /// Applies the commits the write-back thread has published: called
    /// wherever the write lock is taken to change the cache (eviction, a
    /// writer taking a node, a checkpoint), so a node the thread wrote is
    /// committed before the writer changes it again.
    pub fn apply_commits(&mut self, env: Env<'_>) {
        let Some(q) = &self.writeback.queue else {
            return;
        };
        if !q.has_commits.load(Ordering::Acquire) {
            return;
        }
        for c in q.clone().take_commits() {
            self.apply_commit(env, c);
        }
    }

    fn apply_commit(&mut self, env: Env<'_>, c: Commit) {
        let b = c.b;
        // Of the space set aside, what the committed image uses.
        let mut used = 0;
        if let Some(Encoded {
            version,
            image,
            image_len,
            extent: Some(x),
            written,
        }) = c.encoded
        {
            let current = self.cache.version(b) == Some((version, true))
                && b != self.root
                && !self.writing.contains(&b);
            if current && written {
                self.table.relocate(b, x);
                self.cache.mark_clean(b, |node| image.set_places(node));
                env.stats.add_unlocked_write(image_len);
                used = x.len;
            } else {
                env.stats
                    .add_stale_write(if written { image_len } else { 0 });
                // An extent allocated apart from any space set aside.
                if c.space.is_none() {
                    self.table.release(x.offset, x.len);
                }
            }
        }
        if let Some(r) = c.space {
            if r.len > used {
                self.table.release(r.offset + used, r.len - used);
            }
        }
        if c.queued {
            self.writeback.done(b);
        }
    }
}

impl Tree {
    /// Writes the given dirty nodes back with the lock held only to
    /// allocate and to commit (see the module comment). Blocks that are
    /// clean, the root, or being written by a checkpoint are skipped, and
    /// so are those another call is writing, unless `why` needs them clean
    /// (then this call waits for the other).
    pub(crate) fn write_back_unlocked(&self, blocks: &[BlockNum], why: For) -> Result<()> {
        let handoffs: Vec<Handoff> = blocks
            .iter()
            .map(|&b| Handoff {
                b,
                space: None,
                size: 0,
            })
            .collect();
        self.write_back(&handoffs, why, None)
    }

    /// Writes nodes back; `thread`: the write-back thread's own queue,
    /// where it publishes its commits instead of waiting for the lock.
    fn write_back(&self, handoffs: &[Handoff], why: For, thread: Option<&Queue>) -> Result<()> {
        self.check_poison()?;
        let env = self.env();
        let needs_clean = matches!(why, For::Checkpoint | For::Binding);
        let blocks: Vec<BlockNum> = handoffs.iter().map(|h| h.b).collect();
        let claim = self.shared.writing_back.claim(&blocks, needs_clean);
        let writable = |e: &CacheEntry| e.dirty && e.node.is_fully_loaded();
        let entries: Vec<(BlockNum, Arc<CacheEntry>)> = if thread.is_some() {
            // The thread looks its nodes up without the tree's lock, which
            // a writer holds for a whole batch at a time; the root and the
            // checkpoint's nodes are told apart at commit.
            claim
                .blocks
                .iter()
                .filter_map(|&b| {
                    let e = self.shared.cache.peek(b)?;
                    writable(&e).then_some((b, e))
                })
                .collect()
        } else {
            // The thread's published commits first: a node it has written
            // is clean, not written a second time here.
            let mut st = self.shared.state.write();
            st.apply_commits(env);
            claim
                .blocks
                .iter()
                .filter_map(|&b| {
                    let e = st.cache.peek(b)?;
                    let eligible = writable(&e) && b != st.root && !st.writing.contains(&b);
                    eligible.then_some((b, e))
                })
                .collect()
        };
        let space_of = |b: BlockNum| handoffs.iter().find(|h| h.b == b).and_then(|h| h.space);
        env.dev.annotate(match why {
            For::Queue => "writeback",
            For::Checkpoint => "checkpoint.nodes",
            For::Binding => "bind.nodes",
            For::Writer => "writeback.writer",
        });
        let queued = thread.is_some();
        // A binding pass writes the leaves holding a sequential stream's
        // values.
        let stream = why == For::Binding;
        let mut failed = None;
        let mut commits = Vec::with_capacity(handoffs.len());
        let inline = entries.len() == 1;
        std::thread::scope(|s| {
            // The next node is encoded while the ones before it are
            // written (see `in_flight`).
            let mut writes = InFlight::new(s, IN_FLIGHT_NODES * env.cfg.node_bytes, inline);
            for (b, entry) in entries {
                // A leaf is encoded into a kept buffer; an internal node's
                // image is assembled from its parts and ignores one.
                let buf = if entry.node.height == 0 {
                    self.shared.image_bufs.take()
                } else {
                    Vec::new()
                };
                let mut image = encode_node_into(
                    &entry.node,
                    b,
                    env.cfg.compression,
                    env.cfg.partition_bytes,
                    buf,
                );
                let (extent, space) = self.place(b, &entry, &image, space_of(b));
                // The snapshot is not needed past its image: a writer
                // taking the node meanwhile then need not copy it.
                let version = entry.version;
                drop(entry);
                // A node the writer changed while it was encoded is not
                // written: the commit would drop it as stale anyway. (A
                // checkpoint's first pass over a file system's hot nodes
                // wrote 171-191 MiB of such copies per Postmark run.)
                let changed = self.shared.cache.version(b) != Some((version, true));
                let bytes = std::mem::take(&mut image.bytes);
                let commit = Commit {
                    b,
                    encoded: Some(Encoded {
                        version,
                        image,
                        image_len: bytes.len(),
                        extent,
                        written: false,
                    }),
                    space,
                    queued,
                };
                match extent {
                    Some(x) if failed.is_none() && !changed => {
                        let len = bytes.len();
                        let bufs = &self.shared.image_bufs;
                        let write = move || {
                            let written = env.write_image(x.offset, &bytes, stream);
                            bufs.give_back(bytes);
                            written
                        };
                        let ended = writes.submit(len, commit, write);
                        settle(ended, &mut commits, &mut failed);
                    }
                    _ => {
                        self.shared.image_bufs.give_back(bytes);
                        commits.push(commit);
                    }
                }
            }
            settle(writes.finish(), &mut commits, &mut failed);
        });
        // The thread's nodes it did not encode: their queue entries end and
        // their space goes back.
        if queued {
            for h in handoffs {
                if !commits.iter().any(|c| c.b == h.b) {
                    commits.push(Commit {
                        b: h.b,
                        encoded: None,
                        space: h.space,
                        queued,
                    });
                }
            }
        }
        match thread {
            Some(q) => {
                // Published before the claim drops: a call that waits for
                // these nodes to be clean finds their commits.
                q.publish(commits, handoffs.iter().map(|h| h.size).sum());
                drop(claim);
                // Committed now if nobody holds the lock, else by the next
                // holder that changes the cache.
                if let Some(mut st) = self.shared.state.try_write() {
                    st.apply_commits(env);
                }
            }
            None => {
                let mut st = self.shared.state.write();
                for c in commits {
                    st.apply_commit(env, c);
                }
                drop(claim);
            }
        }
        match failed {
            Some(e) => self.poison(Err(e)),
            None => Ok(()),
        }
    }

    /// Where `image` (of node `b` as `entry` holds it) goes: at the start
    /// of the space set aside for it if it fits there, else an extent
    /// allocated under the lock (giving that space back), or none if the
    /// node changed meanwhile or the device has no room (the node stays
    /// dirty; the checkpoint's reserve and admission control deal with a
    /// full device). Returns the extent and the space still set aside.
    fn place(
        &self,
        b: BlockNum,
        entry: &Arc<CacheEntry>,
        image: &crate::format::node::NodeImage,
        space: Option<Reserved>,
    ) -> (Option<Extent>, Option<Reserved>) {
        if let Some(r) = space {
            let x = image.extent_at(r.offset);
            if x.len <= r.len {
                return (Some(x), space);
            }
        }
        let mut st = self.shared.state.write();
        if let Some(r) = space {
            st.table.release(r.offset, r.len);
        }
        if !st.cache.is_current(b, entry) {
            return (None, None);
        }
        let offset = st.table.allocate(image.bytes.len() as u64).ok();
        (offset.map(|o| image.extent_at(o)), None)
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
                let _unqueue = super::OnExit(move || {
                    let env = t.env();
                    let mut st = t.shared.state.write();
                    st.apply_commits(env);
                    for r in st.writeback.clear() {
                        st.table.release(r.offset, r.len);
                    }
                });
                while let Some(batch) = q.next_batch() {
                    // An error poisons the tree; the next request reports it.
                    let r = tree.write_back(&batch, For::Queue, Some(&q));
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

    /// A tree of 64 KiB nodes on a 256 MiB memory device.
    fn small_tree(cache_bytes: usize, log_bytes: u64) -> Tree {
        let cfg = Config {
            node_bytes: 64 << 10,
            partition_bytes: 8 << 10,
            cache_bytes,
            log_bytes,
            ..Config::default()
        };
        Tree::create(Box::new(MemDevice::new(256 << 20)), cfg).unwrap()
    }

    /// A writer over budget whose write-back thread takes nothing must
    /// write nodes itself, outside the lock, and go on: with a queue that
    /// nobody drains it would otherwise wait for the thread forever.
    #[test]
    fn a_writer_writes_nodes_when_the_thread_does_not() {
        let tree = small_tree(1 << 20, 4 << 20);
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
        // The leaves' image buffers were kept for the next images.
        assert!(tree.shared.image_bufs.kept() > 0);
        tree.verify().unwrap();
    }

    /// A message does not skip down into a child queued for write-back
    /// (the thread's write of that child would be stale); the message
    /// before it, with the child not queued, did.
    #[test]
    fn no_skip_down_into_a_child_queued_for_write_back() {
        let tree = small_tree(64 << 20, 16 << 20);
        let insert = |key: Vec<u8>| Op::Insert {
            key,
            value: vec![7; 100],
        };
        for start in (0..20_000u64).step_by(500) {
            let ops: Vec<Op> = (start..start + 500)
                .map(|i| insert(format!("k{i:08}").into_bytes()))
                .collect();
            tree.write(&ops).unwrap();
        }
        // Keys between k00000000 and k00000001, so in the root's first
        // child: written one at a time until one skips down (a flush has
        // emptied the root's buffer for that child and left it dirty).
        let near = |j: u64| format!("k00000000-{j:06}").into_bytes();
        let mut j = 0;
        loop {
            let before = tree.stats().skip_downs;
            tree.write(&[insert(near(j))]).unwrap();
            j += 1;
            if tree.stats().skip_downs > before {
                break;
            }
            assert!(j < 20_000, "no message ever skipped down");
        }
        let child = {
            let st = tree.shared.state.read();
            let root = st.cache.peek(st.root).expect("the root is cached");
            assert!(root.node.height > 0, "the tree grew past one leaf");
            let probe = near(j);
            let i = root.node.part_index(&probe[root.node.prefix.len()..]);
            root.node.children[i].child
        };
        // Queued for a thread that never runs: the child stays queued.
        {
            let mut st = tree.shared.state.write();
            st.writeback.queue = Some(Arc::new(Queue::default()));
            assert!(st.writeback.offer(child, 1, usize::MAX, || None));
        }
        let before = tree.stats().skip_downs;
        tree.write(&[insert(near(j))]).unwrap();
        assert_eq!(
            tree.stats().skip_downs,
            before,
            "skipped into a queued child"
        );
        assert_eq!(tree.get(&near(j)).unwrap(), Some(vec![7; 100]));
        let st = tree.shared.state.read();
        let root = st.cache.peek(st.root).expect("the root is cached");
        let i = root.node.children.iter().position(|e| e.child == child);
        assert!(
            !root.node.buffer(i.expect("still a child")).is_empty(),
            "the message waits in the root's buffer"
        );
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
