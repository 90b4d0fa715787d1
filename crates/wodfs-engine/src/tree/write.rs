//! The write path: messages enter at the root, wait in buffers and move
//! down in batches.
//!
//! * A point message whose path below the root has empty buffers and
//!   cached, already dirty children skips down to the lowest such node
//!   (cheap: no I/O), so sequential inserts reach leaves directly.
//! * A range delete is split across the children it overlaps, clipped to
//!   each ("rangecast"); in a buffer it discards the older messages it
//!   covers ("Pac-Man", see `MsgBuffer`).
//! * When a node's buffers exceed the node size, the buffer of the child
//!   with the most pending bytes moves into that child, which may cascade.
//!   A child whose whole range a flushed range delete covers is dropped
//!   without being read (leaf pruning) and replaced by an empty one.
//! * Leaves split above the node size, internal nodes above the fanout;
//!   small siblings merge when both are cached (a merge never reads).
//!   Splits and merges are where lifts change.
//!
//! A node is taken out of the cache while it is changed and put back dirty;
//! any error in between leaves the in-memory tree incomplete, which is why
//! the handle poisons itself on a write-path error.

use super::cache::Cache;
use super::drop_later::drop_later;
use super::frame::{concat, rebase, separator, Bounds};
use super::state::{Env, State};
use crate::basement::Basement;
use crate::buffer::{ListRef, MsgBuffer};
use crate::error::{Error, Result};
use crate::format::frozen::FrozenBasement;
use crate::format::node::encode_node;
use crate::key_cmp::{head as key_head, headed_cmp, key_cmp};
use crate::msg::{Msn, PointMsg};
use crate::node::{Edge, Node, Part, PartSlot, Tally};
use crate::pivots::Pivots;
use crate::range_index::RangeIndex;
use crate::table::{BlockNum, Extent};

/// A flushed buffer of at least this many accounted bytes is freed on the
/// freeing thread ([`drop_later`]); a smaller one where it was applied.
const FREE_LATER_MIN_BYTES: usize = 64 << 10;

/// A message on its way in, with absolute keys.
#[derive(Clone, Debug)]
pub(crate) enum Msg {
    Point { key: Vec<u8>, msg: PointMsg },
    Range { lo: Vec<u8>, hi: Vec<u8>, msn: Msn },
}

impl Msg {
    fn msn(&self) -> Msn {
        match self {
            Msg::Point { msg, .. } => msg.msn,
            Msg::Range { msn, .. } => *msn,
        }
    }
}

/// New right siblings from a split: (absolute pivot, block).
type Splits = Vec<(Vec<u8>, BlockNum)>;

/// Bounds of child `i` of a node with bounds `nb`.
pub(crate) fn child_bounds(node: &Node, nb: &Bounds, i: usize) -> Bounds {
    let lo = if i == 0 {
        nb.lo.clone()
    } else {
        concat(&node.prefix, &node.pivots[i - 1])
    };
    let hi = if i + 1 == node.parts.len() {
        nb.hi.clone()
    } else {
        Some(concat(&node.prefix, &node.pivots[i]))
    };
    Bounds { lo, hi }
}

/// Whether the range deletes in `node`'s buffer for child `i` cover the
/// child's whole range: a flush then drops the child unread (leaf
/// pruning), and the flush read-ahead leaves it alone.
fn buffer_covers_child(node: &Node, bounds: &Bounds, i: usize) -> bool {
    let buf = node.buffer(i);
    if !buf.has_ranges() {
        return false;
    }
    let (lo, hi) = relative(&child_bounds(node, bounds, i), &node.prefix);
    buf.ranges.covers(&lo, hi.as_deref())
}

/// Bounds `b` relative to frame `prefix`.
fn relative(b: &Bounds, prefix: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (
        b.lo[prefix.len()..].to_vec(),
        b.hi.as_ref().map(|h| h[prefix.len()..].to_vec()),
    )
}

impl State {
    /// Applies one message to the tree.
    pub fn apply_msg(&mut self, env: Env<'_>, msg: Msg) -> Result<()> {
        if matches!(msg, Msg::Range { .. }) {
            env.stats.add_range_delete();
        }
        let root = self.root;
        let splits = self.push(env, root, &Bounds::all(), msg)?;
        self.grow_root(env, splits)?;
        self.shrink_root(env)
    }

    /// Applies a run of point messages (MSN order) to the tree, taking each
    /// node on their paths out of the cache once for the run instead of
    /// once per message.
    ///
    /// The run is routed in key order (a stable sort, so one key's
    /// messages keep their MSN order): each message then lands next to the
    /// one before it, in the same child and beside it in that child's
    /// buffer, whose B-tree paths stay in the CPU cache, and runs bound
    /// for one cheap child go down together. Under engine-compare's random
    /// inserts (batches of 10,000) the writer's CPU fell from 9.3-10.8 to
    /// 8.2-8.4 s and inserts rose from 254-301k to 323-334k per s.
    pub fn apply_points(&mut self, env: Env<'_>, mut msgs: Vec<Msg>) -> Result<()> {
        debug_assert!(msgs.iter().all(|m| matches!(m, Msg::Point { .. })));
        sort_by_key(&mut msgs);
        let root = self.root;
        let splits = self.push_points(env, root, &Bounds::all(), msgs)?;
        self.grow_root(env, splits)?;
        self.shrink_root(env)
    }

    /// [`Self::push`] for a run of point messages inside `bounds`. Each
    /// message is routed on its own (a split below changes the routing),
    /// but consecutive messages bound for the same cheap child go down
    /// together.
    fn push_points(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        bounds: &Bounds,
        msgs: Vec<Msg>,
    ) -> Result<Splits> {
        let (mut node, kept) = self.take_full_tallied(env, b)?;
        node.max_msn = node
            .max_msn
            .max(msgs.iter().map(Msg::msn).max().unwrap_or(0));
        if node.is_leaf() {
            let n = msgs.len();
            let buf = MsgBuffer::from_points(
                msgs.into_iter()
                    .filter_map(|m| match m {
                        Msg::Point { mut key, msg } => {
                            key.drain(..node.prefix.len());
                            Some((key, msg))
                        }
                        Msg::Range { .. } => None,
                    })
                    .collect(),
            );
            // A run merges into the basements it touches; a few messages
            // may open them instead (`Basement::apply_few`).
            let how = if n < 16 { Apply::Few } else { Apply::Merge };
            let change = apply_to_leaf(&mut node, buf, how, env.cfg.partition_bytes);
            return self.finish_leaf(env, b, node, bounds, change, kept);
        }
        let mut msgs = msgs.into_iter().peekable();
        // In key order (`apply_points`): usually the previous one's child.
        let mut i = 0;
        while let Some(m) = msgs.next() {
            let Msg::Point { mut key, msg } = m else {
                continue;
            };
            i = node.part_index_near(&key[node.prefix.len()..], i);
            let child = node.children[i].child;
            // A lone message skips down too: kept in the buffer instead,
            // random inserts spent less CPU but the file system wrote more
            // node bytes (Postmark +21 %), its metadata messages no longer
            // riding free into children written anyway.
            if node.buffer(i).is_empty() && self.is_skip_target(child) {
                let cb = child_bounds(&node, bounds, i);
                let mut group = vec![Msg::Point { key, msg }];
                while let Some(Msg::Point { key: next, .. }) = msgs.peek() {
                    if !cb.contains(next) {
                        break;
                    }
                    group.push(msgs.next().expect("peeked"));
                }
                for _ in 0..group.len() {
                    env.stats.add_skip_down();
                }
                let splits = self.push_points(env, child, &cb, group)?;
                self.integrate(&mut node, bounds, i, splits);
            } else {
                // Relative to this node's frame, shortened in place.
                key.drain(..node.prefix.len());
                node.buffer_mut(i).put_point(key, msg);
                self.flush_while_over(env, &mut node, bounds)?;
            }
        }
        self.flush_while_over(env, &mut node, bounds)?;
        self.finish_internal(env, b, node, bounds)
    }

    fn push(&mut self, env: Env<'_>, b: BlockNum, bounds: &Bounds, msg: Msg) -> Result<Splits> {
        let (mut node, kept) = self.take_full_tallied(env, b)?;
        node.max_msn = node.max_msn.max(msg.msn());
        if node.is_leaf() {
            let mut buf = MsgBuffer::default();
            match msg {
                Msg::Point { key, msg } => buf.put_point(key[node.prefix.len()..].to_vec(), msg),
                Msg::Range { lo, hi, msn } => {
                    let (rlo, rhi) = clip_relative(&node.prefix, bounds, &lo, &hi);
                    if rlo < rhi {
                        buf.put_range_delete(rlo, rhi, msn);
                    }
                }
            }
            // One message: opens the basement when it is being written
            // again (a stream), see `Basement::apply_few`.
            let change = apply_to_leaf(&mut node, buf, Apply::Few, env.cfg.partition_bytes);
            return self.finish_leaf(env, b, node, bounds, change, kept);
        }
        match msg {
            Msg::Point { key, msg } => {
                let rel = &key[node.prefix.len()..];
                let i = node.part_index(rel);
                let child = node.children[i].child;
                if node.buffer(i).is_empty() && self.is_skip_target(child) {
                    env.stats.add_skip_down();
                    let cb = child_bounds(&node, bounds, i);
                    let splits = self.push(env, child, &cb, Msg::Point { key, msg })?;
                    self.integrate(&mut node, bounds, i, splits);
                } else {
                    let rel = rel.to_vec();
                    node.buffer_mut(i).put_point(rel, msg);
                }
            }
            Msg::Range { lo, hi, msn } => {
                let (rlo, rhi) = clip_relative(&node.prefix, bounds, &lo, &hi);
                if rlo < rhi {
                    rangecast(&mut node, rlo, rhi, msn);
                }
            }
        }
        self.flush_while_over(env, &mut node, bounds)?;
        self.finish_internal(env, b, node, bounds)
    }

    /// Flushes `node`'s fullest buffers while they hold more than a node
    /// may: the node size, or [`root_buffer_bytes`] for the root (the
    /// only node of the tree's height).
    fn flush_while_over(&mut self, env: Env<'_>, node: &mut Node, bounds: &Bounds) -> Result<()> {
        let limit = self.buffer_limit(env, node);
        if node.buffer_bytes() > limit {
            self.read_ahead_flushes(env, node, bounds, None);
        }
        while node.buffer_bytes() > limit {
            let i = (0..node.parts.len())
                .max_by_key(|i| node.buffer(*i).bytes())
                .expect("internal nodes have children");
            self.flush_child(env, node, bounds, i)?;
        }
        Ok(())
    }

    /// What `node`'s buffers may hold before they are flushed: the node
    /// size, or [`root_buffer_bytes`] for the root (the only node of the
    /// tree's height).
    fn buffer_limit(&self, env: Env<'_>, node: &Node) -> usize {
        if node.height == self.height {
            root_buffer_bytes(env.cfg)
        } else {
            env.cfg.node_bytes
        }
    }

    /// Asks for the children that flushes out of `node` will take to be
    /// read ahead ([`super::flush_ahead`]), those not cached whole, in
    /// the order [`Self::flush_while_over`] takes them (fullest buffer
    /// first, while over the limit), with `incoming[j]` bytes more for
    /// child `j` that are about to be put.
    fn read_ahead_flushes(
        &self,
        env: Env<'_>,
        node: &Node,
        bounds: &Bounds,
        incoming: Option<&[usize]>,
    ) {
        let mut bytes: Vec<usize> = (0..node.parts.len())
            .map(|j| node.buffer(j).bytes() + incoming.map_or(0, |v| v[j]))
            .collect();
        let mut total: usize = bytes.iter().sum();
        let limit = self.buffer_limit(env, node);
        while total > limit {
            let Some((j, &most)) = bytes.iter().enumerate().max_by_key(|(_, b)| **b) else {
                return;
            };
            if most == 0 {
                return;
            }
            total -= most;
            bytes[j] = 0;
            // A child its buffer's range deletes cover is pruned unread
            // (`flush_child`): reading it ahead would undo leaf pruning.
            if buffer_covers_child(node, bounds, j) {
                continue;
            }
            let c = node.children[j].child;
            // A dirty node is always whole.
            if self
                .cache
                .peek(c)
                .is_some_and(|e| e.dirty || e.node.is_fully_loaded())
            {
                continue;
            }
            if let Some(e) = self.table.get(c) {
                if let Some(x) = e.loc {
                    if env.flush_ahead.ask(c, e.height, x) {
                        env.stats.add_flush_read_ahead_ask();
                    }
                }
            }
        }
    }

    /// Space reclaim: pushes buffered range deletes down from the root,
    /// level by level, until they cover whole subtrees, which are then
    /// pruned without being read; the space they held is released (and
    /// reusable after the next checkpoint). Costs one read per child a
    /// partly covering range delete is flushed into.
    /// At most `budget` flushes are spent (each may read one child).
    pub fn prune_covered(&mut self, env: Env<'_>, mut budget: usize) -> Result<()> {
        let root = self.root;
        let (mut node, dirty) = self.take_full(env, root)?;
        let changed = self.prune_covered_in(env, &mut node, &Bounds::all(), &mut budget)?;
        if changed {
            let splits = self.finish_internal(env, root, node, &Bounds::all())?;
            self.grow_root(env, splits)?;
            self.shrink_root(env)
        } else {
            self.put_clean(root, node, dirty);
            Ok(())
        }
    }

    fn prune_covered_in(
        &mut self,
        env: Env<'_>,
        node: &mut Node,
        bounds: &Bounds,
        budget: &mut usize,
    ) -> Result<bool> {
        if node.is_leaf() {
            return Ok(false);
        }
        let mut changed = false;
        let mut i = 0;
        while i < node.children.len() && *budget > 0 {
            let cb = child_bounds(node, bounds, i);
            let (lo, hi) = relative(&cb, &node.prefix);
            let buf = node.buffer(i);
            let covers = buf.ranges.covers(&lo, hi.as_deref());
            let has_ranges = !buf.ranges.is_empty();
            if covers || has_ranges {
                // Covered: pruned unread. Partly covered: the ranges move
                // down a level, where they may cover whole subtrees.
                self.flush_child(env, node, bounds, i)?;
                *budget -= 1;
                changed = true;
            }
            // Ranges that reached the level below earlier wait there too:
            // the child's header says whether any buffer holds one.
            if !covers
                && node.height > 1
                && i < node.children.len()
                && (has_ranges || self.may_hold_ranges(env, node.children[i].child)?)
            {
                let cb = child_bounds(node, bounds, i);
                let child = node.children[i].child;
                let (mut c, cdirty) = self.take_full(env, child)?;
                if self.prune_covered_in(env, &mut c, &cb, budget)? {
                    let splits = self.finish_internal(env, child, c, &cb)?;
                    self.integrate(node, bounds, i, splits);
                } else {
                    self.put_clean(child, c, cdirty);
                }
            }
            i += 1;
        }
        Ok(changed)
    }

    /// Can the subtree under internal node `b` hold range deletes in its
    /// buffers? Answered from headers (read if not cached; internal nodes
    /// are few), never from buffers or leaves.
    fn may_hold_ranges(&self, env: Env<'_>, b: BlockNum) -> Result<bool> {
        let entry = self.node_for_read(env, b)?;
        if entry.node.is_leaf() {
            return Ok(false);
        }
        let here = entry
            .node
            .parts
            .iter()
            .any(|p| match (p.data.get(), &p.summary) {
                (Some(Part::Buffer(buf)), _) => !buf.ranges.is_empty(),
                (Some(Part::Basement(_)), _) => false,
                (None, Some(sum)) => sum.has_ranges,
                (None, None) => true,
            });
        if here || entry.node.height == 1 {
            return Ok(here);
        }
        for e in &entry.node.children {
            if self.may_hold_ranges(env, e.child)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves buffer `i` of `node` into child `i`.
    pub(crate) fn flush_child(
        &mut self,
        env: Env<'_>,
        node: &mut Node,
        bounds: &Bounds,
        i: usize,
    ) -> Result<()> {
        env.stats.add_flush();
        let pruned = buffer_covers_child(node, bounds, i);
        let mut buf = std::mem::take(node.buffer_mut(i));
        let cb = child_bounds(node, bounds, i);
        let cprefix = cb.frame();
        let lift_len = cprefix.len() - node.prefix.len();
        if lift_len > 0 {
            buf.strip_key_prefix(lift_len);
        }
        if pruned {
            // Leaf pruning: everything below is older than this delete.
            env.stats.add_prune();
            let old = node.children[i].child;
            self.drop_subtree(env, old, node.height - 1)?;
            node.children[i].child = self.new_empty_subtree(node.height - 1, cprefix.clone());
        }
        let child = node.children[i].child;
        let splits = self.push_buffer(env, child, &cb, buf)?;
        self.integrate(node, bounds, i, splits);
        self.maybe_merge(env, node, bounds, i)?;
        // Each flush puts a dirty child (or a split's pieces) back in the
        // cache, and one batch can cascade into dozens of flushes: evicting
        // only when the batch is done let the cache hold several times its
        // budget meanwhile (engine-compare's random inserts at 8x the
        // memory limit: 19 flushes in one batch, heap peak 86 -> 124 MiB
        // for a 48 MiB cache, and the 192 MiB cgroup killed the process).
        if self.over_budget(env) {
            self.evict_during_flush(env);
        }
        Ok(())
    }

    /// Applies a buffer (keys relative to the child's frame) to a child.
    fn push_buffer(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        bounds: &Bounds,
        mut buf: MsgBuffer,
    ) -> Result<Splits> {
        let (mut node, kept) = self.take_full_tallied(env, b)?;
        node.max_msn = node.max_msn.max(buf.max_msn());
        if node.is_leaf() {
            let change = apply_to_leaf(&mut node, buf, Apply::Merge, env.cfg.partition_bytes);
            return self.finish_leaf(env, b, node, bounds, change, kept);
        }
        for (lo, r) in buf.ranges.iter() {
            rangecast(&mut node, lo.clone(), r.hi.clone(), r.msn);
        }
        // Into a frozen child buffer the messages go to its delta, not
        // decoding what it holds; a sorted merge into a new frozen buffer
        // would copy the whole buffer at every flush (tried earlier:
        // no faster).
        // The children this will flush are known before the messages
        // are put (about their share of the buffer's bytes each): their
        // reads start now, while the messages go in.
        // Each key's child is found once, here if the thread runs (the
        // keys are put below in the same order).
        let mut routes: Vec<u32> = Vec::new();
        if buf.key_count() > 0 && env.flush_ahead.runs() {
            routes.reserve(buf.key_count());
            let mut incoming = vec![0usize; node.parts.len()];
            let per_key = buf.bytes() / buf.key_count();
            let mut j = 0;
            for k in buf.keys() {
                j = node.part_index_near(k, j);
                incoming[j] += per_key;
                routes.push(j as u32);
            }
            self.read_ahead_flushes(env, &node, bounds, Some(&incoming));
        }
        // Keys come in order, so each is usually in the previous key's
        // child, and each child's keys form one run, put at once.
        let mut j = 0;
        let mut run_of = 0;
        let mut run = Vec::new();
        for (n, (k, list)) in buf.take_points().enumerate() {
            j = match routes.get(n) {
                Some(&r) => r as usize,
                None => node.part_index_near(&k, j),
            };
            debug_assert_eq!(j, node.part_index(&k), "a key routed ahead");
            if j != run_of && !run.is_empty() {
                node.buffer_mut(run_of).put_sorted(std::mem::take(&mut run));
            }
            run_of = j;
            run.push((k, list));
        }
        if !run.is_empty() {
            node.buffer_mut(run_of).put_sorted(run);
        }
        self.flush_while_over(env, &mut node, bounds)?;
        self.finish_internal(env, b, node, bounds)
    }

    /// Puts a changed leaf back, split if it outgrew the node size.
    /// `kept`: its tally when it was taken, if it was dirty.
    ///
    /// A leaf that was dirty is put back at a cost in the basements the
    /// change touched, not in all of them (a clean one is counted once):
    /// with a log large enough that checkpoints are rare, leaves stay
    /// dirty and every skip-down into one paid for its hundreds of
    /// basements (finding its size, its entries and its heap bytes, and
    /// reshaping each basement), 11 % of the daemon's CPU in TokuBench
    /// with a 256 MiB log.
    fn finish_leaf(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        mut node: Node,
        bounds: &Bounds,
        change: LeafChange,
        kept: Option<Tally>,
    ) -> Result<Splits> {
        // `apply_to_leaf` reshaped the basements it changed; the others
        // were shaped when they last changed.
        let tally = match kept {
            Some(t) => t.replaced(change.before, change.after),
            // Taken clean: its partitions' places on disk go now, and it
            // is counted once, here (the put below trusts the count).
            None => {
                node.mark_modified();
                node.tally()
            }
        };
        if tally.content <= env.cfg.node_bytes || tally.entries < 2 {
            self.put_dirty_tallied(b, node, tally);
            return Ok(Vec::new());
        }
        if node.parts.len() < 2 {
            // One basement of several entries larger than a node (a
            // partition size above half the node size): cut it between
            // entries first, into thirds, so that the split below has
            // basements to share out.
            let bytes = node.basement(0).bytes();
            reshape_basements(&mut node, 0..1, (bytes - 1) / 3);
        }
        env.stats.add_leaf_split();
        Ok(self.split_leaf_at_basements(env, b, node, bounds, change.appended))
    }

    /// Splits an overfull leaf between its basements. Each piece takes
    /// its basements as they are, frozen, without copying an entry; where
    /// the piece's frame is longer than the leaf's, their keys are
    /// shortened in place (`Basement::strip_keys`). Rebuilding every
    /// piece copied every byte of a sequential write once or twice more
    /// (7 % of the daemon's CPU writing a large file).
    ///
    /// After an append, the first piece keeps as many of the leaf's
    /// basements as fit in a node and the rest go to the next: a stream
    /// leaves full leaves behind it, not half-full ones it never comes
    /// back to. Otherwise the pieces are of similar size, about 3/4 of a
    /// node each, with room for what flushes bring next.
    fn split_leaf_at_basements(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        mut node: Node,
        bounds: &Bounds,
        appended: bool,
    ) -> Splits {
        let sizes: Vec<usize> = (0..node.parts.len())
            .map(|j| node.basement(j).bytes())
            .collect();
        let pieces = if appended {
            crate::basement::fill_runs(&sizes, env.cfg.node_bytes)
        } else {
            let total: usize = sizes.iter().sum();
            let k = total.div_ceil(env.cfg.node_bytes * 3 / 4).max(2);
            even_runs(&sizes, k)
        };
        let mut parts = std::mem::take(&mut node.parts).into_iter();
        let mut splits = Vec::new();
        let mut lo = bounds.lo.clone();
        for (n, piece) in pieces.iter().enumerate() {
            let hi = match pieces.get(n + 1) {
                Some(next) => Some(concat(&node.prefix, &node.pivots[next.start - 1])),
                None => bounds.hi.clone(),
            };
            let pb = Bounds {
                lo: lo.clone(),
                hi: hi.clone(),
            };
            let prefix = pb.frame();
            let strip = prefix.len() - node.prefix.len();
            let mut leaf = Node::empty_leaf(prefix);
            // Their places on disk are the old leaf's; their keys lose
            // what the longer frame now holds (every key and pivot
            // inside the piece's bounds starts with the frame).
            leaf.parts = parts
                .by_ref()
                .take(piece.len())
                .map(|mut slot| {
                    slot.disk = None;
                    match slot.data.get_mut() {
                        Some(Part::Basement(basement)) => basement.strip_keys(strip),
                        _ => panic!("a leaf is fully loaded when it is split"),
                    }
                    slot
                })
                .collect();
            leaf.pivots = node.pivots[piece.start..piece.end - 1]
                .iter()
                .map(|p| p[strip..].to_vec())
                .collect();
            leaf.max_msn = node.max_msn;
            let blk = if n == 0 { b } else { self.table.create(0) };
            if n > 0 {
                splits.push((lo.clone(), blk));
            }
            self.put_dirty(blk, leaf);
            if let Some(h) = hi {
                lo = h;
            }
        }
        splits
    }

    /// Puts a changed internal node back, split if it has too many children.
    fn finish_internal(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        node: Node,
        bounds: &Bounds,
    ) -> Result<Splits> {
        let n = node.children.len();
        if n <= env.cfg.fanout {
            self.put_dirty(b, node);
            return Ok(Vec::new());
        }
        env.stats.add_internal_split();
        let groups = n.div_ceil(env.cfg.fanout).max(2);
        let mut splits = Vec::new();
        let Node {
            height,
            prefix,
            pivots,
            children,
            parts,
            max_msn,
            dict: _,
        } = node;
        let mut children = children.into_iter();
        let mut parts = parts.into_iter();
        let mut start = 0;
        for g in 0..groups {
            let end = n * (g + 1) / groups;
            let lo = if start == 0 {
                bounds.lo.clone()
            } else {
                concat(&prefix, &pivots[start - 1])
            };
            let hi = if end == n {
                bounds.hi.clone()
            } else {
                Some(concat(&prefix, &pivots[end - 1]))
            };
            let gb = Bounds { lo: lo.clone(), hi };
            let gprefix = gb.frame();
            let mut piece = Node {
                height,
                prefix: prefix.clone(),
                pivots: pivots[start..end - 1].to_vec().into(),
                children: children.by_ref().take(end - start).collect(),
                parts: parts.by_ref().take(end - start).collect(),
                max_msn,
                dict: None,
            };
            reframe(&mut piece, gprefix);
            let blk = if g == 0 { b } else { self.table.create(height) };
            if g > 0 {
                splits.push((lo, blk));
            }
            self.put_dirty(blk, piece);
            start = end;
        }
        Ok(splits)
    }

    /// Adds the siblings child `i` split into, fixing the lifts.
    fn integrate(&mut self, node: &mut Node, bounds: &Bounds, i: usize, splits: Splits) {
        if splits.is_empty() {
            return;
        }
        let count = splits.len();
        for (j, (pivot, blk)) in splits.into_iter().enumerate() {
            let rel = pivot[node.prefix.len()..].to_vec();
            let moved = node.buffer_mut(i + j).split_off(&rel);
            node.pivots.insert(i + j, rel);
            node.children.insert(
                i + j + 1,
                Edge {
                    child: blk,
                    lift: Vec::new(),
                },
            );
            node.parts
                .insert(i + j + 1, PartSlot::loaded(Part::Buffer(moved)));
        }
        for k in i..=i + count {
            let cb = child_bounds(node, bounds, k);
            node.children[k].lift = cb.frame()[node.prefix.len()..].to_vec();
        }
    }

    /// Merges child `i` with a neighbour when it became small.
    fn maybe_merge(
        &mut self,
        env: Env<'_>,
        node: &mut Node,
        bounds: &Bounds,
        i: usize,
    ) -> Result<()> {
        if node.children.len() < 2 {
            return Ok(());
        }
        let child = node.children[i].child;
        let small = match self.cache.get(child) {
            Some(e) if e.node.is_leaf() => e.content_bytes() < env.cfg.node_bytes / 4,
            Some(e) => e.node.children.len() < (env.cfg.fanout / 4).max(2),
            None => false,
        };
        if !small {
            return Ok(());
        }
        let (l, r) = if i + 1 < node.children.len() {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        let lb = node.children[l].child;
        let rb = node.children[r].child;
        // Merging is housekeeping: never read a cold sibling for it.
        if !self.cache.contains(lb) || !self.cache.contains(rb) {
            return Ok(());
        }
        let (left, ldirty) = self.take_full(env, lb)?;
        let (right, rdirty) = self.take_full(env, rb)?;
        let fits = if left.is_leaf() {
            left.content_bytes() + right.content_bytes() <= env.cfg.node_bytes * 3 / 4
        } else {
            left.children.len() + right.children.len() <= env.cfg.fanout
        };
        if !fits {
            self.put_clean(lb, left, ldirty);
            self.put_clean(rb, right, rdirty);
            return Ok(());
        }
        env.stats.add_merge();
        let lbounds = child_bounds(node, bounds, l);
        let rbounds = child_bounds(node, bounds, r);
        let mb = Bounds {
            lo: lbounds.lo,
            hi: rbounds.hi,
        };
        let mprefix = mb.frame();
        let merged = if left.is_leaf() {
            let mut left = left;
            let mut right = right;
            let mut entries: Vec<(Vec<u8>, Vec<u8>)> = leaf_entries(&mut left)
                .into_iter()
                .map(|(k, v)| (rebase(&k, &left.prefix, &mprefix), v))
                .collect();
            entries.extend(
                leaf_entries(&mut right)
                    .into_iter()
                    .map(|(k, v)| (rebase(&k, &right.prefix, &mprefix), v)),
            );
            let mut leaf = build_leaf(mprefix.clone(), entries, env.cfg.partition_bytes);
            leaf.max_msn = left.max_msn.max(right.max_msn);
            leaf
        } else {
            let mut left = left;
            let mut right = right;
            reframe(&mut left, mprefix.clone());
            reframe(&mut right, mprefix.clone());
            let sep = rbounds.lo[mprefix.len()..].to_vec();
            left.pivots.push(sep);
            left.pivots.append(&mut right.pivots);
            left.children.append(&mut right.children);
            left.parts.append(&mut right.parts);
            left.max_msn = left.max_msn.max(right.max_msn);
            left
        };
        self.put_dirty(lb, merged);
        // The right node's contents moved; only its block number goes.
        self.table.decref(rb);
        self.release_hold(rb);
        let rbuf = std::mem::take(node.buffer_mut(r));
        node.buffer_mut(l).append(rbuf);
        node.pivots.remove(l);
        node.children.remove(r);
        node.parts.remove(r);
        node.children[l].lift = mprefix[node.prefix.len()..].to_vec();
        Ok(())
    }

    /// Drops one reference to a subtree; frees what nobody references.
    /// Leaves are freed without being read.
    pub(crate) fn drop_subtree(&mut self, env: Env<'_>, b: BlockNum, height: u8) -> Result<()> {
        let rc = self.table.get(b).map_or(0, |e| e.refcount);
        if rc > 1 {
            self.table.decref(b);
            return Ok(());
        }
        if height > 0 {
            let children: Vec<BlockNum> = match self.cache.get(b) {
                Some(e) => e.node.children.iter().map(|c| c.child).collect(),
                None => self
                    .node_for_read(env, b)?
                    .node
                    .children
                    .iter()
                    .map(|c| c.child)
                    .collect(),
            };
            for c in children {
                self.drop_subtree(env, c, height - 1)?;
            }
        }
        self.cache.discard(b);
        self.table.decref(b);
        Ok(())
    }

    /// A fresh empty subtree of the given height (a chain down to a leaf).
    fn new_empty_subtree(&mut self, height: u8, prefix: Vec<u8>) -> BlockNum {
        let node = if height == 0 {
            Node::empty_leaf(prefix)
        } else {
            let child = self.new_empty_subtree(height - 1, prefix.clone());
            Node {
                height,
                prefix,
                pivots: Pivots::default(),
                children: vec![Edge {
                    child,
                    lift: Vec::new(),
                }],
                parts: vec![PartSlot::loaded(Part::Buffer(MsgBuffer::default()))],
                max_msn: 0,
                dict: None,
            }
        };
        let b = self.table.create(height);
        self.put_dirty(b, node);
        b
    }

    fn grow_root(&mut self, env: Env<'_>, mut splits: Splits) -> Result<()> {
        while !splits.is_empty() {
            let height = self.height + 1;
            let mut node = Node {
                height,
                prefix: Vec::new(),
                pivots: Pivots::default(),
                children: vec![Edge {
                    child: self.root,
                    lift: Vec::new(),
                }],
                parts: vec![PartSlot::loaded(Part::Buffer(MsgBuffer::default()))],
                max_msn: 0,
                dict: None,
            };
            self.integrate(&mut node, &Bounds::all(), 0, splits);
            let b = self.table.create(height);
            splits = self.finish_internal(env, b, node, &Bounds::all())?;
            self.root = b;
            self.height = height;
        }
        Ok(())
    }

    /// Replaces a root with a single child by that child.
    fn shrink_root(&mut self, env: Env<'_>) -> Result<()> {
        loop {
            let root = self.root;
            let (mut node, dirty) = self.take_full(env, root)?;
            if node.is_leaf() || node.children.len() > 1 {
                self.put_clean(root, node, dirty);
                return Ok(());
            }
            if !node.buffer(0).is_empty() {
                self.flush_child(env, &mut node, &Bounds::all(), 0)?;
                if node.children.len() > 1 {
                    let splits = self.finish_internal(env, root, node, &Bounds::all())?;
                    return self.grow_root(env, splits);
                }
            }
            self.root = node.children[0].child;
            self.height -= 1;
            self.table.decref(root);
            self.release_hold(root);
        }
    }

    /// Writes a node to a new place (redirect-on-write) and points its
    /// block at it.
    pub(crate) fn write_node(&mut self, env: Env<'_>, b: BlockNum, node: &Node) -> Result<Extent> {
        let (x, image) = self.place_node(env, b, node)?;
        env.write_image(x.offset, &image.bytes, false)?;
        Ok(x)
    }

    /// Serializes a node, allocates a new extent for it and points its
    /// block there (the old extent is released). The caller writes the
    /// image, now (eviction) or after releasing the lock (checkpoint).
    pub(crate) fn place_node(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        node: &Node,
    ) -> Result<(Extent, crate::format::node::NodeImage)> {
        let image = encode_node(node, b, env.cfg.compression, env.cfg.partition_bytes);
        let x = self.place_image(env, b, &image)?;
        Ok((x, image))
    }

    /// Allocates an extent for a serialized node and points its block
    /// there (the old extent is released). Allocation comes first: on
    /// `NoSpace` nothing has changed.
    pub(crate) fn place_image(
        &mut self,
        env: Env<'_>,
        b: BlockNum,
        image: &crate::format::node::NodeImage,
    ) -> Result<Extent> {
        let x = image.extent_at(self.table.allocate(image.bytes.len() as u64)?);
        self.table.relocate(b, x);
        env.stats.add_node_write(image.bytes.len());
        Ok(x)
    }

    /// Brings the cache back under its budget, writing dirty nodes back.
    ///
    /// The budget is split: cached nodes may use two thirds of it (less
    /// the segment cache's sixteenth) and dirty nodes at most one third,
    /// because a checkpoint holds the serialized images of all dirty
    /// nodes until they are written; so nodes, decoded buffer pieces and
    /// checkpoint images stay within `cache_bytes`.
    ///
    /// A device error of an eviction during the operation's flushes
    /// ([`State::evict_during_flush`]) is reported here, once.
    pub fn evict(&mut self, env: Env<'_>) -> Result<()> {
        if let Some(e) = self.eviction_failed.take() {
            return Err(e);
        }
        self.evict_with(env, WhenQueueFull::LeaveToWriter)
    }

    /// [`State::evict`] between the flushes of one operation, whose
    /// callers hold nodes taken out of the cache: an error returned here
    /// would drop them on its way up, and the store, poisoned by it but
    /// still readable, would then read their blocks from extents never
    /// written. So a device error is kept for the operation's own
    /// eviction to report, and nothing more is written meanwhile.
    fn evict_during_flush(&mut self, env: Env<'_>) {
        if self.eviction_failed.is_none() {
            if let Err(e) = self.evict_with(env, WhenQueueFull::LeaveToWriter) {
                self.eviction_failed = Some(e);
            }
        }
    }

    /// [`State::evict`] for an operation that holds the write lock for as
    /// long as its input is large: a range move copies a whole subtree
    /// under it, a leaf at a time, and calls this after each leaf.
    /// Eviction otherwise runs after a flush and at the end of a batch; a
    /// stream of copies mostly skips down into dirty leaves without a
    /// flush, so until the move was done nothing was evicted, neither the
    /// source leaves it read nor the copies (renaming a 512 MiB file:
    /// 1,072 MiB of heap, 1,287 MiB resident for a 256 MiB cache; 225 and
    /// 371 MiB now). And where `evict` leaves the dirty nodes that the
    /// write-back thread has no room for to the writer, to wait for once
    /// its batch is done and the lock released, this writes them at once:
    /// the lock is not released until the move is done.
    pub fn evict_holding_lock(&mut self, env: Env<'_>) -> Result<()> {
        self.evict_with(env, WhenQueueFull::WriteHere)
    }

    fn evict_with(&mut self, env: Env<'_>, when_full: WhenQueueFull) -> Result<()> {
        let (node_max, dirty_max) = budget_split(env.cfg.cache_bytes);
        self.apply_commits(env);
        if !self.over_budget(env) {
            return Ok(());
        }
        env.dev.annotate("evict");
        let (node_target, dirty_target) = (node_max - node_max / 8, dirty_max - dirty_max / 8);
        // Dirty budget first, then clean nodes make room (dropping them
        // costs no write), and only if the cache is still over does a
        // dirty node go early. Nodes queued for the write-back thread are
        // as good as written: they turn clean without the lock.
        self.write_back_lru(env, dirty_max, when_full, |c, q| {
            c.dirty_bytes().saturating_sub(q) > dirty_target
        })?;
        self.evict_clean(env);
        self.write_back_lru(env, dirty_max, when_full, |c, q| {
            c.bytes().saturating_sub(q) > node_target
        })
    }

    /// May a message skip an empty buffer into `child`? Only if that costs
    /// no write of its own: the child is cached, loaded and dirty
    /// ([`Cache::is_cheap_target`]), and not handed to the write-back
    /// thread, whose write a new message would make stale. Once the thread
    /// took no lock, the root's children were written while messages kept
    /// skipping into them: 98-146 of ~600 node writes per engine-compare
    /// random phase were stale (74 of 84 written height-1 nodes); with
    /// this rule 7-12.
    fn is_skip_target(&self, child: BlockNum) -> bool {
        self.cache.is_cheap_target(child) && !self.writeback.contains(child)
    }

    /// The least recently used dirty node that eviction could write back
    /// and the write-back thread has not taken.
    pub fn unqueued_dirty_lru(&self) -> Option<BlockNum> {
        // The same test `write_back_unlocked` applies, so a node named
        // here is written (unless it changes meanwhile) and a writer
        // helping the thread cannot spin on one it would skip.
        self.cache.lru_order().into_iter().find_map(|(b, dirty)| {
            let free = self.may_write_back(b, dirty)
                && self.cache.peek(b).is_some_and(|e| e.node.is_fully_loaded());
            free.then_some(b)
        })
    }

    /// A dirty node that is not the root and that neither a checkpoint
    /// nor the write-back thread is writing already.
    fn may_write_back(&self, b: BlockNum, dirty: bool) -> bool {
        dirty && b != self.root && !self.writing.contains(&b) && !self.writeback.contains(b)
    }

    /// The cache holds more than its budget beyond the nodes queued for
    /// write-back.
    pub fn over_budget(&self, env: Env<'_>) -> bool {
        let (node_max, dirty_max) = budget_split(env.cfg.cache_bytes);
        let queued = self.writeback.bytes;
        self.cache.bytes() > node_max + queued || self.cache.dirty_bytes() > dirty_max + queued
    }

    /// Writes back dirty nodes, least recently used first, while `over`
    /// (given the bytes already queued) holds: queued for the write-back
    /// thread while it keeps up (up to the dirty budget in flight),
    /// else written here and dropped.
    fn write_back_lru(
        &mut self,
        env: Env<'_>,
        dirty_max: usize,
        when_full: WhenQueueFull,
        over: impl Fn(&Cache, usize) -> bool,
    ) -> Result<()> {
        for (b, dirty) in self.cache.lru_order() {
            if !over(&self.cache, self.writeback.bytes) {
                break;
            }
            if !self.may_write_back(b, dirty) {
                continue;
            }
            let (size, bound) = self.cache.peek(b).map_or((0, 0), |e| {
                (e.mem_bytes(), super::writeback::image_bound(&e.node))
            });
            let table = &mut self.table;
            let reserve = || {
                let offset = table.allocate(bound).ok()?;
                Some(super::writeback::Reserved {
                    offset,
                    len: crate::alloc::round_up(bound),
                })
            };
            // The whole dirty budget may be in flight. With half of it
            // (two 4 MiB nodes at engine-compare's 48 MiB cache) the
            // writer serialized nodes itself a tenth of its time: random
            // inserts 8.9 / 8.7 / 8.2 s against 9.4 / 9.3 / 8.6 s, with the
            // same resident peak (and the file system's: 371-372 against
            // 374-380 MiB through seqio, 519 against 520 in TokuBench).
            if self.writeback.offer(b, size, dirty_max, reserve) {
                env.stats.add_eviction();
                continue;
            }
            if self.writeback.queue.is_some() && when_full == WhenQueueFull::LeaveToWriter {
                // The thread is behind: the writer waits for it after
                // releasing the lock, rather than writing here while every
                // other request waits for the lock.
                self.writeback.behind = true;
                return Ok(());
            }
            env.stats.add_eviction();
            let (node, _) = self.cache.evict(b).expect("listed just now");
            match self.write_node(env, b, &node) {
                Ok(_) => {}
                // No extent for it (allocation fails before anything is
                // written or moved): it stays cached and dirty, over the
                // budget, until a checkpoint makes released space
                // reusable. Failing here would fail a batch that is
                // already applied and logged.
                Err(Error::NoSpace { .. }) => {
                    self.cache.put(b, node, true);
                    return Ok(());
                }
                // The device failed the write: the store is poisoned (no
                // more writes) but must stay readable, and the block now
                // points at an extent that holds nothing. The node stays
                // cached, dirty, so reads find it there and never go to
                // that extent.
                Err(e) => {
                    self.cache.put(b, node, true);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// May a reader evict node `b` (dirty or not, as the cache says)?
    /// Clean, not the root, and not being written.
    pub fn evictable_clean(&self, b: BlockNum, dirty: bool) -> bool {
        !dirty && b != self.root && !self.writing.contains(&b) && !self.writeback.contains(b)
    }

    /// Eviction of clean nodes (a reader may do it too). Partitions go
    /// first, least recently used first, and headers are kept: a header
    /// is small and saves a read on every later query through the node.
    /// Headers go only when dropping partitions was not enough.
    pub fn evict_clean(&self, env: Env<'_>) {
        let (node_max, _) = budget_split(env.cfg.cache_bytes);
        if self.cache.bytes() <= node_max {
            return;
        }
        let target = node_max - node_max / 8;
        let order = self.cache.lru_order();
        let done = || self.cache.bytes() <= target;
        if self.strip_clean(env, &order, done) {
            return;
        }
        for &(b, dirty) in &order {
            if done() {
                return;
            }
            if self.evictable_clean(b, dirty) {
                env.stats.add_eviction();
                self.cache.discard(b);
            }
        }
    }

    /// Drops the loaded partitions of the clean nodes of `blocks` (with
    /// their dirty flags), in that order, until `done`; whether it is.
    pub fn strip_clean(
        &self,
        env: Env<'_>,
        blocks: &[(BlockNum, bool)],
        done: impl Fn() -> bool,
    ) -> bool {
        for &(b, dirty) in blocks {
            if done() {
                return true;
            }
            if self.evictable_clean(b, dirty) && self.cache.strip(b) {
                env.stats.add_eviction();
            }
        }
        done()
    }
}

/// The root's buffers hold up to this many node sizes before it flushes.
const ROOT_BUFFER_NODES: usize = 3;

/// Bytes the root's buffers may hold before it flushes: a quarter of the
/// cache, at least one node size and at most [`ROOT_BUFFER_NODES`].
///
/// The root is always cached, so what its buffers hold costs no I/O; the
/// more they hold, the more messages each flush from it moves into a
/// child for the one read and the one rewrite of that child. Through
/// random inserts into a tree several times the cache, the children of
/// the root do not all fit in the cache with their buffers, and nearly
/// every flush from the root reads its child back first. engine-compare
/// (48 MiB cache, 4 MiB nodes), random inserts with the root's limit at
/// 1, 2, 3 and 4 node sizes, alternating: 181, 193, 202 k inserts/s and
/// 179, 194, 202 k/s; 184 k/s at 1 and 223 k/s at 4. Flushes 630-644, 520,
/// 431-441, 398; node bytes written 2.38-2.41, 2.02-2.05, 1.78-1.81, 1.71
/// GB. But the root's buffers take more memory than their accounted
/// bytes (open maps), and at 4 node sizes the process's resident memory
/// rose from 117-128 MiB to 170 MiB, at 6 past the benchmark's 192 MiB
/// limit: hence three, and a quarter of the cache. A checkpoint rewrites
/// the root every time, so the limit also bounds what every checkpoint
/// writes beyond the other dirty nodes.
pub(crate) fn root_buffer_bytes(cfg: &crate::config::Config) -> usize {
    (cfg.cache_bytes / 4).clamp(cfg.node_bytes, ROOT_BUFFER_NODES * cfg.node_bytes)
}

/// (cached node bytes, dirty node bytes) allowed within `cache_bytes`.
/// The segment cache's share comes out of the cached nodes' two thirds.
pub(crate) fn budget_split(cache_bytes: usize) -> (usize, usize) {
    (
        cache_bytes / 3 * 2 - segment_cache_bytes(cache_bytes),
        cache_bytes / 3,
    )
}

/// Bytes the segment cache may hold within `cache_bytes`.
pub(crate) fn segment_cache_bytes(cache_bytes: usize) -> usize {
    cache_bytes / super::segment_cache::SEGMENT_CACHE_SHARE
}

/// Sorts a run of point messages by key, keeping one key's messages in
/// their (MSN) order; a run already in order (a stream's) is only checked.
///
/// What is sorted is a (key head, index) pair per message, not the
/// messages: a stable sort of the messages themselves (about 70 bytes
/// each) moved each one some fourteen times for a batch of 10,000, and
/// reached every key's bytes on the heap at each comparison. Pairs whose
/// heads differ (nearly all, for random keys) compare without leaving the
/// array; the index breaks ties, so one key's messages keep their order.
fn sort_by_key(msgs: &mut Vec<Msg>) {
    fn key(m: &Msg) -> &[u8] {
        match m {
            Msg::Point { key, .. } => key,
            Msg::Range { lo, .. } => lo,
        }
    }
    let in_order = msgs
        .windows(2)
        .all(|w| key_cmp(key(&w[0]), key(&w[1])).is_le());
    if in_order {
        return;
    }
    let mut order: Vec<(u64, u32)> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| (key_head(key(m)), i as u32))
        .collect();
    order.sort_unstable_by(|a, b| {
        headed_cmp(a.0, key(&msgs[a.1 as usize]), b.0, key(&msgs[b.1 as usize])).then(a.1.cmp(&b.1))
    });
    let mut slots: Vec<Option<Msg>> = std::mem::take(msgs).into_iter().map(Some).collect();
    *msgs = order
        .iter()
        .map(|&(_, i)| slots[i as usize].take().expect("each index once"))
        .collect();
}

/// `[lo, hi)` clipped to `bounds`, relative to `prefix`.
fn clip_relative(prefix: &[u8], bounds: &Bounds, lo: &[u8], hi: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let lo = lo.max(bounds.lo.as_slice());
    let hi = match &bounds.hi {
        Some(h) => hi.min(h.as_slice()),
        None => hi,
    };
    if lo >= hi {
        return (Vec::new(), Vec::new());
    }
    (lo[prefix.len()..].to_vec(), hi[prefix.len()..].to_vec())
}

/// Splits a range delete (relative to `node`'s frame, inside its bounds)
/// across the children it overlaps.
fn rangecast(node: &mut Node, lo: Vec<u8>, hi: Vec<u8>, msn: Msn) {
    let first = node.part_index(&lo);
    let n = node.parts.len();
    for j in first..n {
        let clo = if j == first {
            lo.clone()
        } else {
            node.pivots[j - 1].clone()
        };
        if clo >= hi {
            break;
        }
        let chi = if j + 1 < n && node.pivots[j] < hi {
            node.pivots[j].clone()
        } else {
            hi.clone()
        };
        node.buffer_mut(j).put_range_delete(clo, chi, msn);
    }
}

/// Applies a buffer to a leaf's basements (ranges first: every point
/// message in a buffer is newer than the range covering it). Basements
/// the buffer does not touch are left as they are (frozen ones stay so).
/// Returns whether every message lies past the leaf's last key (an
/// append, as a stream's are). A merge leaves basements of about
/// `partition_bytes` (see [`Basement::apply_sorted_in_pieces`]).
fn apply_to_leaf(
    node: &mut Node,
    mut buf: MsgBuffer,
    how: Apply,
    partition_bytes: usize,
) -> LeafChange {
    if how == Apply::Merge {
        if let Some(change) = append_owned(node, &mut buf, partition_bytes) {
            return change;
        }
    }
    let ranges = std::mem::take(&mut buf.ranges);
    // Borrowed: a buffer read from disk is not decoded into a map first
    // (that and freeing it again cost random inserts 9 % of their time).
    let points: Vec<(&[u8], ListRef<'_>)> = buf.lists().collect();
    let last_key = leaf_last_key(node);
    let appended = ranges.is_empty()
        && points
            .first()
            .is_some_and(|(first, _)| last_key.is_none_or(|last| *first > last));
    // The basements touched, each with its run of messages: found from
    // the messages and ranges, not by visiting every basement (a skip-down
    // brings one message to a leaf of hundreds of basements).
    let mut touched: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    let mut i = 0;
    while i < points.len() {
        let j = node.part_index(points[i].0);
        let end = match node.pivots.get(j) {
            Some(h) => i + points[i..].partition_point(|(k, _)| *k < h.as_slice()),
            None => points.len(),
        };
        touched.push((j, i..end));
        i = end;
    }
    for (lo, r) in ranges.iter() {
        let last = node.part_index_before(&r.hi);
        for j in node.part_index(lo)..=last {
            if let Err(at) = touched.binary_search_by_key(&j, |(t, _)| *t) {
                touched.insert(at, (j, 0..0));
            }
        }
    }
    // Last basement first: the pieces a merge cuts off are spliced in
    // after it without moving the basements still to be visited.
    let mut change = LeafChange {
        appended,
        before: Tally::default(),
        after: Tally::default(),
    };
    for (j, run) in touched.into_iter().rev() {
        let parts_before = node.parts.len();
        change.before = change.before.plus(node.span_tally(j..j + 1));
        let lo: &[u8] = if j == 0 { &[] } else { &node.pivots[j - 1] };
        let hi: Option<&[u8]> = node.pivots.get(j).map(Vec::as_slice);
        let mut local = RangeIndex::default();
        for (rlo, r) in ranges.overlapping(lo, hi) {
            local.insert(rlo.clone(), r.hi.clone(), r.msn);
        }
        let basement = node.basement_mut(j);
        let pieces = match how {
            Apply::Merge => basement.apply_sorted_in_pieces(&points[run], &local, partition_bytes),
            Apply::Few => {
                basement.apply_few(&points[run], &local);
                Vec::new()
            }
        };
        if !pieces.is_empty() {
            let (pivots, parts): (Vec<_>, Vec<_>) = pieces
                .into_iter()
                .map(|(pivot, b)| (pivot, PartSlot::loaded(Part::Basement(b))))
                .unzip();
            node.pivots.insert_all(j, pivots);
            node.parts.splice(j + 1..j + 1, parts);
        }
        // The basement and the pieces cut off it, reshaped here: every
        // basement is shaped when it changes, so putting the leaf back
        // need not visit the others.
        let end = j + 1 + node.parts.len() - parts_before;
        let end = reshape_basements(node, j..end, partition_bytes);
        change.after = change.after.plus(node.span_tally(j..end));
    }
    // A flushed buffer is a map of a key, a list and a value per message:
    // a large one is freed on the freeing thread. A small one (a skip-down
    // brings a leaf a batch's few messages) is freed here: handing it over
    // woke that thread for each, a context switch per write costing far
    // more than the free (TokuBench's request thread, 24,000 switches in
    // 8 s).
    drop(points);
    if buf.bytes() >= FREE_LATER_MIN_BYTES {
        drop_later(buf);
    }
    change
}

/// A leaf's last key (the basements after it may be empty).
fn leaf_last_key(node: &Node) -> Option<&[u8]> {
    (0..node.parts.len())
        .rev()
        .find_map(|j| node.basement(j).last_key())
}

/// Values at least this large on average make a run of inserts past a
/// leaf's last key go into open basements by move
/// ([`Basement::append_owned_in_pieces`]): a file's blocks. Smaller ones
/// (metadata) stay frozen, where an entry costs no allocation of its own.
const APPEND_OWNED_MIN_VALUE_BYTES: usize = 1024;

/// [`apply_to_leaf`] for a buffer of lone inserts with large values, all
/// past the leaf's last key (a stream's run of blocks): its values move
/// into the last basement and new ones after it. `None`, with the
/// buffer untouched, for any other buffer.
fn append_owned(
    node: &mut Node,
    buf: &mut MsgBuffer,
    partition_bytes: usize,
) -> Option<LeafChange> {
    let keys = buf.key_count();
    if keys == 0 || buf.bytes() < keys * APPEND_OWNED_MIN_VALUE_BYTES {
        return None;
    }
    let j = node.parts.len() - 1;
    let last_key = leaf_last_key(node);
    let (first, _) = buf.lists().next()?;
    // Past the last key, and in the last basement's range (the basements
    // after the last key may be empty).
    if last_key.is_some_and(|last| first <= last) || j > 0 && first < node.pivots[j - 1].as_slice()
    {
        return None;
    }
    let entries = buf.take_lone_inserts()?;
    let before = node.span_tally(j..j + 1);
    let pieces = node
        .basement_mut(j)
        .append_owned_in_pieces(entries, partition_bytes);
    let added = pieces.len();
    let (pivots, parts): (Vec<_>, Vec<_>) = pieces
        .into_iter()
        .map(|(pivot, b)| (pivot, PartSlot::loaded(Part::Basement(b))))
        .unzip();
    node.pivots.extend(pivots);
    node.parts.extend(parts);
    let end = reshape_basements(node, j..j + 1 + added, partition_bytes);
    Some(LeafChange {
        appended: true,
        before,
        after: node.span_tally(j..end),
    })
}

/// What [`apply_to_leaf`] did to a leaf.
struct LeafChange {
    /// Every message it took lies past the leaf's last key (a stream's),
    /// see [`State::split_leaf_at_basements`].
    appended: bool,
    /// What the basements it changed counted for before, and what they
    /// (with the pieces cut off them, less those dropped) count for now.
    before: Tally,
    after: Tally,
}

/// How a leaf takes a buffer's messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Apply {
    /// A flushed buffer: merge into frozen basements in one pass.
    Merge,
    /// A message or two: see [`crate::basement::Basement::apply_few`].
    Few,
}

/// All entries of a (fully loaded) leaf, in order, leaving it empty.
fn leaf_entries(node: &mut Node) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for j in 0..node.parts.len() {
        out.extend(node.basement_mut(j).take_entries());
    }
    out
}

/// Cuts items of the given sizes into at most `k` non-empty runs of
/// similar byte size.
fn even_runs(sizes: &[usize], k: usize) -> Vec<std::ops::Range<usize>> {
    let k = k.min(sizes.len()).max(1);
    let total: usize = sizes.iter().sum();
    let mut out = Vec::with_capacity(k);
    let (mut start, mut before) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        // Cut before item i once the bytes before it reach the next
        // share, leaving at least one item for every run still to come,
        // and at the latest when only that many items are left.
        let share = total * (out.len() + 1) / k;
        let (left, needed) = (sizes.len() - i, k - out.len() - 1);
        if i > start && (before >= share && left >= needed || left == needed) {
            out.push(start..i);
            start = i;
        }
        before += size;
        if out.len() == k - 1 {
            break;
        }
    }
    out.push(start..sizes.len());
    out
}

/// A leaf holding `entries` (relative to `prefix`), cut into basements of
/// about `partition_bytes`, each built straight into its frozen form.
pub(crate) fn build_leaf(
    prefix: Vec<u8>,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    partition_bytes: usize,
) -> Node {
    let slices: Vec<(&[u8], &[u8])> = entries
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    build_leaf_from(prefix, &slices, 0, partition_bytes)
}

/// [`build_leaf`] from borrowed entries whose keys carry `strip` bytes
/// more than `prefix` leaves (keys of a wider frame).
fn build_leaf_from(
    prefix: Vec<u8>,
    entries: &[(&[u8], &[u8])],
    strip: usize,
    partition_bytes: usize,
) -> Node {
    debug_assert!(entries
        .iter()
        .all(|(k, _)| k.len() >= strip && k[..strip] == prefix[prefix.len() - strip..]));
    let mut node = Node::empty_leaf(prefix);
    node.parts.clear();
    let mut first = 0;
    let mut cur_bytes = 0;
    for (i, (k, v)) in entries.iter().enumerate() {
        let k = &k[strip..];
        let eb = crate::basement::entry_bytes(k, v);
        if cur_bytes + eb > partition_bytes && i > first {
            node.pivots.push(separator(&entries[i - 1].0[strip..], k));
            node.parts.push(frozen_basement(&entries[first..i], strip));
            first = i;
            cur_bytes = 0;
        }
        cur_bytes += eb;
    }
    node.parts.push(frozen_basement(&entries[first..], strip));
    node
}

fn frozen_basement(entries: &[(&[u8], &[u8])], strip: usize) -> PartSlot {
    let f = FrozenBasement::build(entries.iter().map(|(k, v)| (&k[strip..], *v)));
    PartSlot::loaded(Part::Basement(Basement::from_frozen(f)))
}

/// Re-expresses an internal node's pivots, buffers and lifts relative to
/// a new frame prefix.
pub(crate) fn reframe(node: &mut Node, new_prefix: Vec<u8>) {
    if node.prefix == new_prefix {
        return;
    }
    let old = std::mem::take(&mut node.prefix);
    node.pivots.rewrite(|p| *p = rebase(p, &old, &new_prefix));
    for e in &mut node.children {
        e.lift = rebase(&e.lift, &old, &new_prefix);
    }
    for slot in &mut node.parts {
        match slot.data.get_mut() {
            Some(Part::Buffer(b)) => b.map_keys(|k| rebase(k, &old, &new_prefix)),
            Some(Part::Basement(b)) => {
                let entries = b.take_entries();
                *b = Basement::from_map(
                    entries
                        .into_iter()
                        .map(|(k, v)| (rebase(&k, &old, &new_prefix), v))
                        .collect(),
                );
            }
            None => {}
        }
    }
    node.prefix = new_prefix;
}

/// Keeps basements `span` of a leaf near the partition size without
/// rebuilding the leaf: an oversized basement is cut in place, an empty
/// one is dropped. Returns where the span ends now.
fn reshape_basements(
    node: &mut Node,
    span: std::ops::Range<usize>,
    partition_bytes: usize,
) -> usize {
    let (mut j, mut end) = (span.start, span.end);
    while j < end {
        let bytes = node.basement(j).bytes();
        if bytes == 0 && node.parts.len() > 1 {
            node.parts.remove(j);
            node.pivots
                .remove(j.saturating_sub(1).min(node.pivots.len() - 1));
            end -= 1;
            continue;
        }
        if bytes > 2 * partition_bytes && node.basement(j).len() > 1 {
            let entries: Vec<(&[u8], &[u8])> = node.basement(j).iter().collect();
            let piece = build_leaf_from(Vec::new(), &entries, 0, partition_bytes);
            let added = piece.parts.len();
            node.parts.splice(j..=j, piece.parts);
            node.pivots.insert_all(j, piece.pivots.into_keys());
            j += added;
            end += added - 1;
            continue;
        }
        j += 1;
    }
    end
}

/// What eviction does with a dirty node once the write-back thread has
/// all it may queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WhenQueueFull {
    /// Leave it, and mark the writer behind: it waits for the thread after
    /// its batch, without the lock (`Tree::catch_up`).
    LeaveToWriter,
    /// Write it now, under the lock: the lock is held for an operation
    /// whose size has no bound.
    WriteHere,
}

#[cfg(test)]
mod tests {
    use super::even_runs;
    use crate::basement::fill_runs;
    use proptest::prelude::*;

    /// A stream's run of blocks past a leaf's last key moves into open
    /// basements (the last one and new ones after it), each within its
    /// pivots and its size, and the change's tallies account for it; a
    /// run of small values or one that is not past the last key is merged
    /// into frozen basements as before.
    #[test]
    fn a_run_of_blocks_past_the_last_key_moves_into_open_basements() {
        use super::{apply_to_leaf, build_leaf, Apply};
        use crate::buffer::MsgBuffer;
        use crate::msg::{PointMsg, PointOp};
        let part = 16 << 10;
        let key = |i: u32| i.to_be_bytes().to_vec();
        let run = |keys: std::ops::Range<u32>, len: usize| -> Vec<(Vec<u8>, PointMsg)> {
            keys.map(|i| {
                let op = PointOp::Insert(vec![i as u8; len]);
                (key(i), PointMsg { msn: 1, op })
            })
            .collect()
        };
        let rows = |n: &crate::node::Node| -> Vec<(Vec<u8>, Vec<u8>)> {
            (0..n.parts.len())
                .flat_map(|j| n.basement(j).iter().map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect()
        };
        let old: Vec<(Vec<u8>, Vec<u8>)> = (0..10).map(|i| (key(i), vec![i as u8; 4096])).collect();
        for (keys, len, owned) in [
            (10..74, 4096, true),
            (10..300, 100, false),
            (5..69, 4096, false),
        ] {
            let mut leaf = build_leaf(Vec::new(), old.clone(), part);
            let before = leaf.tally();
            let msgs = run(keys.clone(), len);
            let mut want: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
                old.iter().cloned().collect();
            for (k, m) in &msgs {
                let PointOp::Insert(v) = &m.op else {
                    unreachable!()
                };
                want.insert(k.clone(), v.clone());
            }
            let change = apply_to_leaf(&mut leaf, MsgBuffer::from_points(msgs), Apply::Merge, part);
            assert_eq!(
                rows(&leaf),
                want.into_iter().collect::<Vec<_>>(),
                "{keys:?}"
            );
            let after = leaf.tally();
            assert_eq!(
                before.content - change.before.content + change.after.content,
                after.content
            );
            assert_eq!(
                before.entries - change.before.entries + change.after.entries,
                after.entries
            );
            assert_eq!(before.mem - change.before.mem + change.after.mem, after.mem);
            for j in 0..leaf.parts.len() {
                let b = leaf.basement(j);
                assert!(b.len() == 1 || b.bytes() <= 2 * part, "basement {j}");
                assert!(j == 0 || b.iter().all(|(k, _)| k >= leaf.pivots[j - 1].as_slice()));
                assert!(
                    j + 1 == leaf.parts.len()
                        || b.iter().all(|(k, _)| k < leaf.pivots[j].as_slice())
                );
                let holds_new = b.iter().any(|(k, _)| k >= key(10).as_slice());
                assert_eq!(
                    b.frozen_raw().is_none(),
                    owned && holds_new,
                    "{keys:?}: basement {j}"
                );
            }
        }
    }

    proptest! {
        /// Sorting through (head, index) pairs orders as a stable sort of
        /// the messages by key does: keys that share their first eight
        /// bytes, keys that are prefixes of others, and repeated keys
        /// (whose messages keep their order) included.
        #[test]
        fn sort_by_key_is_a_stable_sort_by_key(
            keys in proptest::collection::vec(
                (0u8..3, proptest::collection::vec(0u8..3, 0..12)), 0..200)
        ) {
            use super::{sort_by_key, Msg};
            use crate::msg::{PointMsg, PointOp};
            let msgs: Vec<Msg> = keys
                .iter()
                .enumerate()
                .map(|(i, (lead, tail))| {
                    // A common eight-byte head for most keys, so the full
                    // comparison decides.
                    let mut key = vec![*lead; 8.min(tail.len() + 2)];
                    key.extend_from_slice(tail);
                    Msg::Point { key, msg: PointMsg { msn: i as u64, op: PointOp::Delete } }
                })
                .collect();
            let id = |m: &Msg| match m {
                Msg::Point { key, msg } => (key.clone(), msg.msn),
                Msg::Range { .. } => unreachable!(),
            };
            let mut want: Vec<(Vec<u8>, u64)> = msgs.iter().map(id).collect();
            want.sort_by(|a, b| a.0.cmp(&b.0));
            let mut got = msgs;
            sort_by_key(&mut got);
            prop_assert_eq!(got.iter().map(id).collect::<Vec<_>>(), want);
        }
    }

    fn covers(runs: &[std::ops::Range<usize>], n: usize) -> bool {
        runs.first().is_some_and(|r| r.start == 0)
            && runs.last().is_some_and(|r| r.end == n)
            && runs.windows(2).all(|w| w[0].end == w[1].start)
            && runs.iter().all(|r| !r.is_empty())
    }

    proptest! {
        #[test]
        fn even_runs_cut_into_k_nonempty_runs(
            sizes in prop::collection::vec(1usize..1000, 1..60),
            k in 1usize..8,
        ) {
            let runs = even_runs(&sizes, k);
            prop_assert!(covers(&runs, sizes.len()), "{runs:?}");
            prop_assert_eq!(runs.len(), k.min(sizes.len()));
        }

        #[test]
        fn fill_runs_fill_each_run_before_the_next(
            sizes in prop::collection::vec(1usize..1000, 1..60),
            limit in 1usize..4000,
        ) {
            let runs = fill_runs(&sizes, limit);
            prop_assert!(covers(&runs, sizes.len()), "{runs:?}");
            for (n, r) in runs.iter().enumerate() {
                let bytes: usize = sizes[r.clone()].iter().sum();
                prop_assert!(bytes <= limit || r.len() == 1);
                if let Some(next) = runs.get(n + 1) {
                    prop_assert!(bytes + sizes[next.start] > limit);
                }
            }
        }
    }

    /// A batch is routed in key order, but one key's messages must still
    /// apply in the order the batch gives them, across leaves and buffers.
    #[test]
    fn a_batch_sorted_by_key_keeps_each_keys_order() {
        use crate::tree::{Op, Tree};
        let tree = Tree::create(
            Box::new(wodfs_device::MemDevice::new(64 << 20)),
            crate::Config::tiny(),
        )
        .unwrap();
        let ins = |k: u32, v: &[u8]| Op::Insert {
            key: k.to_be_bytes().to_vec(),
            value: v.to_vec(),
        };
        // Enough keys for internal nodes, written in descending order.
        for chunk in (0..2_000u32).rev().collect::<Vec<_>>().chunks(200) {
            let fill: Vec<Op> = chunk.iter().map(|&k| ins(k * 2, b"old")).collect();
            tree.write(&fill).unwrap();
        }
        let key = |k: u32| k.to_be_bytes().to_vec();
        let batch = vec![
            ins(1_501, b"first"),
            ins(7, b"x"),
            Op::Patch {
                key: key(1_501),
                offset: 1,
                data: b"Z".to_vec(),
            },
            Op::Delete { key: key(3_000) },
            ins(3_000, b"again"),
            ins(5, b"y"),
            Op::Delete { key: key(7) },
            Op::Truncate {
                key: key(1_501),
                len: 3,
            },
        ];
        tree.write(&batch).unwrap();
        assert_eq!(tree.get(&key(1_501)).unwrap().as_deref(), Some(&b"fZr"[..]));
        assert_eq!(tree.get(&key(7)).unwrap(), None);
        assert_eq!(
            tree.get(&key(3_000)).unwrap().as_deref(),
            Some(&b"again"[..])
        );
        assert_eq!(tree.get(&key(5)).unwrap().as_deref(), Some(&b"y"[..]));
        assert_eq!(tree.get(&key(8)).unwrap().as_deref(), Some(&b"old"[..]));
        tree.verify().unwrap();
    }

    proptest! {
        /// A leaf's tally kept through a change (`LeafChange`) is the
        /// tally counted afresh, and every basement is still shaped
        /// (none empty beside others, none cut-able above twice the
        /// partition size), though only the basements touched were
        /// looked at: putting a dirty leaf back trusts both.
        #[test]
        fn a_kept_tally_matches_a_fresh_count_and_basements_stay_shaped(
            start in proptest::collection::btree_map(0u16..2000, 0usize..60, 0..400),
            msgs in proptest::collection::vec((0u16..2000, proptest::option::of(0usize..200)), 1..40),
            range in proptest::option::of((0u16..2000, 1u16..300)),
            merge in any::<bool>(),
        ) {
            use super::{apply_to_leaf, build_leaf, Apply};
            use crate::buffer::MsgBuffer;
            use crate::msg::{PointMsg, PointOp};
            const PARTITION: usize = 256;
            let key = |k: u16| k.to_be_bytes().to_vec();
            let entries = start.iter().map(|(k, n)| (key(*k), vec![7u8; *n])).collect();
            let mut leaf = build_leaf(Vec::new(), entries, PARTITION);
            let kept = leaf.tally();
            let mut buf = MsgBuffer::default();
            for (msn, (k, value)) in msgs.iter().enumerate() {
                let op = match value {
                    Some(n) => PointOp::Insert(vec![1u8; *n]),
                    None => PointOp::Delete,
                };
                buf.put_point(key(*k), PointMsg { msn: msn as u64 + 1, op });
            }
            if let Some((lo, len)) = range {
                buf.put_range_delete(key(lo), key(lo.saturating_add(len)), 1000);
            }
            let how = if merge { Apply::Merge } else { Apply::Few };
            let change = apply_to_leaf(&mut leaf, buf, how, PARTITION);
            prop_assert_eq!(kept.replaced(change.before, change.after), leaf.tally());
            for j in 0..leaf.parts.len() {
                let b = leaf.basement(j);
                prop_assert!(b.len() > 0 || leaf.parts.len() == 1, "basement {} empty", j);
                prop_assert!(b.bytes() <= 2 * PARTITION || b.len() == 1, "basement {} oversized", j);
            }
        }
    }

    #[test]
    fn even_runs_balance_bytes_not_counts() {
        assert_eq!(even_runs(&[1, 1, 1, 100], 2), vec![0..3, 3..4]);
        assert_eq!(even_runs(&[100, 1, 1, 1], 2), vec![0..1, 1..4]);
        assert_eq!(even_runs(&[10, 10, 10, 10], 2), vec![0..2, 2..4]);
        assert_eq!(fill_runs(&[10, 10, 10, 10, 10], 30), vec![0..3, 3..5]);
    }
}
