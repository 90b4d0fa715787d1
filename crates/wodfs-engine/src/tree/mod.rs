//! The tree handle and its public operations.
//!
//! Locking: one `RwLock` over the tree state. Queries and scans take it
//! shared and run in parallel, loading nodes into the cache through the
//! cache's own mutex. Writes take it exclusively for the time it takes to
//! apply their messages (usually in memory; a flush may read and write
//! nodes). A checkpoint holds it only while serializing dirty nodes, and
//! writes and syncs the device without it. A second mutex serializes
//! checkpoints, so any thread can call [`Tree::checkpoint`] and wait.
//!
//! Durability: every batch is appended to the write-ahead log under the
//! write lock (so log order is apply order) before the lock is released.
//! [`Tree::sync`] makes the log durable (group commit); a checkpoint makes
//! the tree durable and reclaims the log before it. Opening replays the log
//! from the newest checkpoint.

mod background;
mod bind;
mod cache;
mod checkpoint;
mod drop_later;
mod flush_ahead;
pub(crate) mod frame;
mod image_bufs;
mod in_flight;
mod query;
mod read_ahead;
mod read_pattern;
mod segment_cache;
pub(crate) use segment_cache::SegmentCache;
mod state;
mod stats;
mod sweep;
mod verify;
mod write;
mod writeback;

use std::borrow::Cow;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use wodfs_device::Device;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::key_cmp::key_cmp;
use crate::msg::{PointMsg, PointOp};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub(crate) use state::Env;
use state::State;
use stats::Stats;
use write::Msg;

pub use crate::wal::replay::LogEnd;
pub use background::{Background, BackgroundConfig};
pub use frame::prefix_successor;
pub use stats::TreeStats;
pub use verify::VerifyReport;

/// Space accounting of the node area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Bytes of the node area.
    pub total_bytes: u64,
    /// Bytes free now.
    pub free_bytes: u64,
    /// Bytes released but reusable only after the next checkpoint.
    pub pending_bytes: u64,
    /// Bytes referenced by the tree or by the last checkpoint.
    pub used_bytes: u64,
}

/// Unbound inserts at which a round of binding is asked for (the writer
/// binds them itself at twice as many, or when no background thread
/// runs).
const UNBOUND_BIND_AT: usize = 8 * 1024;

/// Bytes of unbound values at which a round of binding is asked for (the
/// writer binds them itself at twice as many): a twelfth of the cache, so
/// that with the writer's share they stay within half of the dirty budget
/// (a third of the cache). Past the dirty budget, write-back writes the
/// least recently used dirty leaves, which are a stream's leaves of
/// unbound values; eviction then strips them, and binding reads them back
/// to find each value: a 4 GiB file write read 159-253 MiB that way with
/// the 256 MiB cache, binding every 8,192 blocks (32 MiB) or 16,384 (64
/// MiB). Not below four late-bound batches' worth.
fn unbound_bind_bytes(cfg: &Config) -> usize {
    (cfg.cache_bytes / 12).max(4 * LATE_BINDING_MIN_BYTES)
}

/// Most recently used dirty nodes a checkpoint leaves to its locked step.
const CHECKPOINT_HOT_NODES: usize = 4;

/// Dirty nodes a checkpoint serializes per round trip of the lock before
/// it takes the lock for the rest: bounds the images held at once (they
/// are outside the cache budget).
const CHECKPOINT_WRITE_BACK_BATCH: usize = 2;

/// Node space kept free for checkpoints: every dirty node (at most a third
/// of the cache) written to a new place, the block table, a few nodes of
/// slack for splits during the last admitted batch, and the root's excess
/// over a node.
fn checkpoint_reserve(cfg: &Config, blocks: usize) -> u64 {
    (cfg.cache_bytes / 3 + 4 * cfg.node_bytes + root_extra_bytes(cfg)) as u64
        + blocks as u64 * 40
        + 2 * crate::config::BLOCK_BYTES
}

/// The longest free run a checkpoint may need: the block table blob (about
/// 37 bytes per block, with room to grow) and two nodes, one of them
/// perhaps the root.
fn contiguous_reserve(cfg: &Config, blocks: usize) -> u64 {
    table_run(blocks)
        + 2 * crate::alloc::round_up(cfg.node_bytes as u64 + 4096)
        + root_extra_bytes(cfg) as u64
}

/// How much larger than a node the root may grow (its buffers may hold
/// more, see `write::root_buffer_bytes`).
fn root_extra_bytes(cfg: &Config) -> usize {
    write::root_buffer_bytes(cfg) - cfg.node_bytes
}

/// The run the checkpoint's block table blob needs.
fn table_run(blocks: usize) -> u64 {
    crate::alloc::round_up(blocks as u64 * 48 + 4096)
}

/// Batches with at least this many bytes of inserted values log their
/// inserts unbound (seed 000 §3: "at least 1MB of consecutive pages").
pub const LATE_BINDING_MIN_BYTES: usize = 1 << 20;

/// One operation of an atomic batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value`.
    Insert {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Write `data` at `offset` inside the value of `key`, without reading
    /// it (a missing value reads as empty; gaps are zero-filled).
    Patch {
        /// The key.
        key: Vec<u8>,
        /// Byte offset inside the value.
        offset: u32,
        /// The bytes to write.
        data: Vec<u8>,
    },
    /// Shorten the value of `key` to at most `len` bytes.
    Truncate {
        /// The key.
        key: Vec<u8>,
        /// The new maximum length.
        len: u32,
    },
    /// Remove every key in `[lo, hi)`.
    DeleteRange {
        /// First key removed.
        lo: Vec<u8>,
        /// First key kept (exclusive bound).
        hi: Vec<u8>,
    },
    /// Give every key with prefix `from` the prefix `to` instead; keys
    /// that had prefix `to` before are removed first. Neither prefix may be
    /// a prefix of the other.
    RangeMove {
        /// Source prefix.
        from: Vec<u8>,
        /// Destination prefix.
        to: Vec<u8>,
    },
}

/// The back-pressure step a deferred write leaves to its caller
/// ([`Tree::write_deferred`], [`Tree::catch_up`]).
#[must_use = "pass it to Tree::catch_up once your own locks are released"]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CatchUp {
    /// The batch added unbound inserts (late binding).
    streamed: bool,
    /// The batch left the cache over its budget: the write-back thread
    /// had as much queued as it may.
    write_back_behind: bool,
}

impl CatchUp {
    /// Whether paying it may wait for the background threads (to bind a
    /// stream's inserts or to write back nodes); otherwise it only checks
    /// the log buffer.
    pub fn may_wait(&self) -> bool {
        self.streamed || self.write_back_behind
    }

    /// What two deferred writes owe together.
    pub fn and(self, other: CatchUp) -> CatchUp {
        CatchUp {
            streamed: self.streamed || other.streamed,
            write_back_behind: self.write_back_behind || other.write_back_behind,
        }
    }
}

#[derive(Debug)]
struct Shared {
    dev: Box<dyn Device>,
    cfg: Config,
    state: RwLock<State>,
    checkpoint_lock: Mutex<()>,
    poison: Mutex<Option<String>>,
    /// A failed operation dropped nodes it had taken out of the cache
    /// (`State::lost_nodes`): the in-memory tree misses acknowledged
    /// messages, so reads are refused too, until a reopen replays the log.
    /// Set under the state's write lock, read under its read lock.
    incomplete: std::sync::atomic::AtomicBool,
    stats: Stats,
    log: crate::wal::Log,
    late_binding_min_bytes: std::sync::atomic::AtomicUsize,
    recovery: Mutex<LogEnd>,
    /// The sequential stream being written: last insert key, bytes so far.
    stream: Mutex<(Vec<u8>, usize)>,
    /// Binding records were appended whose bound nodes are written but not
    /// yet device-synced. Set and taken under the state's write lock.
    device_sync_owed: std::sync::atomic::AtomicBool,
    /// Held by a sync from its locked section until its device sync is
    /// done, and passed through by every sync before it writes log bytes:
    /// no binding record reaches the device before its bound nodes.
    bind_barrier: Mutex<()>,
    /// Reaches the background thread, if one runs.
    wake: background::Wake,
    /// Leaves being read whole, internal nodes whose header is being read.
    loading: read_ahead::Loading,
    /// The state's node cache, reachable without the state's lock: the
    /// write-back thread looks up the nodes queued for it here.
    cache: Arc<cache::Cache>,
    /// Nodes a write-back call is writing (`State::writing` holds those a
    /// checkpoint's locked step placed).
    writing_back: writeback::Writing,
    /// Buffers leaf images are encoded into, kept across write-backs.
    image_bufs: image_bufs::ImageBufs,
    /// Where recent partition reads ended (random or continuing reads).
    reads: read_pattern::ReadPattern,
    /// Children flushes are about to take, read ahead.
    flush_ahead: flush_ahead::FlushAhead,
}

/// Runs its closure when dropped: a thread's cleanup that must happen
/// however the thread ends (return, error, panic).
struct OnExit<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnExit<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Where each unbound insert's value went, by (batch LSN, op index), as
/// the binding records found at recovery say.
type Bindings = std::collections::HashMap<(u64, u32), crate::wal::record::Target>;

/// Recovery's first pass over one log record: a binding record's targets
/// are kept, and the extents they name are kept from reuse; a batch is
/// only checked to decode (a damaged one fails the open before anything
/// is applied).
fn collect_bindings(
    state: &mut State,
    bindings: &mut Bindings,
    unpacker: &mut crate::wal::packing::Unpacker,
    lsn: u64,
    payload: &[u8],
) -> Result<()> {
    use crate::wal::record::{Payload, Target};
    if let Payload::Bindings(bs) = decode_record(&state.layout, unpacker, lsn, payload)? {
        for b in bs {
            if let Target::Node { offset, len, .. } = b.target {
                state.table.reserve_bound(offset, len, lsn);
            }
            bindings.insert((b.lsn, b.op), b.target);
        }
    }
    Ok(())
}

/// The log record at `lsn`, unpacked (`unpacker` has seen every record
/// before it since the scan's start) and decoded; one that does not
/// decode is a corruption error naming its device address.
fn decode_record(
    layout: &state::Layout,
    unpacker: &mut crate::wal::packing::Unpacker,
    lsn: u64,
    payload: &[u8],
) -> Result<crate::wal::record::Payload> {
    let at = layout.log_offset + lsn % layout.log_bytes;
    unpacker
        .unpack(payload)
        .and_then(|plain| crate::wal::record::decode_payload(&plain))
        .map_err(|d| Error::corrupt("log record", at, d))
}

/// A Bε-tree on a device. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Tree {
    shared: Arc<Shared>,
}

impl Tree {
    /// Formats `dev` with an empty tree and opens it.
    pub fn create(dev: Box<dyn Device>, cfg: Config) -> Result<Tree> {
        let stats = Stats::default();
        let state = {
            let loading = read_ahead::Loading::default();
            let reads = read_pattern::ReadPattern::default();
            let flush_ahead = flush_ahead::FlushAhead::default();
            let env = Env {
                dev: dev.as_ref(),
                cfg: &cfg,
                stats: &stats,
                loading: &loading,
                reads: &reads,
                flush_ahead: &flush_ahead,
            };
            checkpoint::create_state(env)?
        };
        let log = crate::wal::Log::new(
            state.layout.log_offset,
            state.layout.log_bytes,
            0,
            0,
            0,
            Vec::new(),
        );
        let tree = Tree::from_parts(dev, cfg, state, stats, log);
        tree.checkpoint()?;
        Ok(tree)
    }

    /// Opens the tree on `dev` at its newest durable checkpoint, with a
    /// node cache of `cache_bytes`.
    pub fn open(dev: Box<dyn Device>, cache_bytes: usize) -> Result<Tree> {
        let stats = Stats::default();
        // Nothing reads ahead before the handle exists.
        let loading = read_ahead::Loading::default();
        let reads = read_pattern::ReadPattern::default();
        let flush_ahead = flush_ahead::FlushAhead::default();
        let (mut state, cfg) = {
            let probe = Config {
                cache_bytes,
                ..Config::default()
            };
            let env = Env {
                dev: dev.as_ref(),
                cfg: &probe,
                stats: &stats,
                loading: &loading,
                reads: &reads,
                flush_ahead: &flush_ahead,
            };
            checkpoint::open_state(env, cache_bytes)?
        };
        let (log, bindings, first) = {
            let env = Env {
                dev: dev.as_ref(),
                cfg: &cfg,
                stats: &stats,
                loading: &loading,
                reads: &reads,
                flush_ahead: &flush_ahead,
            };
            // The root stays cached and whole: writes land in it without I/O.
            let root = state.root;
            let (node, dirty) = state.take_full(env, root)?;
            state.put_clean(root, node, dirty);
            let (lo, lb) = (state.layout.log_offset, state.layout.log_bytes);
            let start = (state.log_checkpoint_lsn, state.log_chain);
            let mut bindings = Bindings::new();
            let mut unpacker = crate::wal::packing::Unpacker::default();
            let mut scan =
                crate::wal::replay::scan(env, lo, lb, start, None, &mut |lsn, payload| {
                    collect_bindings(&mut state, &mut bindings, &mut unpacker, lsn, &payload)?;
                    Ok(crate::wal::replay::Next::Continue)
                })?;
            let log = crate::wal::Log::new(
                lo,
                lb,
                state.log_checkpoint_lsn,
                scan.tail,
                scan.chain,
                std::mem::take(&mut scan.head),
            );
            (log, bindings, scan)
        };
        let tree = Tree::from_parts(dev, cfg, state, stats, log);
        let end = tree.replay(&bindings, &first)?;
        *tree.shared.recovery.lock() = end;
        Ok(tree)
    }

    /// Applies the log's batches found at open, in order (recovery), reading
    /// them from the log again one at a time: `first` is what the first
    /// pass found, `bindings` the binding records it collected (whose
    /// extents it kept from reuse).
    ///
    /// Two passes (seed 000 §3): first every binding record is collected;
    /// then batches are replayed, unbound inserts taking their values from
    /// the bound nodes. A batch with an unbound insert that has no binding
    /// was never acknowledged (a sync binds before it flushes): the log
    /// ends before it.
    fn replay(&self, bindings: &Bindings, first: &crate::wal::replay::Scan) -> Result<LogEnd> {
        use crate::wal::record::{Logged, Payload, Target};
        use crate::wal::replay::Next;
        let mut end = first.end.clone();
        if first.records == 0 {
            return Ok(end);
        }
        let env = self.env();
        let mut st = self.shared.state.write();
        let (lo, lb) = (st.layout.log_offset, st.layout.log_bytes);
        let start = (st.log_checkpoint_lsn, st.log_chain);
        let mut replayed = false;
        let mut stopped = false;
        let mut unpacker = crate::wal::packing::Unpacker::default();
        let second =
            crate::wal::replay::scan(env, lo, lb, start, Some(first.tail), &mut |lsn, payload| {
                let Payload::Batch(logged) =
                    decode_record(&st.layout, &mut unpacker, lsn, &payload)?
                else {
                    return Ok(Next::Continue);
                };
                let mut ops = Vec::with_capacity(logged.len());
                for (i, l) in logged.into_iter().enumerate() {
                    match l {
                        Logged::Op(op) => ops.push(op),
                        Logged::Unbound { key, .. } => match bindings.get(&(lsn, i as u32)) {
                            None => {
                                end = LogEnd::Unbound { lsn };
                                stopped = true;
                                return Ok(Next::Stop);
                            }
                            Some(Target::Obsolete) => {}
                            Some(t) => {
                                let value = bind::read_bound_value(env, t, &key)?;
                                ops.push(Op::Insert { key, value });
                            }
                        },
                    }
                }
                for op in &ops {
                    validate(op)?;
                    apply_op(&mut st, env, op)?;
                }
                st.evict(env)?;
                self.shared.stats.add_replayed_record();
                replayed = true;
                Ok(Next::Continue)
            })?;
        if !stopped && (second.tail, second.records) != (first.tail, first.records) {
            return Err(Error::corrupt(
                "log",
                lo + second.tail % lb,
                format!(
                    "the second recovery pass read {} records to {}, the first {} to {}",
                    second.records, second.tail, first.records, first.tail
                ),
            ));
        }
        if replayed {
            self.shared.stats.add_replayed();
        }
        Ok(end)
    }

    /// Why the log ended where it did when this handle was opened. A
    /// `Damaged` end names the device address of the record: a crash tears
    /// the last write, so this is expected after a power loss during a
    /// flush, but after a clean shutdown it means corruption.
    pub fn log_end(&self) -> LogEnd {
        self.shared.recovery.lock().clone()
    }

    fn from_parts(
        dev: Box<dyn Device>,
        cfg: Config,
        state: State,
        stats: Stats,
        log: crate::wal::Log,
    ) -> Tree {
        let cache = state.cache.clone();
        let image_bufs = image_bufs::ImageBufs::new(cfg.node_bytes);
        Tree {
            shared: Arc::new(Shared {
                cache,
                dev,
                cfg,
                state: RwLock::new(state),
                checkpoint_lock: Mutex::new(()),
                poison: Mutex::new(None),
                incomplete: std::sync::atomic::AtomicBool::new(false),
                stats,
                log,
                late_binding_min_bytes: std::sync::atomic::AtomicUsize::new(LATE_BINDING_MIN_BYTES),
                recovery: Mutex::new(LogEnd::Clean),
                stream: Mutex::new((Vec::new(), 0)),
                device_sync_owed: std::sync::atomic::AtomicBool::new(false),
                bind_barrier: Mutex::new(()),
                wake: Default::default(),
                loading: Default::default(),
                writing_back: Default::default(),
                image_bufs,
                reads: Default::default(),
                flush_ahead: Default::default(),
            }),
        }
    }

    fn env(&self) -> Env<'_> {
        Env {
            dev: self.shared.dev.as_ref(),
            cfg: &self.shared.cfg,
            stats: &self.shared.stats,
            loading: &self.shared.loading,
            reads: &self.shared.reads,
            flush_ahead: &self.shared.flush_ahead,
        }
    }

    /// The configuration in force (shape from the image, cache from open).
    pub fn config(&self) -> &Config {
        &self.shared.cfg
    }

    /// The device the tree lives on.
    pub fn device(&self) -> &dyn Device {
        self.shared.dev.as_ref()
    }

    fn check_poison(&self) -> Result<()> {
        match &*self.shared.poison.lock() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Ends a step that changed the tree under the write lock. If it
    /// failed after taking nodes out of the cache, they are gone from the
    /// in-memory tree (with any buffer on its way down between them): the
    /// store is poisoned and reads are refused from now on (see
    /// [`Tree::check_complete`]), rather than answered from a tree that
    /// misses acknowledged messages. The log still has them all: a
    /// reopen replays them.
    fn settle<T>(&self, st: &mut State, r: Result<T>) -> Result<T> {
        match &r {
            Ok(_) => debug_assert!(st.held.is_empty(), "taken, not put back: {:?}", st.held),
            Err(e) => {
                if st.lost_nodes() {
                    self.record_poison(e);
                    self.shared
                        .incomplete
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        r
    }

    /// Refuses a read of a tree a failed operation left incomplete
    /// ([`Tree::settle`]). Called under the state's read lock, so a read
    /// either started before the failure or sees it.
    fn check_complete(&self) -> Result<()> {
        if self
            .shared
            .incomplete
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            let why = self.shared.poison.lock().clone().unwrap_or_default();
            return Err(Error::Incomplete(why));
        }
        Ok(())
    }

    fn poison<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.record_poison(e);
        }
        r
    }

    /// Poisons the store with `e` as its cause, unless it already is.
    fn record_poison(&self, e: &Error) {
        let mut p = self.shared.poison.lock();
        if p.is_none() {
            *p = Some(e.to_string());
        }
    }

    /// Sets `key` to `value`.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(&[Op::Insert {
            key: key.to_vec(),
            value: value.to_vec(),
        }])
    }

    /// Removes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(&[Op::Delete { key: key.to_vec() }])
    }

    /// Writes `data` at `offset` inside the value of `key` without reading it.
    pub fn patch(&self, key: &[u8], offset: u32, data: &[u8]) -> Result<()> {
        self.write(&[Op::Patch {
            key: key.to_vec(),
            offset,
            data: data.to_vec(),
        }])
    }

    /// Shortens the value of `key` to at most `len` bytes.
    pub fn truncate_value(&self, key: &[u8], len: u32) -> Result<()> {
        self.write(&[Op::Truncate {
            key: key.to_vec(),
            len,
        }])
    }

    /// Removes every key in `[lo, hi)` with one message.
    pub fn delete_range(&self, lo: &[u8], hi: &[u8]) -> Result<()> {
        self.write(&[Op::DeleteRange {
            lo: lo.to_vec(),
            hi: hi.to_vec(),
        }])
    }

    /// Moves every key with prefix `from` to prefix `to` (see [`Op::RangeMove`]).
    pub fn range_move(&self, from: &[u8], to: &[u8]) -> Result<()> {
        self.write(&[Op::RangeMove {
            from: from.to_vec(),
            to: to.to_vec(),
        }])
    }

    /// Applies `ops` as one atomic batch: no reader sees part of it, a
    /// checkpoint contains all of it or none, and it is one log record, so
    /// recovery replays all of it or none. Durable once [`Tree::sync`] (or a
    /// checkpoint) returns after it.
    pub fn write(&self, ops: &[Op]) -> Result<()> {
        let owed = self.write_deferred(ops)?;
        self.catch_up(owed)
    }

    /// [`Tree::write`] for a batch the caller gives away: values move into
    /// the tree instead of being copied (a file system's data blocks).
    pub fn write_owned(&self, ops: Vec<Op>) -> Result<()> {
        let owed = self.write_owned_deferred(ops)?;
        self.catch_up(owed)
    }

    /// [`Tree::write`] without its back-pressure step: the caller passes
    /// the returned [`CatchUp`] to [`Tree::catch_up`] once it has released
    /// its own locks. A file system holds a namespace lock while it
    /// writes; a writer that outruns the background threads binds or
    /// flushes on their behalf, which takes 100-200 ms, and must not keep
    /// every other request waiting on that lock meanwhile
    /// (`bench/workloads/stall.py`).
    pub fn write_deferred(&self, ops: &[Op]) -> Result<CatchUp> {
        self.write_batch(Batch::Shared(ops))
    }

    /// [`Tree::write_owned`] without its back-pressure step (see
    /// [`Tree::write_deferred`]).
    pub fn write_owned_deferred(&self, mut ops: Vec<Op>) -> Result<CatchUp> {
        self.write_batch(Batch::Owned(&mut ops))
    }

    /// Back-pressure on writers, owed by a deferred write: when the
    /// background threads have fallen behind (or none run), binds pending
    /// unbound inserts — only a writer that added some, so a stream pays
    /// for itself and not whoever writes next — or flushes a full log
    /// buffer.
    pub fn catch_up(&self, owed: CatchUp) -> Result<()> {
        if owed.write_back_behind {
            self.wait_for_write_back()?;
        }
        if owed.streamed && self.must_bind(self.unbound_load()) {
            self.bind_now()?;
        }
        if self.must_write_out_log() {
            self.write_out_log()?;
        }
        Ok(())
    }

    /// Does what [`Tree::catch_up`] of `owed` can without waiting (asks
    /// the background thread to bind a stream's inserts or to write the
    /// log's buffer out) and says whether the rest is still owed: waiting
    /// for write-back, binding or writing the log out in this thread (no
    /// background thread runs, or it is a round behind). A daemon's
    /// writer pays that rest on its back-pressure worker; most of a
    /// stream's writes owe none of it, and handing each of them over
    /// woke the worker for nothing (it took the request thread's CPU at
    /// 2,601 of a 4 GiB stream's 4,096 writes, session 50). Never waits:
    /// if the state's lock is held, everything is still owed.
    pub fn catch_up_asking(&self, owed: CatchUp) -> bool {
        if owed.write_back_behind {
            return true;
        }
        if owed.streamed {
            let Some(st) = self.shared.state.try_read() else {
                return true;
            };
            let load = (st.unbound.len(), st.unbound.value_bytes());
            drop(st);
            if self.must_bind(load) {
                return true;
            }
        }
        self.must_write_out_log()
    }

    /// Whether a writer must bind the unbound inserts itself, given their
    /// `(count, bytes)`; at one round it asks the background thread
    /// instead, if one runs. Unbound inserts are bound in rounds of
    /// bounded size: their bookkeeping, the binding pass and its records
    /// cost memory in proportion (about 200 bytes each), and their values
    /// sit in dirty leaves that only binding should write (see
    /// `unbound_bind_bytes`).
    fn must_bind(&self, (count, bytes): (usize, usize)) -> bool {
        let at = unbound_bind_bytes(&self.shared.cfg);
        count >= UNBOUND_BIND_AT * 2
            || bytes >= at * 2
            || ((count >= UNBOUND_BIND_AT || bytes >= at) && !self.shared.wake.want_bind())
    }

    /// Whether a writer must write the log's buffer out itself: a full
    /// buffer is written out by the background thread (asked here), so
    /// the writer does not wait for the device; only if it falls behind
    /// (or none runs) does the writer write it out.
    fn must_write_out_log(&self) -> bool {
        let (unwritten, at) = (
            self.shared.log.unwritten_bytes(),
            self.shared.log.write_out_bytes(),
        );
        unwritten >= at * 2 || (unwritten >= at && !self.shared.wake.want_write_out())
    }

    /// Memory back-pressure: the cache is over its budget and the
    /// write-back thread has all it may queue. Eviction runs again first
    /// (the thread may have finished nodes since, making room in its
    /// queue); if the thread is still full, the writer writes the
    /// least recently used dirty node the thread has not taken, the way
    /// the thread does (serialized and written outside the lock, which is
    /// held only to allocate and to commit), lets eviction drop it, and
    /// repeats while it is still behind; with nothing left to take it
    /// waits for the thread to finish a node. Writing rather than only
    /// waiting keeps both cores serializing nodes: when writers only
    /// waited, random inserts ran at half the rate (engine-compare: 84-102k
    /// against 174-205k inserts/s, the writer idle for a third of the
    /// run). Readers and other writers go on meanwhile.
    fn wait_for_write_back(&self) -> Result<()> {
        let env = self.env();
        loop {
            let (queue, seen, help) = {
                // Eviction first: it applies the commits the thread has
                // published since the batch's own eviction, which makes
                // room in its queue, and hands it more nodes before this
                // writer serializes any itself.
                let mut st = self.shared.state.write();
                let r = st.evict(env);
                let r = self.settle(&mut st, r);
                let behind = std::mem::take(&mut st.writeback.behind);
                if r.is_err() {
                    drop(st);
                    return self.poison(r);
                }
                if !behind || !st.over_budget(env) {
                    return Ok(());
                }
                let (queue, seen) = match &st.writeback.queue {
                    Some(q) => (Some(q.clone()), q.finished()),
                    None => (None, 0),
                };
                (queue, seen, st.unqueued_dirty_lru())
            };
            match (help, &queue) {
                (Some(b), _) => self.write_back_unlocked(&[b], writeback::For::Writer)?,
                (None, Some(q)) => q.wait_past(seen, std::time::Duration::from_millis(100)),
                (None, None) => return Ok(()),
            }
        }
    }

    fn write_batch(&self, mut batch: Batch<'_>) -> Result<CatchUp> {
        let ops = batch.ops();
        for op in ops {
            validate(op)?;
        }
        let size = BatchSize::of(ops);
        let moved: Vec<(Vec<u8>, Vec<u8>)> = ops
            .iter()
            .filter_map(|op| match op {
                Op::RangeMove { from, to } => Some((from.clone(), to.clone())),
                _ => None,
            })
            .collect();
        // Not with a range move in the batch: it moves (and range-deletes)
        // keys the batch itself inserts, so their values could no longer
        // be located for binding, and replay would move nothing.
        let late_binding = self.continues_stream(ops, size.inserted) && moved.is_empty();
        let payload = crate::wal::record::encode_batch(ops, late_binding);
        // Room is kept for the batch at its largest packed form.
        let logged_bound = crate::wal::packing::packed_bound(payload.len()) as u64;
        let log = &self.shared.log;
        if logged_bound > log.max_payload_bytes() {
            return Err(Error::InvalidArgument(format!(
                "batch of {} bytes exceeds the log's limit of {} (a quarter of the log region)",
                payload.len(),
                log.max_payload_bytes()
            )));
        }
        self.check_poison()?;
        let env = self.env();
        self.admit(&size, payload.len() as u64)?;
        // Everything the apply step needs of the ops besides the ops
        // themselves, taken now: an owned batch gives its values away.
        let mut unbound: Vec<(u32, Vec<u8>, u32)> = Vec::new();
        if late_binding {
            for (i, op) in ops.iter().enumerate() {
                if let Op::Insert { key, value } = op {
                    unbound.push((i as u32, key.clone(), value.len() as u32));
                }
            }
        }
        loop {
            // Keep room in the log: a checkpoint reclaims it. Counted as
            // if nothing were packed (see `Log::unpacked_bytes`).
            if log.unpacked_bytes() + payload.len() as u64 > log.region_bytes() * 3 / 4 {
                self.checkpoint()?;
            }
            let mut st = self.shared.state.write();
            if log.used_bytes() + logged_bound + crate::wal::record::FRAME_HEADER_BYTES
                > log.region_bytes()
            {
                drop(st);
                self.checkpoint()?;
                continue;
            }
            let r = (|| {
                if !st.unbound.is_empty() && !moved.is_empty() {
                    // A range move reads the values under its prefixes:
                    // bind the pending inserts there while their keys are
                    // still in place. Only those: binding a whole stream's
                    // worth here, under the lock, stalled every request for
                    // 50-170 ms whenever a file was unlinked while open
                    // (moved to the inode space) during a large write.
                    let touched = |k: &[u8]| {
                        moved
                            .iter()
                            .any(|(from, to)| k.starts_with(from) || k.starts_with(to))
                    };
                    let none = bind::Prepared::default();
                    self.append_bindings(&mut st, env, &none, bind::Which::Keys(&touched))?;
                }
                batch.apply(&mut st, env)?;
                let (lsn, _) = log.position();
                if !log.append_batch(&payload)? {
                    return Err(Error::Poisoned(
                        "log region full after the room check".into(),
                    ));
                }
                self.shared.stats.add_batch();
                for (op, key, value_bytes) in std::mem::take(&mut unbound) {
                    st.unbound.push(bind::Unbound {
                        lsn,
                        op,
                        key,
                        value_bytes,
                    });
                }
                st.evict(env)
            })();
            let r = self.settle(&mut st, r);
            let behind = std::mem::take(&mut st.writeback.behind);
            drop(st);
            self.poison(r)?;
            return Ok(CatchUp {
                streamed: late_binding,
                write_back_behind: behind,
            });
        }
    }

    /// Space admission: a batch is refused with `NoSpace` (and nothing else
    /// happens: the store stays writable) unless free node space, minus the
    /// reserve a checkpoint may need, covers what the batch may add. Batches
    /// that only delete may use half of the reserve, so a full store can
    /// still be emptied. Space that deletes release becomes free after the
    /// next checkpoint; when a batch does not fit but released space is
    /// waiting, one checkpoint is run first to make it reusable.
    fn admit(&self, size: &BatchSize, payload_bytes: u64) -> Result<()> {
        // A batch that deletes and writes at most a little metadata (a
        // file system's unlink also touches the parent directory) frees
        // space: it may use half of the reserve, so a full store can be
        // emptied.
        let deletes_only = size.deletes && size.written <= FREEING_BATCH_MAX_WRITE_BYTES;
        // Messages are rewritten once per level on their way down, each time
        // as part of a redirect-on-write node: a generous allowance. The
        // ops' own bytes count, not the log record's: a late-bound record
        // holds no values, but the values still go into nodes.
        let need = payload_bytes.max(size.op_bytes) * 4;
        let fits = |t: &Tree| {
            let st = t.shared.state.read();
            let blocks = st.table.live_blocks();
            let reserve = checkpoint_reserve(&t.shared.cfg, blocks);
            // A freeing batch needs only room for the checkpoint that makes
            // its space reusable (the block table and two nodes): the full
            // reserve scales with the cache, and binding and flushes may
            // already have used it, which would leave a full store that
            // cannot be emptied.
            let usable = if deletes_only {
                contiguous_reserve(&t.shared.cfg, blocks).min(reserve / 2)
            } else {
                reserve
            };
            let free = st.table.space.free_bytes();
            // The checkpoint's block table and a node or two must also find
            // contiguous room.
            // contiguous room (a freeing batch: the table; the nodes it
            // dirties shrink, and free space may be fragmented by then).
            let run = if deletes_only {
                table_run(blocks)
            } else {
                contiguous_reserve(&t.shared.cfg, blocks)
            };
            let mut run_ok = st.table.space.has_run(run);
            // Near a full device the free space may be in pieces smaller
            // than a node: check that the next checkpoint could place its
            // table and every dirty node (at its largest) plus the nodes
            // this batch may dirty. Without this a store could fill so
            // that no checkpoint fits, and space released by deletes,
            // reusable only after a checkpoint, would never come back. Not
            // for a freeing batch: refusing an `rm` would make it worse.
            if run_ok && !deletes_only && free < 4 * (usable + need) {
                let node_run = crate::alloc::round_up(t.shared.cfg.node_bytes as u64 + 4096);
                let nodes = st.cache.dirty_count() + 4;
                run_ok = st.table.space.can_place(
                    std::iter::once(table_run(blocks)).chain(std::iter::repeat_n(node_run, nodes)),
                );
            }
            (
                free >= usable + need && run_ok,
                st.table.pending_bytes(),
                free,
            )
        };
        let (ok, _, _) = fits(self);
        if ok {
            return Ok(());
        }
        // Reclaim: push covering range deletes down (pruning reads nothing)
        // and checkpoint, so released space becomes reusable.
        self.reclaim_space(usize::MAX)?;
        if fits(self).0 {
            return Ok(());
        }
        let (_, _, free) = fits(self);
        Err(Error::NoSpace {
            needed_bytes: need,
            free_bytes: free,
        })
    }

    /// Makes every batch written before this call durable: flushes the log
    /// (one device flush for all callers waiting at the same time).
    pub fn sync(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.check_poison()?;
        let env = self.env();
        let prepared = bind::Prepared::new(&self.prepare_bindings()?);
        let (target, owed) = loop {
            let mut st = self.shared.state.write();
            if !st.unbound.is_empty() {
                let r = self.append_bindings(&mut st, env, &prepared, bind::Which::All);
                let r = self.settle(&mut st, r);
                self.poison(r)?;
            }
            // The bound nodes must be durable before the log bytes that
            // name them (inside one sync epoch the device may keep the
            // later write and lose the earlier one). That device sync runs
            // after the lock is released, so writers and readers do not
            // wait for it; the barrier, taken here, keeps every sync's log
            // write behind it. If another sync holds it (its device sync
            // under way), wait for it without the state lock and retry.
            let barrier = if self.shared.device_sync_owed.load(Ordering::Relaxed) {
                match self.shared.bind_barrier.try_lock() {
                    Some(g) => {
                        self.shared.device_sync_owed.store(false, Ordering::Relaxed);
                        Some(g)
                    }
                    None => {
                        drop(st);
                        drop(self.shared.bind_barrier.lock());
                        continue;
                    }
                }
            } else {
                None
            };
            // Captured under the lock: nothing appended later (perhaps
            // unbound and not yet bound) is flushed by this sync.
            break (self.shared.log.position().0, barrier);
        };
        if owed.is_some() {
            let r = env.sync();
            self.poison(r)?;
        }
        drop(owed);
        // Wait for any earlier sync's device sync of bound nodes.
        drop(self.shared.bind_barrier.lock());
        let r = self.shared.log.sync_to(env, target);
        self.poison(r)
    }

    /// Writes the log's buffer to the device without making it durable
    /// (see [`crate::wal::Log::write_out`]).
    pub(crate) fn write_out_log(&self) -> Result<()> {
        self.check_poison()?;
        let r = self.shared.log.write_out(self.env());
        self.poison(r)
    }

    /// Late-binding decision: "at least 1 MiB of consecutive values". A
    /// batch whose inserts are in key order (at least 15/16 of the value
    /// bytes) counts on its own if it is that large; smaller ones count
    /// when they continue a stream: their inserts are in key order and
    /// start after the previous batch's last insert (a file written
    /// sequentially in 4–128 KiB pieces). The first 1 MiB of a stream is
    /// logged in full. Inserts out of order (random keys) are always
    /// logged whole: they wait in the buffers near the root, and binding
    /// them would write those nodes again at every round of binding.
    fn continues_stream(&self, ops: &[Op], inserted: usize) -> bool {
        let min = self
            .shared
            .late_binding_min_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let inserts: Vec<(&[u8], usize)> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Insert { key, value } => Some((key.as_slice(), value.len())),
                _ => None,
            })
            .collect();
        let keys: Vec<&[u8]> = inserts.iter().map(|(k, _)| *k).collect();
        let mut run = self.shared.stream.lock();
        let ordered = keys.windows(2).all(|w| key_cmp(w[0], w[1]).is_lt());
        // Nearly all value bytes in key order: a file's blocks plus its
        // attributes (another key space) qualify, random keys do not.
        let in_order_bytes: usize = inserts
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| *i == 0 || key_cmp(inserts[i - 1].0, k).is_lt())
            .map(|(_, (_, n))| n)
            .sum();
        let mostly_ordered = in_order_bytes.saturating_mul(16) >= inserted.saturating_mul(15);
        let continues =
            ordered && keys.first().is_some_and(|k| key_cmp(&run.0, k).is_lt()) && run.1 > 0;
        run.1 = if keys.is_empty() || !ordered {
            0
        } else if continues {
            run.1.saturating_add(inserted)
        } else {
            inserted
        };
        if let Some(last) = keys.last() {
            run.0 = last.to_vec();
        }
        mostly_ordered && (inserted >= min || (continues && run.1 >= min && min != usize::MAX))
    }

    /// A sync's work on unbound inserts that needs no write lock: find the
    /// nodes holding their values (under the read lock, a chunk at a time)
    /// and write the dirty ones back without the lock, so that binding
    /// under the lock mostly only names nodes already written.
    ///
    /// A stream goes on while this runs (at 700 MiB/s, some 40,000 more
    /// 4 KiB blocks in the time it takes to write back 200 MiB of nodes),
    /// and whatever arrived meanwhile would be located and written under
    /// the lock, stalling every request for up to 100 ms (measured by
    /// `bench/workloads/stall.py`). So it goes round again over what
    /// arrived, a few times at most, until what is left for the locked
    /// pass is small; each round is shorter than the one before.
    fn prepare_bindings(&self) -> Result<Vec<bind::Found>> {
        /// What the locked pass may be left with without another round.
        const LEFT_FOR_LOCKED_PASS: usize = 4096;
        const ROUNDS: usize = 4;
        let mut found = Vec::new();
        let mut from = 0;
        for _ in 0..ROUNDS {
            from = self.prepare_bindings_from(from, &mut found)?;
            let pending = self.shared.state.read().unbound.len();
            if pending.saturating_sub(from) < LEFT_FOR_LOCKED_PASS {
                break;
            }
        }
        Ok(found)
    }

    /// One round of [`Tree::prepare_bindings`] over the unbound inserts
    /// from index `from` on; returns the index where it stopped. (Another
    /// sync may bind and empty the list meanwhile: answers are matched by
    /// LSN, so a stale index only costs the locked pass a lookup.)
    fn prepare_bindings_from(
        &self,
        mut from: usize,
        found: &mut Vec<bind::Found>,
    ) -> Result<usize> {
        const CHUNK: usize = 4096;
        let env = self.env();
        loop {
            let st = self.shared.state.read();
            if from >= st.unbound.len() {
                break;
            }
            found.extend(st.locate_unbound(env, from, CHUNK)?);
            from += CHUNK;
        }
        // The node holding the newest value is where the stream goes on:
        // writing it here would race the writer (whose take would copy the
        // node while we hold it, and whose next change makes our write
        // stale); the locked pass writes it instead. An earlier round's
        // frontier, left behind by the stream, is written now (blocks
        // written already are clean and skipped).
        let frontier = found.last().map(|f| f.block);
        let mut blocks: Vec<crate::table::BlockNum> = found
            .iter()
            .map(|f| f.block)
            .filter(|b| Some(*b) != frontier)
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        self.write_back_unlocked(&blocks, writeback::For::Binding)?;
        Ok(from)
    }

    /// Binds pending unbound inserts now (without flushing the log: the
    /// next sync makes the binding records durable, after the device sync
    /// of the nodes they name): those the unlocked first pass prepared and
    /// that are unchanged since, so the state lock is held only to name
    /// them (`Which::Prepared`). What a stream added meanwhile, or changed
    /// (the node it goes on in), waits for the next pass.
    pub(crate) fn bind_now(&self) -> Result<()> {
        self.check_poison()?;
        let env = self.env();
        let prepared = bind::Prepared::new(&self.prepare_bindings()?);
        let mut st = self.shared.state.write();
        if st.unbound.is_empty() {
            return Ok(());
        }
        let r = self.append_bindings(&mut st, env, &prepared, bind::Which::Prepared);
        let r = self.settle(&mut st, r);
        drop(st);
        self.poison(r)
    }

    /// Binds `which` pending unbound inserts and appends the binding
    /// record.
    fn append_bindings(
        &self,
        st: &mut State,
        env: Env<'_>,
        prepared: &bind::Prepared,
        which: bind::Which<'_>,
    ) -> Result<()> {
        let log = &self.shared.log;
        let bindings = st.bind_pending(env, log.position().0, prepared, which)?;
        if bindings.is_empty() {
            return Ok(());
        }
        self.shared
            .device_sync_owed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let payload = crate::wal::record::encode_bindings(&bindings);
        if !log.append_bindings(&payload)? {
            return Err(Error::Poisoned(
                "no room in the log for binding records (the log region is too small for late binding)".into(),
            ));
        }
        Ok(())
    }

    /// Inserts logged without their values and not bound yet (late
    /// binding; the next sync binds them).
    pub fn unbound_pending(&self) -> usize {
        self.shared.state.read().unbound.len()
    }

    /// Unbound inserts pending and the bytes of their values.
    fn unbound_load(&self) -> (usize, usize) {
        let st = self.shared.state.read();
        (st.unbound.len(), st.unbound.value_bytes())
    }

    /// Sets the size from which a batch's inserts are logged unbound
    /// (late-binding journal; default 1 MiB; `usize::MAX` turns it off).
    pub fn set_late_binding_min_bytes(&self, bytes: usize) {
        self.shared
            .late_binding_min_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_KEY_BYTES {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: MAX_KEY_BYTES,
            });
        }
        let env = self.env();
        let st = self.shared.state.read();
        self.check_complete()?;
        let v = st.get(env, key);
        self.continue_sweep(&st);
        st.evict_clean(env);
        v
    }

    /// Entries with keys in `[lo, hi)` (`hi = None`: to the end), in order.
    /// The iterator reads a leaf at a time; each batch is consistent, and
    /// writes made while iterating may or may not be seen by later batches.
    pub fn range(&self, lo: &[u8], hi: Option<&[u8]>) -> RangeIter {
        RangeIter {
            tree: self.clone(),
            cursor: Some(lo.to_vec()),
            hi: hi.map(<[u8]>::to_vec),
            batch: Vec::new().into_iter(),
            read_ahead: None,
        }
    }

    /// Hands every entry in `[lo, hi)` to `f`, in key order, as slices,
    /// until `f` returns false. Unlike [`Tree::range`], nothing is copied
    /// or allocated per entry where no buffered message applies (data at
    /// rest): the slices point into cached leaves. `f` runs under the
    /// tree's read lock, a leaf at a time: keep it short (writers wait)
    /// and do not call back into the tree from it.
    pub fn visit_range(
        &self,
        lo: &[u8],
        hi: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let env = self.env();
        let mut cursor = Some(lo.to_vec());
        let mut ahead: Option<std::thread::JoinHandle<()>> = None;
        let result = loop {
            let Some(from) = cursor.take() else {
                break Ok(());
            };
            if hi.is_some_and(|h| from.as_slice() >= h) {
                break Ok(());
            }
            if let Some(h) = ahead.take() {
                let _ = h.join();
            }
            let st = self.shared.state.read();
            if let Err(e) = self.check_complete() {
                break Err(e);
            }
            let visited = st.visit_leaf(env, &from, hi, &mut f, &mut |next| {
                ahead = read_ahead::next_leaf(self, &st, next, hi);
            });
            self.continue_sweep(&st);
            st.evict_clean(env);
            drop(st);
            match visited {
                Ok((next, true)) => cursor = next,
                Ok((_, false)) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        if let Some(h) = ahead {
            let _ = h.join();
        }
        result
    }

    /// Every entry whose key starts with `prefix`.
    pub fn scan_prefix(&self, prefix: &[u8]) -> RangeIter {
        let hi = prefix_successor(prefix);
        self.range(prefix, hi.as_deref())
    }

    /// Makes everything written so far durable: a new checkpoint.
    pub fn checkpoint(&self) -> Result<()> {
        let _one_at_a_time = self.shared.checkpoint_lock.lock();
        self.check_poison()?;
        // Most dirty nodes are serialized without the lock (see
        // `writeback`); only what is dirtied again meanwhile, and the nodes
        // above, are serialized under it below.
        // Not the most recently used ones: writers are at work there (their
        // take would copy a node we hold, and their change make our write
        // stale); the locked step below serializes them.
        let dirty: Vec<crate::table::BlockNum> = {
            let st = self.shared.state.read();
            let lru: Vec<_> = st
                .cache
                .lru_order()
                .into_iter()
                .filter(|(_, d)| *d)
                .collect();
            let keep = lru.len().saturating_sub(CHECKPOINT_HOT_NODES);
            let mut blocks: Vec<_> = lru[..keep].iter().map(|(b, _)| *b).collect();
            // Block order, as the locked step places nodes: a seed
            // reproduces a crash exactly.
            blocks.sort_unstable();
            blocks
        };
        for chunk in dirty.chunks(CHECKPOINT_WRITE_BACK_BATCH) {
            self.write_back_unlocked(chunk, writeback::For::Checkpoint)?;
        }
        let env = self.env();
        let (plan, lsn) = {
            let mut st = self.shared.state.write();
            let (lsn, chain) = self.shared.log.position();
            // Recovery from this checkpoint reads the log from `lsn` on.
            self.shared.log.restart_packing();
            match st.plan_checkpoint(env, lsn, chain) {
                // Not enough room to place the dirty nodes: nothing was
                // changed (see `plan_checkpoint`), so the store stays
                // writable and the caller gets ENOSPC.
                Err(e @ Error::NoSpace { .. }) => return Err(e),
                r => (self.poison(r)?, lsn),
            }
        };
        let r = checkpoint::write_checkpoint(env, &plan);
        let generation = self.poison(r)?;
        self.shared.state.write().commit_checkpoint(generation, lsn);
        self.shared.log.reclaim(lsn);
        self.shared.stats.add_checkpoint();
        Ok(())
    }

    /// Is the log more than half full? (The background thread checkpoints
    /// then, before writers have to.)
    fn log_half_full(&self) -> bool {
        let log = &self.shared.log;
        log.unpacked_bytes() > log.region_bytes() / 2
    }

    /// Checkpoints and closes the tree.
    pub fn close(self) -> Result<()> {
        self.checkpoint()
    }

    /// Checks every structural invariant (reads the whole tree).
    pub fn verify(&self) -> Result<VerifyReport> {
        let env = self.env();
        let st = self.shared.state.read();
        verify::verify(&st, env)
    }

    /// The engine's counters since open.
    pub fn stats(&self) -> TreeStats {
        self.shared.stats.snapshot()
    }

    /// Bytes the node cache holds now.
    pub fn cache_bytes_used(&self) -> usize {
        self.shared.state.read().cache.bytes()
    }

    /// Prunes subtrees that buffered range deletes cover and checkpoints,
    /// so the space they held is free again (what `rm` wants), spending at
    /// most `max_flushes` flushes (each may read one node).
    pub fn reclaim_space(&self, max_flushes: usize) -> Result<()> {
        self.check_poison()?;
        {
            let env = self.env();
            let mut st = self.shared.state.write();
            let r = st
                .prune_covered(env, max_flushes)
                .and_then(|()| st.evict(env));
            let r = self.settle(&mut st, r);
            drop(st);
            self.poison(r)?;
        }
        self.checkpoint()
    }

    /// Space in the node area. Space released by deletes is `pending`
    /// until the next checkpoint makes it reusable; `free` never counts it.
    pub fn space(&self) -> Space {
        let st = self.shared.state.read();
        let total = st.layout.device_bytes - st.layout.node_start;
        let free = st.table.space.free_bytes();
        let pending = st.table.pending_bytes();
        Space {
            total_bytes: total,
            free_bytes: free,
            pending_bytes: pending,
            used_bytes: total - free - pending,
        }
    }

    /// Bytes the write-ahead log has written to the device since open.
    pub fn log_bytes_written(&self) -> u64 {
        self.shared.log.bytes_written()
    }

    /// The log's device syncs and write-outs since open.
    pub fn log_syncs_and_write_outs(&self) -> (u64, u64) {
        self.shared.log.syncs_and_write_outs()
    }

    /// Bytes of the log region in use, counted as the checkpoint triggers
    /// count them (what replay would apply: records logged since the last
    /// checkpoint at their unpacked size), and its size.
    pub fn log_usage(&self) -> (u64, u64) {
        (
            self.shared.log.unpacked_bytes(),
            self.shared.log.region_bytes(),
        )
    }

    /// Tree height (0: the root is a leaf).
    pub fn height(&self) -> u8 {
        self.shared.state.read().height
    }
}

/// What admission and late binding need to know of a batch, in one pass.
struct BatchSize {
    /// Bytes of inserted values.
    inserted: usize,
    /// Bytes of inserted values and patch data.
    written: usize,
    /// Bytes of every op's keys, values and data.
    op_bytes: u64,
    /// Does the batch delete anything?
    deletes: bool,
}

impl BatchSize {
    fn of(ops: &[Op]) -> BatchSize {
        let mut s = BatchSize {
            inserted: 0,
            written: 0,
            op_bytes: 0,
            deletes: false,
        };
        for op in ops {
            let (keys, data) = match op {
                Op::Insert { key, value } => {
                    s.inserted += value.len();
                    (key.len(), value.len())
                }
                Op::Patch { key, data, .. } => (key.len(), data.len()),
                Op::Delete { key } => {
                    s.deletes = true;
                    (key.len(), 0)
                }
                Op::DeleteRange { lo, hi } => {
                    s.deletes = true;
                    (lo.len() + hi.len(), 0)
                }
                Op::Truncate { key, .. } => (key.len(), 0),
                Op::RangeMove { from, to } => (from.len() + to.len(), 0),
            };
            s.written += data;
            s.op_bytes += (keys + data) as u64;
        }
        s
    }
}

/// How many bytes of inserts and patches a deleting batch may carry and
/// still count as freeing space in admission (metadata, not data).
const FREEING_BATCH_MAX_WRITE_BYTES: usize = 64 << 10;

fn check_key(k: &[u8]) -> Result<()> {
    if k.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLarge {
            len: k.len(),
            max: MAX_KEY_BYTES,
        });
    }
    Ok(())
}

fn check_value_end(end: usize) -> Result<()> {
    if end > MAX_VALUE_BYTES {
        return Err(Error::ValueTooLarge {
            len: end,
            max: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

fn validate(op: &Op) -> Result<()> {
    match op {
        Op::Insert { key, value } => {
            check_key(key)?;
            check_value_end(value.len())
        }
        Op::Delete { key } | Op::Truncate { key, .. } => check_key(key),
        Op::Patch { key, offset, data } => {
            check_key(key)?;
            check_value_end(*offset as usize + data.len())
        }
        Op::DeleteRange { lo, hi } => {
            check_key(lo)?;
            check_key(hi)?;
            if lo >= hi {
                return Err(Error::InvalidArgument("range delete with lo >= hi".into()));
            }
            Ok(())
        }
        Op::RangeMove { from, to } => {
            check_key(from)?;
            check_key(to)?;
            if from.starts_with(to) || to.starts_with(from) {
                return Err(Error::InvalidArgument(
                    "range move prefixes must not contain each other".into(),
                ));
            }
            if prefix_successor(from).is_none() || prefix_successor(to).is_none() {
                return Err(Error::InvalidArgument(
                    "range move prefixes must have a successor (not all 0xff)".into(),
                ));
            }
            Ok(())
        }
    }
}

/// A batch of a write: borrowed (values are copied into the tree) or
/// given away (values move).
enum Batch<'a> {
    Shared(&'a [Op]),
    Owned(&'a mut [Op]),
}

impl Batch<'_> {
    fn ops(&self) -> &[Op] {
        match self {
            Batch::Shared(ops) => ops,
            Batch::Owned(ops) => ops,
        }
    }

    /// Applies the batch; an owned batch is emptied of its values.
    fn apply(&mut self, st: &mut State, env: Env<'_>) -> Result<()> {
        match self {
            Batch::Shared(ops) => apply_ops(st, env, ops.iter().map(Cow::Borrowed)),
            Batch::Owned(ops) => apply_ops(
                st,
                env,
                ops.iter_mut()
                    .map(|op| Cow::Owned(std::mem::replace(op, Op::Delete { key: Vec::new() }))),
            ),
        }
    }
}

/// Applies a batch: runs of point operations go down the tree together,
/// range deletes and range moves one at a time, all in batch order.
fn apply_ops<'a>(
    st: &mut State,
    env: Env<'_>,
    ops: impl Iterator<Item = Cow<'a, Op>>,
) -> Result<()> {
    let mut run: Vec<Msg> = Vec::new();
    for op in ops {
        if matches!(*op, Op::DeleteRange { .. } | Op::RangeMove { .. }) {
            if !run.is_empty() {
                st.apply_points(env, std::mem::take(&mut run))?;
            }
            apply_op(st, env, &op)?;
        } else if let Some(m) = point_msg(st, op.into_owned()) {
            run.push(m);
        }
    }
    if !run.is_empty() {
        st.apply_points(env, run)?;
    }
    Ok(())
}

/// The message of a point operation (None for range operations), with
/// its MSN; the operation's key and bytes move into it.
fn point_msg(st: &mut State, op: Op) -> Option<Msg> {
    let (key, op) = match op {
        Op::Insert { key, value } => (key, PointOp::Insert(value)),
        Op::Delete { key } => (key, PointOp::Delete),
        Op::Patch { key, offset, data } => (key, PointOp::Patch { offset, data }),
        Op::Truncate { key, len } => (key, PointOp::Truncate { len }),
        Op::DeleteRange { .. } | Op::RangeMove { .. } => return None,
    };
    let msn = st.next_msn();
    Some(Msg::Point {
        key,
        msg: PointMsg { msn, op },
    })
}

fn apply_op(st: &mut State, env: Env<'_>, op: &Op) -> Result<()> {
    let point = |st: &mut State, key: &[u8], op: PointOp| {
        let msn = st.next_msn();
        Msg::Point {
            key: key.to_vec(),
            msg: PointMsg { msn, op },
        }
    };
    let msg = match op {
        Op::Insert { key, value } => point(st, key, PointOp::Insert(value.clone())),
        Op::Delete { key } => point(st, key, PointOp::Delete),
        Op::Patch { key, offset, data } => point(
            st,
            key,
            PointOp::Patch {
                offset: *offset,
                data: data.clone(),
            },
        ),
        Op::Truncate { key, len } => point(st, key, PointOp::Truncate { len: *len }),
        Op::DeleteRange { lo, hi } => Msg::Range {
            lo: lo.clone(),
            hi: hi.clone(),
            msn: st.next_msn(),
        },
        Op::RangeMove { from, to } => return range_move_by_copy(st, env, from, to),
    };
    st.apply_msg(env, msg)
}

/// A moved source of at most this many keys is deleted key by key rather
/// than by a range delete. The copy has just read those keys, so the
/// point deletes are exact; a range delete costs more for a few keys,
/// because every buffer on its way down indexes it, clips it and checks
/// it on every lookup. (A file rename moves one attribute key and a few
/// blocks.)
const MOVED_POINT_DELETES_MAX: usize = 64;

/// Leaves [`range_is_empty`] visits at most before it answers "maybe
/// not". A destination deleted by a range delete that has not reached
/// the leaves yet still has its old entries there, each hidden by the
/// message: without a bound the check read every one of those leaves
/// under the write lock and without eviction (renaming a 256 MiB file
/// back and forth loaded all 64 leaves of the old copy at each rename:
/// 395 MiB in a 256 MiB cache, 593 MiB resident).
const EMPTY_CHECK_LEAVES_MAX: usize = 2;

/// Does the tree certainly hold no key in `[lo, hi)`? Stops at the first
/// key, and answers false (not known to be empty) once it has visited
/// [`EMPTY_CHECK_LEAVES_MAX`] leaves without reaching `hi`. False only
/// costs a range delete that deletes nothing, so replay, whose leaves
/// may be cut differently, may answer otherwise without changing what
/// the tree holds.
fn range_is_empty(st: &State, env: Env<'_>, lo: &[u8], hi: &[u8]) -> Result<bool> {
    let mut cursor = Some(lo.to_vec());
    for _ in 0..EMPTY_CHECK_LEAVES_MAX {
        let Some(from) = cursor else {
            return Ok(true);
        };
        let mut found = false;
        let (next, _) = st.visit_leaf(
            env,
            &from,
            Some(hi),
            &mut |_, _| {
                found = true;
                false
            },
            &mut |_| {},
        )?;
        if found {
            return Ok(false);
        }
        cursor = next;
    }
    Ok(cursor.is_none())
}

/// Range move, implemented by copying (tree surgery will replace this body
/// without changing the operation): delete the destination (if it holds
/// a key), copy the source, delete the source. Runs under the write lock,
/// so it is atomic to readers and to checkpoints; the lock is held for as
/// long as the source is large, so the copies are evicted as they go,
/// written under the lock if need be ([`State::evict_holding_lock`]).
///
/// A source of at most [`MOVED_POINT_DELETES_MAX`] keys is read whole,
/// then deleted and copied in one run of point messages, deletes first:
/// where its values still sit in the root's buffer (a file written just
/// before its rename, as `rsync` and editors do), each delete frees what
/// the copy then takes, and the buffer does not grow into a flush. A
/// larger source is copied a leaf at a time and deleted by one range
/// delete.
fn range_move_by_copy(st: &mut State, env: Env<'_>, from: &[u8], to: &[u8]) -> Result<()> {
    let from_end = prefix_successor(from).expect("validated");
    let to_end = prefix_successor(to).expect("validated");
    // A move to a new name finds its destination empty: a range delete
    // there would delete nothing, yet every later query and flush through
    // the buffers holding it would check it (a twentieth of rsync's
    // request thread). Replay may answer differently (see
    // `range_is_empty`); either answer leaves the destination empty.
    if !range_is_empty(st, env, to, &to_end)? {
        let msn = st.next_msn();
        st.apply_msg(
            env,
            Msg::Range {
                lo: to.to_vec(),
                hi: to_end,
                msn,
            },
        )?;
    }
    let moved_key = |k: &[u8]| {
        let mut nk = to.to_vec();
        nk.extend_from_slice(&k[from.len()..]);
        nk
    };
    // The source while it is small enough to move as one run.
    let mut few: Option<Vec<(Vec<u8>, Vec<u8>)>> = Some(Vec::new());
    let mut cursor = Some(from.to_vec());
    while let Some(c) = cursor {
        let (mut batch, next) = st.scan_leaf(env, &c, Some(&from_end))?;
        cursor = next;
        if let Some(f) = few.as_mut() {
            if f.len() + batch.len() <= MOVED_POINT_DELETES_MAX {
                f.append(&mut batch);
                continue;
            }
            // Too many: copy what was held back, then go on a leaf at a time.
            batch.splice(0..0, few.take().expect("held"));
        }
        let copies = batch
            .into_iter()
            .filter_map(|(k, value)| {
                point_msg(
                    st,
                    Op::Insert {
                        key: moved_key(&k),
                        value,
                    },
                )
            })
            .collect::<Vec<_>>();
        if !copies.is_empty() {
            st.apply_points(env, copies)?;
            st.evict_holding_lock(env)?;
        }
    }
    let Some(few) = few else {
        let msn = st.next_msn();
        return st.apply_msg(
            env,
            Msg::Range {
                lo: from.to_vec(),
                hi: from_end,
                msn,
            },
        );
    };
    if few.is_empty() {
        return Ok(());
    }
    let deletes: Vec<Op> = few
        .iter()
        .map(|(k, _)| Op::Delete { key: k.clone() })
        .collect();
    let copies = few.into_iter().map(|(k, value)| Op::Insert {
        key: moved_key(&k),
        value,
    });
    let run = deletes
        .into_iter()
        .chain(copies)
        .filter_map(|op| point_msg(st, op))
        .collect();
    st.apply_points(env, run)
}

/// Forward iterator over a key range; see [`Tree::range`].
///
/// Read-ahead: while the caller consumes one leaf, a background thread
/// reads and decodes the next one into the cache, so a cold scan overlaps
/// device reads and decoding with the caller's work.
#[derive(Debug)]
pub struct RangeIter {
    tree: Tree,
    cursor: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
    batch: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    read_ahead: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RangeIter {
    fn drop(&mut self) {
        if let Some(h) = self.read_ahead.take() {
            let _ = h.join();
        }
    }
}

impl Iterator for RangeIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(kv) = self.batch.next() {
                return Some(Ok(kv));
            }
            let from = self.cursor.take()?;
            if self.hi.as_ref().is_some_and(|h| from >= *h) {
                return None;
            }
            if let Some(h) = self.read_ahead.take() {
                let _ = h.join();
            }
            let env = self.tree.env();
            let st = self.tree.shared.state.read();
            if let Err(e) = self.tree.check_complete() {
                return Some(Err(e));
            }
            let scanned = st.scan_leaf(env, &from, self.hi.as_deref());
            st.evict_clean(env);
            if let Ok((_, next)) = &scanned {
                self.read_ahead =
                    read_ahead::next_leaf(&self.tree, &st, next.as_deref(), self.hi.as_deref());
            }
            drop(st);
            match scanned {
                Ok((batch, next)) => {
                    self.batch = batch.into_iter();
                    self.cursor = next;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
