//! Engine counters: deterministic I/O and structure counts that tests
//! assert on (timings are not asserted anywhere).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $doc:literal),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Stats { $($name: AtomicU64,)* }

        /// A snapshot of the engine's counters since open.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct TreeStats { $(#[doc = $doc] pub $name: u64,)* }

        impl Stats {
            pub fn snapshot(&self) -> TreeStats {
                TreeStats { $($name: self.$name.load(Relaxed),)* }
            }
        }
    };
}

counters! {
    batches: "Write batches applied and logged (one log record each).",
    header_reads: "Node headers read from the device.",
    partition_reads: "Single partitions read from the device.",
    segment_reads: "Pieces of segmented buffers read alone by point queries (kept in the segment cache, not loaded into the node).",
    segment_hits: "Point queries that found their piece of a segmented buffer in the segment cache (no read).",
    node_reads: "Whole-node reads (all missing partitions in one request).",
    shared_node_reads: "Of those, leaves read for a reader whose basements were kept as slices of the one buffer read (all stored uncompressed), not copied out of it.",
    unshared_leaves: "Leaves read that way that the writer then took to change, giving their basements bytes of their own (a copy each).",
    flush_reads_ahead: "Of those, nodes a flush took from the flush read-ahead thread (read while the writer worked).",
    flush_read_ahead_asks: "Nodes queued for the flush read-ahead thread (those a flush did not take were read in vain, or dropped unread).",
    sweep_reads_ahead: "Read-ahead threads started for a reader sweeping the leaves a small read at a time (`tree::sweep`); each loads one leaf, unless the reader has been through it by the time the thread runs.",
    node_writes: "Nodes written (redirect-on-write).",
    node_bytes_written: "Bytes of nodes written.",
    unlocked_writes: "Of those, nodes serialized without the tree's lock (write-back thread, checkpoint).",
    stale_writes: "Nodes serialized without the lock and then dropped: changed meanwhile.",
    stale_bytes_written: "Bytes of those that reached the device before they were dropped (not in `node_bytes_written`).",
    flushes: "Buffers flushed to a child.",
    leaf_splits: "Leaf splits.",
    internal_splits: "Internal node splits.",
    merges: "Sibling merges.",
    prunes: "Children dropped unread because a range delete covered them.",
    range_deletes: "Range delete messages put into the tree (by a range delete, or by a range move for its destination and a source of many keys).",
    skip_downs: "Messages that skipped an empty buffer to a cached child.",
    evictions: "Nodes evicted from the cache.",
    checkpoints: "Checkpoints completed.",
    recoveries: "Opens that replayed the log.",
    replayed_records: "Log records replayed at open.",
}

impl Stats {
    pub fn add_batch(&self) {
        self.batches.fetch_add(1, Relaxed);
    }
    pub fn add_header_read(&self) {
        self.header_reads.fetch_add(1, Relaxed);
    }
    pub fn add_partition_read(&self) {
        self.partition_reads.fetch_add(1, Relaxed);
    }
    pub fn add_segment_read(&self) {
        self.segment_reads.fetch_add(1, Relaxed);
    }
    pub fn add_segment_hit(&self) {
        self.segment_hits.fetch_add(1, Relaxed);
    }
    pub fn add_node_read(&self) {
        self.node_reads.fetch_add(1, Relaxed);
    }
    pub fn add_shared_node_read(&self) {
        self.shared_node_reads.fetch_add(1, Relaxed);
    }
    pub fn add_unshared_leaf(&self) {
        self.unshared_leaves.fetch_add(1, Relaxed);
    }
    pub fn add_flush_read_ahead(&self) {
        self.flush_reads_ahead.fetch_add(1, Relaxed);
    }
    pub fn add_flush_read_ahead_ask(&self) {
        self.flush_read_ahead_asks.fetch_add(1, Relaxed);
    }
    pub fn add_sweep_read_ahead(&self) {
        self.sweep_reads_ahead.fetch_add(1, Relaxed);
    }
    pub fn add_node_write(&self, bytes: usize) {
        self.node_writes.fetch_add(1, Relaxed);
        self.node_bytes_written.fetch_add(bytes as u64, Relaxed);
    }
    pub fn add_unlocked_write(&self, bytes: usize) {
        self.add_node_write(bytes);
        self.unlocked_writes.fetch_add(1, Relaxed);
    }
    pub fn add_stale_write(&self, written_bytes: usize) {
        self.stale_writes.fetch_add(1, Relaxed);
        self.stale_bytes_written
            .fetch_add(written_bytes as u64, Relaxed);
    }
    pub fn add_flush(&self) {
        self.flushes.fetch_add(1, Relaxed);
    }
    pub fn add_leaf_split(&self) {
        self.leaf_splits.fetch_add(1, Relaxed);
    }
    pub fn add_internal_split(&self) {
        self.internal_splits.fetch_add(1, Relaxed);
    }
    pub fn add_merge(&self) {
        self.merges.fetch_add(1, Relaxed);
    }
    pub fn add_prune(&self) {
        self.prunes.fetch_add(1, Relaxed);
    }
    pub fn add_range_delete(&self) {
        self.range_deletes.fetch_add(1, Relaxed);
    }
    pub fn add_skip_down(&self) {
        self.skip_downs.fetch_add(1, Relaxed);
    }
    pub fn add_eviction(&self) {
        self.evictions.fetch_add(1, Relaxed);
    }
    pub fn add_replayed_record(&self) {
        self.replayed_records.fetch_add(1, Relaxed);
    }
    pub fn add_replayed(&self) {
        self.recoveries.fetch_add(1, Relaxed);
    }
    pub fn add_checkpoint(&self) {
        self.checkpoints.fetch_add(1, Relaxed);
    }
}
