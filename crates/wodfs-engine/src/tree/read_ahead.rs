//! Read-ahead of whole leaves on threads of their own, so that a reader
//! going through a key range finds the next leaves in the cache instead
//! of waiting for one device read at a time.
//!
//! Two users: the engine's own scans (a [`super::RangeIter`] or
//! `visit_range` loads the next leaf while its caller works through the
//! current one, and waits for it), and callers that know what they will
//! read next without holding a scan open ([`Tree::read_ahead`]: a file
//! read sequentially by one request after another). The second kind is
//! not waited for by the reader that asked; so that the scan that later
//! reaches such a leaf does not read it a second time, the leaves being
//! loaded are listed in [`Loading`], and a scan waits for one it finds
//! there instead of reading it itself.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::state::{Env, State};
use super::Tree;
use crate::table::BlockNum;

/// Leaves smaller than this are not worth a read-ahead thread.
pub(crate) const READ_AHEAD_MIN_NODE_BYTES: usize = 256 << 10;

/// Detached read-ahead threads allowed at once: each reads one leaf at a
/// time, so this is the device queue depth read-ahead adds. A cold 4 GiB
/// file read 1 MiB at a time (session 14): two, each reading a leaf's
/// header and then its partitions, left the reader waiting for a leaf a
/// third of its time; four reading whole leaves (see [`State::read_whole`]
/// and [`State::prefetch`]) ran 1,110-1,583 MiB/s against
/// 886-980.
const DETACHED_MAX: usize = 4;

/// Leaves one [`Tree::read_ahead`] call loads at most: a call per request,
/// so a reader's calls keep several threads busy.
const READ_AHEAD_LEAVES: usize = 1;

/// Leaves [`Tree::read_ahead`] looks through for one to load before it
/// gives up: its callers ask for 16 MiB ahead, four leaves of the default
/// size, and smaller leaves hold more of them.
const READ_AHEAD_LOOK_LEAVES: usize = 16;

/// Leaves past the next one a scan starts loading on detached threads
/// (within [`DETACHED_MAX`]). engine-compare's cold full scan of 3.5 M
/// records: 4.0-4.5 M records/s with the next leaf alone read ahead, 5.4
/// M with one more, 5.7-5.8 M with two more, no better with three.
const SCAN_DETACHED_LEAVES: usize = 2;

/// How many leaves a read-ahead loads, and for whom.
#[derive(Clone, Copy, Debug)]
struct Want {
    /// Leaves to load at most.
    leaves: usize,
    /// `leaves` counts leaves this read-ahead loads: those already cached
    /// or being loaded are passed over. For a reader that asks again at
    /// every request (a file read 1 MiB at a time): each call reaches past
    /// what earlier calls loaded instead of finding the next leaf there
    /// and stopping, so the device stays [`READ_AHEAD_LEAVES`] leaves
    /// ahead of the reader. Otherwise `leaves` counts leaves looked at.
    past_loaded: bool,
    /// When the reader asked ([`super::cache::Cache::now`]): a leaf a scan
    /// has left behind since is passed over, the reader is past it.
    asked_at: u64,
}

/// Leaves being read whole right now (by a read-ahead thread or a scan),
/// and internal nodes whose header a thread is reading
/// ([`State::node_for_read`]).
#[derive(Debug, Default)]
pub(crate) struct Loading {
    blocks: Mutex<HashSet<BlockNum>>,
    done: Condvar,
    /// Detached read-ahead threads running.
    detached: AtomicUsize,
    /// Readers going through the leaves in key order, a small read at a
    /// time.
    pub sweep: super::sweep::Sweep,
}

impl Loading {
    /// Marks `b` as being loaded by the caller (a leaf read whole, or an
    /// internal node's header) until the returned claim is dropped; `None`
    /// if another thread is loading it. A holder never waits for the
    /// state's lock, a condition or another claim while it holds one, so a
    /// thread waiting for a claim (under the read lock, or under the write
    /// lock, where nobody else can hold one) always sees it released.
    pub fn claim(&self, b: BlockNum) -> Option<Claim<'_>> {
        // Not `then_some`: it would build a claim on failure too, whose
        // drop releases the other thread's.
        let claimed = self.blocks.lock().insert(b);
        claimed.then(|| Claim { loading: self, b })
    }

    /// Is a thread loading `b` right now?
    pub fn is_loading(&self, b: BlockNum) -> bool {
        self.blocks.lock().contains(&b)
    }

    /// Waits while `b` is being loaded.
    pub fn wait_for(&self, b: BlockNum) {
        let mut blocks = self.blocks.lock();
        while blocks.contains(&b) {
            self.done.wait(&mut blocks);
        }
    }
}

/// A node being loaded; see [`Loading::claim`]. Dropping it (however the
/// load ended) wakes the threads waiting for the node.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    loading: &'a Loading,
    b: BlockNum,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.loading.blocks.lock().remove(&self.b);
        self.loading.done.notify_all();
    }
}

impl State {
    /// Is leaf `b` cached whole, or being loaded by a read-ahead thread?
    /// Either way a read-ahead has nothing to do for it. Counts as a use
    /// of the leaf, on purpose: a reader will want it soon, and eviction
    /// takes leaves first, in LRU order. A leaf loaded ahead is older than
    /// the leaves the reader has just been through, and could be evicted
    /// before the reader reached it, then read again.
    fn leaf_loaded(&self, env: Env<'_>, b: BlockNum) -> bool {
        env.loading.is_loading(b) || self.cache.get(b).is_some_and(|e| e.node.is_fully_loaded())
    }

    /// Can the cache take one more leaf without going over its budget?
    /// If not, makes room by dropping what eviction takes first anyway,
    /// the loaded partitions of nodes a scan has left behind
    /// ([`super::cache::Cache::used_up`]), and nothing else. A leaf read
    /// ahead into a full cache is what eviction takes next after those (a
    /// leaf read ahead is the least recently used leaf until its reader
    /// reaches it), and its reader then reads it a second time.
    fn make_room_for_leaf(&self, env: Env<'_>) -> bool {
        let (node_max, _) = super::write::budget_split(env.cfg.cache_bytes);
        let room = || self.cache.bytes() + env.cfg.node_bytes <= node_max;
        room() || self.strip_clean(env, &self.cache.used_up_blocks(), room)
    }

    /// Where the first leaf holding keys of `[from, hi)` that
    /// [`State::prefetch`] would load starts (`from` itself if that is
    /// the first leaf), looking at most `leaves` leaves far; `None` if all
    /// of those are loaded or being loaded, or if the walk meets an error
    /// (left for the scan to meet and report). Walks internal nodes only, so
    /// the caller can decide on the spot whether a read-ahead thread is
    /// worth starting: a thread started per request only to find the
    /// leaves loaded cost a sequential file read 4 % of its request
    /// thread (session 16).
    fn first_unloaded_leaf(
        &self,
        env: Env<'_>,
        from: &[u8],
        hi: Option<&[u8]>,
        leaves: usize,
    ) -> Option<Vec<u8>> {
        let mut from = from.to_vec();
        for _ in 0..leaves {
            let (b, bounds) = self.leaf_for(env, &from).ok()?;
            if !self.leaf_loaded(env, b) {
                return Some(from);
            }
            match bounds.hi {
                Some(next) if hi.is_none_or(|h| next.as_slice() < h) => from = next,
                _ => return None,
            }
        }
        None
    }

    /// Loads whole, into the cache, up to `leaves` leaves holding keys of
    /// `[from, hi)` that are not cached whole and not being loaded by
    /// another thread. Errors are left for the scan itself to meet and
    /// report.
    pub fn prefetch_leaves(&self, env: Env<'_>, from: &[u8], hi: Option<&[u8]>, leaves: usize) {
        let want = Want {
            leaves,
            past_loaded: false,
            asked_at: self.cache.now(),
        };
        self.prefetch(env, from, hi, want);
    }

    /// [`State::prefetch_leaves`], as `want` says.
    fn prefetch(&self, env: Env<'_>, from: &[u8], hi: Option<&[u8]>, want: Want) {
        let mut budget = want.leaves;
        let mut from = from.to_vec();
        while budget > 0 {
            // The descent binding uses; a key outside the tree's frames
            // (an error) is left for the scan to report.
            let Ok((b, bounds)) = self.leaf_for(env, &from) else {
                return;
            };
            let mut loaded = false;
            // Looked at under the claim: no other thread loads it meanwhile.
            // A leaf the reader has gone past since it asked is neither
            // loaded again nor made recent.
            let passed = || self.cache.left_behind_since(b, want.asked_at);
            if let Some(_loading) = env.loading.claim(b).filter(|_| !passed()) {
                match self.cache.get(b) {
                    Some(entry) if !entry.node.is_fully_loaded() => {
                        loaded = true;
                        if let Ok(node) = self.load_all(env, b, entry.node.clone()) {
                            self.cache.put(b, node, entry.dirty).mark_read_ahead();
                        }
                    }
                    Some(_) => {}
                    // Not cached at all: header and partitions in one read.
                    None => {
                        loaded = true;
                        if let Ok(node) = self.read_whole(env, b) {
                            self.cache.put(b, node, false).mark_read_ahead();
                        }
                    }
                }
            }
            if loaded || !want.past_loaded {
                budget -= 1;
            }
            match bounds.hi {
                Some(next) if hi.is_none_or(|h| next.as_slice() < h) => from = next,
                _ => return,
            }
        }
    }
}

/// Starts loading, on a thread the caller joins, the leaf that starts at
/// `next` (if the scan goes on there and leaves are large enough to be
/// worth a thread), and the leaf after it on a detached thread that the
/// scan does not join (it waits for that leaf's claim if it gets there
/// first), and so on for [`SCAN_DETACHED_LEAVES`] leaves. Several leaf
/// reads are then in flight while the caller works through the current
/// leaf instead of one: with one, engine-compare's cold full scan waited
/// for the device most of its time, on a device that reads several
/// times faster at a greater queue depth.
///
/// When those leaves are all loaded or being loaded, no thread is
/// started: the caller (holding the state's read lock as `st`) looks
/// first. A cold sequential file read reaches every leaf boundary with
/// the next leaves loaded by [`Tree::read_ahead`], and a thread started
/// and joined only to find that cost its request thread about half a
/// millisecond per leaf (session 16). Otherwise the thread starts the
/// loads as before, all of them: deciding leaf by leaf on the caller's
/// thread which to start made engine-compare's full scan read 30-50
/// leaves twice and run about 5.5 instead of 6 M records/s (session 16).
/// The double reads had another cause, found in session 17: eviction
/// took leaves read ahead before the leaves and buffers the scan had left
/// behind (now [`super::cache::Cache::used_up`]); deciding per leaf was
/// not tried again since.
///
/// A detached load that starts after the scan has been through its leaf
/// does nothing ([`Want::asked_at`]), and none starts
/// without room in the cache for its leaf.
pub(crate) fn next_leaf(
    tree: &Tree,
    st: &State,
    next: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<std::thread::JoinHandle<()>> {
    let next = next?;
    if tree.shared.cfg.node_bytes < READ_AHEAD_MIN_NODE_BYTES || hi.is_some_and(|h| next >= h) {
        return None;
    }
    // The next leaf and the ones the thread would start loads for.
    st.first_unloaded_leaf(tree.env(), next, hi, 1 + SCAN_DETACHED_LEAVES)?;
    // Before the scan goes on: a leaf it leaves behind after this is one
    // a late read-ahead thread must not load again.
    let asked_at = st.cache.now();
    let (tree, next, hi) = (tree.clone(), next.to_vec(), hi.map(<[u8]>::to_vec));
    Some(std::thread::spawn(move || {
        let env = tree.env();
        let st = tree.shared.state.read();
        let mut from = next.clone();
        for _ in 0..SCAN_DETACHED_LEAVES {
            let Ok((_, bounds)) = st.leaf_for(env, &from) else {
                break;
            };
            match bounds.hi {
                Some(after) if hi.as_ref().is_none_or(|h| after < *h) => {
                    let want = Want {
                        leaves: 1,
                        past_loaded: false,
                        asked_at,
                    };
                    tree.spawn_detached(&st, after.clone(), hi.clone(), want);
                    from = after;
                }
                _ => break,
            }
        }
        st.prefetch_leaves(env, &next, hi.as_deref(), 1);
    }))
}

impl Tree {
    /// Starts reading the next leaf for readers sweeping through the
    /// leaves in key order ([`super::sweep::Sweep`]), if one just arrived
    /// in a leaf that continues its walk; `st` is the state the reader
    /// read under. Loads one leaf: the first after the reader's that is
    /// neither cached whole nor being loaded.
    pub(super) fn continue_sweep(&self, st: &State) {
        let shared = &self.shared;
        let Some(from) = shared.loading.sweep.take_start() else {
            return;
        };
        if shared.cfg.node_bytes < READ_AHEAD_MIN_NODE_BYTES
            || shared.loading.detached.load(Ordering::Acquire) >= DETACHED_MAX
        {
            return;
        }
        if let Some(start) = st.first_unloaded_leaf(self.env(), &from, None, READ_AHEAD_LOOK_LEAVES)
        {
            let want = Want {
                leaves: 1,
                past_loaded: false,
                asked_at: st.cache.now(),
            };
            if self.spawn_detached(st, start, None, want) {
                shared.stats.add_sweep_read_ahead();
            }
        }
    }

    /// Starts loading into the cache, on a thread of its own, the first
    /// leaf holding keys of `[lo, hi)` that is neither cached whole nor
    /// being loaded, and returns at once.
    ///
    /// For a reader that reads a range piece by piece with calls of its
    /// own (a file read sequentially, one request at a time): the leaves
    /// after the piece it reads now are read from the device while it
    /// works, and a later scan that reaches one of them while it is still
    /// being read waits for that read instead of issuing another. Does
    /// nothing when leaves are small, when `DETACHED_MAX` read-ahead
    /// threads are already at work (the device has enough to do), or when
    /// the leaves within reach are loaded or being loaded (most calls of a
    /// sequential reader: it calls per request, and a leaf holds several
    /// requests' worth).
    pub fn read_ahead(&self, lo: &[u8], hi: &[u8]) {
        let shared = &self.shared;
        if shared.cfg.node_bytes < READ_AHEAD_MIN_NODE_BYTES
            || lo >= hi
            || shared.loading.detached.load(Ordering::Acquire) >= DETACHED_MAX
        {
            return;
        }
        let st = shared.state.read();
        if let Some(start) =
            st.first_unloaded_leaf(self.env(), lo, Some(hi), READ_AHEAD_LOOK_LEAVES)
        {
            let want = Want {
                leaves: READ_AHEAD_LEAVES,
                past_loaded: true,
                asked_at: st.cache.now(),
            };
            self.spawn_detached(&st, start, Some(hi.to_vec()), want);
        }
    }

    /// Waits until no read-ahead thread that nobody joins (started by
    /// [`Tree::read_ahead`], by a sweep, or by a scan for the leaves past
    /// its next) is at work. For callers that count device reads: such a
    /// thread reads while the caller that started it goes on, so without
    /// this its read lands in the count of whatever the caller does next.
    pub fn wait_for_read_ahead(&self) {
        while self.shared.loading.detached.load(Ordering::Acquire) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Loads the leaves `want` says from `lo` (below `hi`) into the cache
    /// on a thread nobody joins, unless [`DETACHED_MAX`] such threads run
    /// or the cache has no room for another leaf. Returns whether it
    /// started the thread.
    fn spawn_detached(&self, st: &State, lo: Vec<u8>, hi: Option<Vec<u8>>, want: Want) -> bool {
        if !st.make_room_for_leaf(self.env()) {
            return false;
        }
        let running = &self.shared.loading.detached;
        if running.fetch_add(1, Ordering::AcqRel) >= DETACHED_MAX {
            running.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let tree = self.clone();
        let spawned = std::thread::Builder::new()
            .name("wodfs-readahead".into())
            .spawn(move || {
                let _running = super::OnExit(|| {
                    tree.shared.loading.detached.fetch_sub(1, Ordering::AcqRel);
                });
                let env = tree.env();
                let st = tree.shared.state.read();
                // Again: the cache may have filled since.
                if st.make_room_for_leaf(env) {
                    st.prefetch(env, &lo, hi.as_deref(), want);
                }
            });
        if spawned.is_err() {
            // No thread (resource limits): the reads happen on demand.
            running.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }
}
