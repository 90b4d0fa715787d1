//! The node cache: nodes by block number, within a memory budget.
//!
//! Readers (holding the tree's read lock) look nodes up and load missing
//! nodes and partitions concurrently through the map's mutex and each
//! partition's `OnceLock`. The writer (holding the write lock) takes nodes
//! out, changes them and puts them back; nobody else can hold them then.
//! Accounting is by `Node::tally`, updated on every put and partition
//! load; eviction runs between operations (see `State::evict`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::drop_later::drop_later;
use crate::int_hash::IntMap;
use crate::node::{Node, Tally};
use crate::table::BlockNum;

#[derive(Debug)]
pub(crate) struct CacheEntry {
    pub node: Node,
    pub dirty: bool,
    /// Which contents of the node this is: a new one per put; kept when
    /// the entry is only cleaned or stripped of loaded partitions.
    pub version: u64,
    last_used: AtomicU64,
    /// When a scan last left the node behind (0: never); after its last
    /// use, the node is used up ([`CacheEntry::is_used_up`]).
    left_behind: AtomicU64,
    accounted: AtomicUsize,
    /// What the node counted for when it was put. Exact for as long as
    /// the entry is dirty: a dirty node is fully loaded, so no reader
    /// loads a partition into it, and it is never stripped.
    tally: Tally,
    /// May hold loaded partitions that are on disk (strippable): eviction
    /// checks this instead of scanning every partition of every node on
    /// every pass.
    strippable: AtomicBool,
    /// Loaded whole by a read-ahead, and no reader has arrived in it
    /// since ([`CacheEntry::take_read_ahead`]).
    read_ahead: AtomicBool,
}

impl CacheEntry {
    /// Has a scan left this node behind ([`Cache::used_up`]) after time
    /// `t` ([`Cache::now`])? A read-ahead asked for at `t` is then too
    /// late for it: the scan it ran ahead of has already been through the
    /// node (reading it itself), and loading it again would read it twice.
    pub fn left_behind_since(&self, t: u64) -> bool {
        self.left_behind.load(Ordering::Relaxed) > t
    }

    /// Has a scan left this node behind with no use since
    /// ([`Cache::used_up`])?
    fn is_used_up(&self) -> bool {
        self.left_behind_since(self.last_used.load(Ordering::Relaxed))
    }

    /// Marks the node as loaded by a read-ahead, for the reader that
    /// arrives in it first ([`super::sweep::Sweep`]).
    pub fn mark_read_ahead(&self) {
        self.read_ahead.store(true, Ordering::Relaxed);
    }

    /// Is this the first reader to arrive in a node a read-ahead loaded?
    /// A plain load first: readers of a leaf loaded long ago do not all
    /// write the flag.
    pub fn take_read_ahead(&self) -> bool {
        self.read_ahead.load(Ordering::Relaxed) && self.read_ahead.swap(false, Ordering::Relaxed)
    }

    /// The bytes this entry counts for in the cache's budget.
    pub fn mem_bytes(&self) -> usize {
        self.accounted.load(Ordering::Relaxed)
    }

    /// The node's content bytes ([`Node::content_bytes`]), from its tally
    /// while that is exact (dirty) instead of a pass over its partitions.
    pub fn content_bytes(&self) -> usize {
        if self.dirty {
            debug_assert_eq!(self.tally.content, self.node.content_bytes());
            self.tally.content
        } else {
            self.node.content_bytes()
        }
    }
}

impl Clone for CacheEntry {
    fn clone(&self) -> Self {
        CacheEntry {
            node: self.node.clone(),
            dirty: self.dirty,
            version: self.version,
            last_used: AtomicU64::new(self.last_used.load(Ordering::Relaxed)),
            left_behind: AtomicU64::new(self.left_behind.load(Ordering::Relaxed)),
            accounted: AtomicUsize::new(self.accounted.load(Ordering::Relaxed)),
            tally: self.tally,
            strippable: AtomicBool::new(self.strippable.load(Ordering::Relaxed)),
            read_ahead: AtomicBool::new(self.read_ahead.load(Ordering::Relaxed)),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Cache {
    map: Mutex<IntMap<BlockNum, Arc<CacheEntry>>>,
    bytes: AtomicUsize,
    dirty_bytes: AtomicUsize,
    clock: AtomicU64,
    /// Nodes a scan left behind that have left the cache since, with
    /// when the scan left them, the last [`LEFT_BEHIND_GONE`] of them: a
    /// read-ahead thread that starts late must still see that the scan
    /// has been through its leaf ([`Cache::left_behind_since`]). Without
    /// this, a leaf a scan read itself, left behind and eviction dropped
    /// whole (the first thing eviction takes) looked to a read-ahead
    /// thread that got the CPU only then like a leaf nobody had read, and
    /// it read it a second time (the io_counts scan tests, once in a few
    /// dozen runs on a loaded machine).
    left_behind_gone: Mutex<VecDeque<(BlockNum, u64)>>,
}

/// How many evicted nodes [`Cache::left_behind_since`] remembers: a
/// scan's read-ahead runs a few leaves ahead of it, so a late thread's
/// leaf is among the last few the scan left.
const LEFT_BEHIND_GONE: usize = 64;

impl Cache {
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes.load(Ordering::Relaxed)
    }

    /// The time now: every later use is later ([`Cache::tick`]).
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    /// The time of an event (a use, a scan leaving a node behind): counts
    /// up from 1, after every time [`Cache::now`] gave before.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn get(&self, b: BlockNum) -> Option<Arc<CacheEntry>> {
        let e = self.map.lock().get(&b).cloned()?;
        e.last_used.store(self.tick(), Ordering::Relaxed);
        Some(e)
    }

    /// A scan has gone past node `b` and will not come back: it goes
    /// first in [`Cache::lru_order`], before any node in use, leaf or
    /// internal. Otherwise the leaves a scan's read-ahead loaded, not yet
    /// reached, would be older than the leaves it has just been through,
    /// and internal nodes it has left (with every buffer it loaded on the
    /// way) would go only after every leaf: eviction took leaves read
    /// ahead, which were then read a second time (engine-compare's cold
    /// full scan, with internal nodes' buffers filling half of the
    /// cache: 199 leaf reads for 130 leaves, session 17).
    pub fn used_up(&self, b: BlockNum) {
        if let Some(e) = self.map.lock().get(&b) {
            e.left_behind.store(self.tick(), Ordering::Relaxed);
        }
    }

    /// Has a scan left node `b` behind ([`Cache::used_up`]) after time
    /// `t`, whether `b` is still cached or was evicted since
    /// ([`CacheEntry::left_behind_since`])?
    pub fn left_behind_since(&self, b: BlockNum, t: u64) -> bool {
        if let Some(e) = self.peek(b) {
            return e.left_behind_since(t);
        }
        self.left_behind_gone
            .lock()
            .iter()
            .rev()
            .find(|(gone, _)| *gone == b)
            .is_some_and(|(_, left)| *left > t)
    }

    /// Nodes a scan has left behind ([`Cache::used_up`]) and nobody has
    /// used since, with their dirty flags.
    pub fn used_up_blocks(&self) -> Vec<(BlockNum, bool)> {
        self.map
            .lock()
            .iter()
            .filter(|(_, e)| e.is_used_up())
            .map(|(b, e)| (*b, e.dirty))
            .collect()
    }

    /// The cached entry, without counting as a use (write-back looks at
    /// nodes without making them recent).
    pub fn peek(&self, b: BlockNum) -> Option<Arc<CacheEntry>> {
        self.map.lock().get(&b).cloned()
    }

    /// Is `entry` still the one cached for `b` (not replaced since)?
    pub fn is_current(&self, b: BlockNum, entry: &Arc<CacheEntry>) -> bool {
        self.map
            .lock()
            .get(&b)
            .is_some_and(|e| Arc::ptr_eq(e, entry))
    }

    /// Node `b` was written as it is: it becomes clean where it is, keeping
    /// its place in the LRU order; `set_places` records where its
    /// partitions went, so they can be dropped and read back.
    pub fn mark_clean(&self, b: BlockNum, set_places: impl FnOnce(&mut Node)) {
        let mut map = self.map.lock();
        let Some(e) = map.get_mut(&b) else {
            return;
        };
        if !e.dirty {
            return;
        }
        let size = e.accounted.load(Ordering::Relaxed);
        let before = dict_len(&e.node);
        // The written image's dictionary replaces the one the node had:
        // the entry's count moves by the difference.
        let clean = |entry: &mut CacheEntry| {
            set_places(&mut entry.node);
            entry.dirty = false;
            let after = dict_len(&entry.node);
            entry.tally.mem = entry.tally.mem + after - before;
            entry
                .accounted
                .store(size + after - before, Ordering::Relaxed);
        };
        match Arc::get_mut(e) {
            Some(entry) => clean(entry),
            None => {
                // A reader still holds the entry: it keeps its copy.
                let mut copy = (**e).clone();
                clean(&mut copy);
                *e = Arc::new(copy);
            }
        }
        e.strippable.store(true, Ordering::Relaxed);
        self.bytes.fetch_add(dict_len(&e.node), Ordering::Relaxed);
        self.bytes.fetch_sub(before, Ordering::Relaxed);
        self.dirty_bytes.fetch_sub(size, Ordering::Relaxed);
    }

    /// The version of node `b`'s cached contents and whether they are
    /// dirty.
    pub fn version(&self, b: BlockNum) -> Option<(u64, bool)> {
        self.map.lock().get(&b).map(|e| (e.version, e.dirty))
    }

    pub fn contains(&self, b: BlockNum) -> bool {
        self.map.lock().contains_key(&b)
    }

    /// Is `b` cached, fully loaded and already dirty? Then a message can
    /// go straight into it at no I/O cost: it is written back anyway.
    /// (A clean child is not cheap: dirtying it for one small message
    /// would cost a whole node write, the cost buffering exists to avoid.
    /// Every dirty node is fully loaded: the writer changes only fully
    /// loaded nodes, and a dirty one is never stripped.)
    pub fn is_cheap_target(&self, b: BlockNum) -> bool {
        self.map.lock().get(&b).is_some_and(|e| {
            debug_assert!(!e.dirty || e.node.is_fully_loaded());
            e.dirty
        })
    }

    /// Inserts a node (a reader's load, or the writer's put).
    pub fn put(&self, b: BlockNum, node: Node, dirty: bool) -> Arc<CacheEntry> {
        let tally = node.tally();
        self.insert(b, self.account(node, dirty, tally))
    }

    /// Inserts a dirty node with its tally, which the writer kept as it
    /// changed it ([`Cache::take_tallied`]) or counted already: a leaf of
    /// hundreds of basements that took a few messages is not visited
    /// whole to count it again.
    pub fn put_tallied(&self, b: BlockNum, node: Node, tally: Tally) -> Arc<CacheEntry> {
        debug_assert_eq!(tally, node.tally(), "a kept tally went stale");
        self.insert(b, self.account(node, true, tally))
    }

    fn insert(&self, b: BlockNum, entry: Arc<CacheEntry>) -> Arc<CacheEntry> {
        if let Some(old) = self.map.lock().insert(b, entry.clone()) {
            self.unaccount(&old);
        }
        entry
    }

    /// The cached entry of `b` if there is one, else `node` put in clean:
    /// for a reader that read a header while another thread may have
    /// cached the node meanwhile (a read-ahead thread, whole), whose entry
    /// must not be replaced by the bare header.
    pub fn put_if_absent(&self, b: BlockNum, node: Node) -> Arc<CacheEntry> {
        let mut map = self.map.lock();
        if let Some(e) = map.get(&b) {
            e.last_used.store(self.tick(), Ordering::Relaxed);
            return e.clone();
        }
        let tally = node.tally();
        let entry = self.account(node, false, tally);
        map.insert(b, entry.clone());
        entry
    }

    /// A new entry for `node` (which counts for `tally`), counted in the
    /// cache's bytes.
    fn account(&self, node: Node, dirty: bool, tally: Tally) -> Arc<CacheEntry> {
        let size = tally.mem;
        let now = self.tick();
        let strippable = !dirty && node.has_droppable_parts();
        let entry = Arc::new(CacheEntry {
            node,
            dirty,
            version: now,
            last_used: AtomicU64::new(now),
            left_behind: AtomicU64::new(0),
            accounted: AtomicUsize::new(size),
            tally,
            strippable: AtomicBool::new(strippable),
            read_ahead: AtomicBool::new(false),
        });
        self.bytes.fetch_add(size, Ordering::Relaxed);
        if dirty {
            self.dirty_bytes.fetch_add(size, Ordering::Relaxed);
        }
        entry
    }

    /// A reader loaded one more partition of node `b`. Counted only while
    /// that entry is the cached one: an entry evicted or replaced in the
    /// meantime was already unaccounted, and counting it again would leak
    /// budget for good.
    pub fn grew(&self, b: BlockNum, entry: &CacheEntry, added: usize) {
        let map = self.map.lock();
        if map
            .get(&b)
            .is_some_and(|e| std::ptr::eq(Arc::as_ptr(e), entry))
        {
            entry.accounted.fetch_add(added, Ordering::Relaxed);
            entry.strippable.store(true, Ordering::Relaxed);
            self.bytes.fetch_add(added, Ordering::Relaxed);
        }
    }

    /// Drops the loaded partitions of a clean node and keeps its header,
    /// so the next query on it reads one partition and not the header
    /// again. Returns false (and does nothing) for a dirty node or one
    /// with nothing to drop.
    pub fn strip(&self, b: BlockNum) -> bool {
        let mut map = self.map.lock();
        let Some(e) = map.get_mut(&b) else {
            return false;
        };
        if e.dirty || !e.strippable.load(Ordering::Relaxed) {
            return false;
        }
        if !e.node.has_droppable_parts() {
            e.strippable.store(false, Ordering::Relaxed);
            return false;
        }
        if let Some(entry) = Arc::get_mut(e) {
            // Nobody else holds the entry (readers clone it under the map
            // lock, which we hold): unload in place, no header copy.
            let before = entry.accounted.load(Ordering::Relaxed);
            // Freed on the other core, and not under the map's lock.
            drop_later(entry.node.unload_stored_parts());
            entry.strippable.store(false, Ordering::Relaxed);
            entry.tally = entry.node.tally();
            let after = entry.tally.mem.min(before);
            entry.accounted.store(after, Ordering::Relaxed);
            self.bytes.fetch_sub(before - after, Ordering::Relaxed);
            return true;
        }
        let node = e.node.without_stored_parts();
        let tally = node.tally();
        let size = tally.mem;
        let entry = Arc::new(CacheEntry {
            node,
            dirty: false,
            version: e.version,
            last_used: AtomicU64::new(e.last_used.load(Ordering::Relaxed)),
            left_behind: AtomicU64::new(e.left_behind.load(Ordering::Relaxed)),
            accounted: AtomicUsize::new(size),
            tally,
            strippable: AtomicBool::new(false),
            // Stripped: no longer whole, a reader arriving loads again.
            read_ahead: AtomicBool::new(false),
        });
        let old = map.insert(b, entry).expect("looked up above");
        drop(map);
        self.unaccount(&old);
        self.bytes.fetch_add(size, Ordering::Relaxed);
        true
    }

    /// Removes a node (the writer's take, or eviction). Returns it with its
    /// dirty flag.
    pub fn take(&self, b: BlockNum) -> Option<(Node, bool)> {
        self.take_tallied(b)
            .map(|(node, kept)| (node, kept.is_some()))
    }

    /// [`Cache::take`], with the node's tally if it is dirty (and so
    /// fully loaded, its tally exact): the writer keeps it up to date as
    /// it changes the node and puts it back with [`Cache::put_tallied`].
    pub fn take_tallied(&self, b: BlockNum) -> Option<(Node, Option<Tally>)> {
        let e = self.remove(b)?;
        Some((e.node, e.dirty.then_some(e.tally)))
    }

    /// Removes `b`'s entry from the map and the accounts.
    fn remove(&self, b: BlockNum) -> Option<CacheEntry> {
        let e = self.map.lock().remove(&b)?;
        self.unaccount(&e);
        Some(Arc::try_unwrap(e).unwrap_or_else(|shared| (*shared).clone()))
    }

    /// Removes a node for good (eviction, a deleted node), remembering
    /// when a scan left it behind if one did ([`Cache::left_behind_since`]).
    /// Returns it with its dirty flag. A writer's [`Cache::take`], which
    /// puts the node back, does not count.
    pub fn evict(&self, b: BlockNum) -> Option<(Node, bool)> {
        let e = self.remove(b)?;
        let left = e.left_behind.load(Ordering::Relaxed);
        if left > 0 {
            let mut gone = self.left_behind_gone.lock();
            if gone.len() == LEFT_BEHIND_GONE {
                gone.pop_front();
            }
            gone.push_back((b, left));
        }
        Some((e.node, e.dirty))
    }

    fn unaccount(&self, e: &CacheEntry) {
        let size = e.accounted.load(Ordering::Relaxed);
        self.bytes.fetch_sub(size, Ordering::Relaxed);
        if e.dirty {
            self.dirty_bytes.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// Drops a node without returning it ([`Cache::evict`]).
    pub fn discard(&self, b: BlockNum) {
        self.evict(b);
    }

    /// How many cached nodes are dirty (no list built, nothing sorted).
    pub fn dirty_count(&self) -> usize {
        self.map.lock().values().filter(|e| e.dirty).count()
    }

    /// Block numbers of dirty nodes, in order: a checkpoint must place
    /// nodes the same way every run, so a seed reproduces a crash exactly.
    pub fn dirty_blocks(&self) -> Vec<BlockNum> {
        let mut v: Vec<BlockNum> = self
            .map
            .lock()
            .iter()
            .filter(|(_, e)| e.dirty)
            .map(|(b, _)| *b)
            .collect();
        v.sort_unstable();
        v
    }

    /// Cached blocks in the order eviction should give them up: nodes a
    /// scan has left behind ([`Cache::used_up`]), then leaves before
    /// internal nodes, each least recently used first. Every
    /// query and every flush goes through internal nodes, which are few;
    /// a leaf is revisited only when its key range is. Random inserts
    /// (engine-compare, 48 MiB cache): 166k/s in plain LRU order, 177-179k
    /// with leaves first, once internal nodes' buffers stayed frozen and
    /// compact in memory (in session 11, with buffers opened into maps at
    /// twice their size, leaves first made no difference).
    pub fn lru_order(&self) -> Vec<(BlockNum, bool)> {
        let map = self.map.lock();
        let mut v: Vec<(u64, BlockNum, bool)> = map
            .iter()
            .map(|(b, e)| {
                // Times count up from one (zero: used up, first whatever
                // its height): the top bit is free.
                let key = if e.is_used_up() {
                    0
                } else {
                    (u64::from(e.node.height > 0) << 63) | e.last_used.load(Ordering::Relaxed)
                };
                (key, *b, e.dirty)
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, b, d)| (b, d)).collect()
    }
}

/// Bytes of `node`'s dictionary (counted in its header's memory).
fn dict_len(node: &Node) -> usize {
    node.dict.as_ref().map_or(0, |d| d.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(height: u8) -> Node {
        Node {
            height,
            ..Node::empty_leaf(Vec::new())
        }
    }

    /// Eviction order: nodes a scan left behind (any height), then leaves,
    /// then internal nodes, each least recently used first; a use after
    /// the scan left a node puts it back in line.
    #[test]
    fn nodes_left_behind_go_first_then_leaves_then_internal_nodes() {
        let cache = Cache::default();
        cache.put(1, node(0), false);
        cache.put(2, node(1), false);
        cache.put(3, node(0), false);
        cache.put(4, node(1), false);
        cache.put(5, node(0), false);
        cache.get(1);
        cache.used_up(4);
        cache.used_up(5);
        let order = |c: &Cache| {
            c.lru_order()
                .into_iter()
                .map(|(b, _)| b)
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&cache), [4, 5, 3, 1, 2]);
        assert_eq!(cache.used_up_blocks().len(), 2);
        cache.get(5);
        assert_eq!(order(&cache), [4, 3, 1, 5, 2]);
    }

    /// A read-ahead asked for before a scan left a node behind is too
    /// late for it; one asked for afterwards (a second reader) is not.
    #[test]
    fn left_behind_is_told_apart_from_asked_before() {
        let cache = Cache::default();
        let entry = cache.put(7, node(0), false);
        let before = cache.now();
        assert!(!entry.left_behind_since(before));
        cache.used_up(7);
        assert!(entry.left_behind_since(before));
        let after = cache.now();
        assert!(!entry.left_behind_since(after));
    }

    /// A node a scan left behind is still known as left behind after
    /// eviction took it, until a newer entry for the block is put; the
    /// memory of evicted nodes is bounded.
    #[test]
    fn left_behind_outlives_eviction() {
        let cache = Cache::default();
        cache.put(7, node(0), false);
        cache.put(8, node(0), false);
        let before = cache.now();
        cache.used_up(7);
        cache.discard(7);
        cache.discard(8);
        assert!(cache.left_behind_since(7, before));
        assert!(!cache.left_behind_since(8, before), "never left behind");
        assert!(!cache.left_behind_since(7, cache.now()));
        cache.put(7, node(0), false);
        assert!(!cache.left_behind_since(7, before), "a new entry");
        cache.discard(7);
        for b in 100..100 + LEFT_BEHIND_GONE as BlockNum {
            cache.put(b, node(0), false);
            cache.used_up(b);
            cache.discard(b);
        }
        assert!(cache.left_behind_since(100, before));
        cache.put(1_000, node(0), false);
        cache.used_up(1_000);
        cache.discard(1_000);
        assert!(!cache.left_behind_since(100, before), "forgotten");
        assert_eq!(cache.left_behind_gone.lock().len(), LEFT_BEHIND_GONE);
    }
}
