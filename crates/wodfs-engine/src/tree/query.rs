//! Point queries and range scans. Both apply every pending message on the
//! root-to-leaf path: the leaf value first, then each buffer from the
//! deepest up to the root (newer messages live higher).

use std::sync::Arc;

use super::cache::CacheEntry;
use super::frame::{concat, Bounds};
use super::state::{Env, State};
use super::write::child_bounds;
use crate::buffer::Msgs;
use crate::error::{Error, Result};
use crate::msg::{apply_all, PointMsg};
use crate::node::Part;
use crate::table::BlockNum;

/// A leaf's worth of a scan: its entries in the window, and where the
/// next leaf starts.
pub(crate) type LeafScan = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

/// A descent for a scan: the internal levels, the leaf (fully loaded),
/// the window's end and where the next leaf starts.
struct ScanPath {
    levels: Vec<Level>,
    leaf: Arc<CacheEntry>,
    leaf_block: BlockNum,
    end: Option<Vec<u8>>,
    next: Option<Vec<u8>>,
}

impl ScanPath {
    /// The leaf's own entries in `[from, end)`, keys relative to its
    /// prefix, in order, until `f` returns false (then false).
    fn leaf_entries(&self, from: &[u8], mut f: impl FnMut(&[u8], &[u8]) -> bool) -> Result<bool> {
        let node = &self.leaf.node;
        let lp = &node.prefix;
        let rfrom = &from[lp.len()..];
        let rend = self.end.as_ref().map(|e| &e[lp.len()..]);
        let first = node.part_index(rfrom);
        for j in first..node.parts.len() {
            let Some(Part::Basement(bm)) = node.parts[j].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("leaf {} holds a buffer", self.leaf_block),
                ));
            };
            // Only the first basement can hold keys below `from`, and only
            // one that `end` falls inside keys at or past it: the others are
            // taken whole, without a search (a cold sequential file read
            // spent 5-7 % of its request thread in those searches).
            let lo: &[u8] = if j == first { rfrom } else { &[] };
            let hi = rend.filter(|e| node.pivots.get(j).is_none_or(|p| p.as_slice() > *e));
            for (k, v) in bm.range(lo, hi) {
                if !f(k, v) {
                    return Ok(false);
                }
            }
            if rend.is_some_and(|e| j < node.pivots.len() && node.pivots[j].as_slice() >= e) {
                break;
            }
        }
        Ok(true)
    }
}

/// One internal level of a descent.
struct Level {
    entry: Arc<CacheEntry>,
    block: BlockNum,
    child: usize,
}

impl State {
    /// The value of `key`, reading at most one partition per level.
    pub fn get(&self, env: Env<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        // Per buffer on the path that holds something for the key, from
        // the root down: does a range delete cover it, and its messages.
        let mut found: Vec<(bool, Vec<PointMsg>)> = Vec::new();
        let mut b = self.root;
        let mut expect_prefix: Vec<u8> = Vec::new();
        let value = loop {
            let entry = self.node_for_read(env, b)?;
            check_prefix(&entry, b, &expect_prefix, key)?;
            let rel = &key[entry.node.prefix.len()..];
            let i = entry.node.part_index(rel);
            if entry.node.is_leaf() {
                if entry.node.parts[i].data.get().is_none() || entry.take_read_ahead() {
                    self.arrived_in_leaf(env, b, key);
                }
                let Part::Basement(bm) = self.part(env, b, &entry, i)? else {
                    return Err(Error::corrupt(
                        "node",
                        0,
                        format!("leaf {b} holds a buffer"),
                    ));
                };
                break bm.get(rel).map(<[u8]>::to_vec);
            }
            let slot = &entry.node.parts[i];
            // The header's summary of a buffer that is not loaded tells
            // whether it can hold anything for this key; most cannot.
            let needed = slot.data.get().is_some()
                || slot.summary.as_ref().is_none_or(|s| s.may_affect(rel));
            if needed {
                let probed = match slot.data.get() {
                    Some(_) => None,
                    None => self.probe_buffer(env, b, &entry, i, rel)?,
                };
                let (covered, msgs) = match probed {
                    Some(msgs) => (false, msgs),
                    None => match self.part(env, b, &entry, i)? {
                        Part::Buffer(buf) => {
                            let (covered, msgs) = buf.lookup(rel);
                            (covered, msgs.into_owned())
                        }
                        Part::Basement(_) => {
                            return Err(Error::corrupt(
                                "node",
                                0,
                                format!("block {b} holds no buffer"),
                            ))
                        }
                    },
                };
                // An insert or delete of the key, or a range delete over
                // it, decides the value: nothing below is older than it
                // can matter, so the descent stops (no leaf read).
                let decided = covered || msgs.first().is_some_and(|m| m.op.is_blind_total());
                found.push((covered, msgs));
                if decided {
                    break None;
                }
            }
            let edge = &entry.node.children[i];
            expect_prefix = concat(&entry.node.prefix, &edge.lift);
            b = edge.child;
        };
        Ok(found
            .into_iter()
            .rev()
            .fold(value, |value, (covered, msgs)| {
                apply_all(if covered { None } else { value }, &msgs)
            }))
    }

    /// Leaf `b` for a scan, which wants most of it: cached, or read whole
    /// in one request if no read-ahead thread is reading it (else what
    /// that read brings). Reading its header first, as a point query
    /// does, cost one more device round trip per leaf; and a header read
    /// of a leaf a read-ahead thread was reading waited behind that
    /// thread's 4 MiB read (a cold 4 GiB file read: 54 such waits of
    /// 7 ms on its request thread, session 16).
    fn leaf_for_scan(&self, env: Env<'_>, b: BlockNum) -> Result<Arc<CacheEntry>> {
        loop {
            if let Some(e) = self.cache.get(b) {
                return Ok(e);
            }
            if let Some(_loading) = env.loading.claim(b) {
                // Looked up again under the claim: another thread may have
                // loaded it between the first look and the claim.
                if let Some(e) = self.cache.get(b) {
                    return Ok(e);
                }
                let node = self.read_whole(env, b)?;
                return Ok(self.cache.put(b, node, false));
            }
            env.loading.wait_for(b);
        }
    }

    /// Tells the sweep watcher ([`super::sweep::Sweep`]) that a point
    /// query for `key` arrived in leaf `b`, which it must load a partition
    /// of, or which a read-ahead loaded. The leaf's bounds take one more
    /// descent through cached internal nodes, paid once per leaf: a
    /// sweep's later point queries in the same leaf (one cold basement
    /// after another) find it known and stop there.
    fn arrived_in_leaf(&self, env: Env<'_>, b: BlockNum, key: &[u8]) {
        if env.loading.sweep.knows(b) {
            return;
        }
        if let Ok((leaf, bounds)) = self.leaf_for(env, key) {
            env.loading.sweep.arrived(leaf, &bounds);
        }
    }

    /// The path to the leaf holding `from`, that leaf fully loaded, and the
    /// window `[from, end)` it can answer (`end`: the smaller of `hi` and
    /// the leaf's upper bound).
    ///
    /// `from` lies inside every node's bounds on its path, and so does the
    /// window's end, so both start with every frame prefix on the path.
    fn descend_for_scan(&self, env: Env<'_>, from: &[u8], hi: Option<&[u8]>) -> Result<ScanPath> {
        let mut levels: Vec<Level> = Vec::with_capacity(self.height as usize);
        let mut b = self.root;
        let mut bounds = Bounds::all();
        let mut expect_prefix: Vec<u8> = Vec::new();
        let mut leaf = loop {
            let entry = if levels.last().is_some_and(|l| l.entry.node.height == 1) {
                self.leaf_for_scan(env, b)?
            } else {
                self.node_for_read(env, b)?
            };
            check_prefix(&entry, b, &expect_prefix, from)?;
            if entry.node.is_leaf() {
                break entry;
            }
            let i = entry.node.part_index(&from[entry.node.prefix.len()..]);
            self.part(env, b, &entry, i)?;
            bounds = child_bounds(&entry.node, &bounds, i);
            expect_prefix = concat(&entry.node.prefix, &entry.node.children[i].lift);
            let next = entry.node.children[i].child;
            levels.push(Level {
                entry,
                block: b,
                child: i,
            });
            b = next;
        };
        // Every partition looked at once per scan, not once more for the
        // sweep watcher.
        let mut whole = leaf.node.is_fully_loaded();
        if !whole || leaf.take_read_ahead() {
            env.loading.sweep.arrived(b, &bounds);
        }
        // A scan wants most of the leaf: read it whole, in one request,
        // instead of one request per basement; or, if a read-ahead thread
        // is reading it, take what that read brings.
        while !whole {
            if let Some(_loading) = env.loading.claim(b) {
                // Looked up again under the claim: another thread may have
                // loaded it between the first look and the claim.
                leaf = self.header_unclaimed(env, b)?;
                if !leaf.node.is_fully_loaded() {
                    let node = self.load_all(env, b, leaf.node.clone())?;
                    leaf = self.cache.put(b, node, leaf.dirty);
                }
            } else {
                env.loading.wait_for(b);
                leaf = self.node_for_read(env, b)?;
            }
            whole = leaf.node.is_fully_loaded();
        }
        let end: Option<Vec<u8>> = match (&bounds.hi, hi) {
            (Some(a), Some(h)) => Some(a.as_slice().min(h).to_vec()),
            (Some(a), None) => Some(a.clone()),
            (None, h) => h.map(<[u8]>::to_vec),
        };
        let next = match (bounds.hi, hi) {
            (None, _) => None,
            (Some(bh), Some(h)) if h <= bh.as_slice() => None,
            (Some(bh), _) => Some(bh),
        };
        Ok(ScanPath {
            levels,
            leaf,
            leaf_block: b,
            end,
            next,
        })
    }

    /// A scan goes on past `path`'s leaf (if anything is left after it):
    /// that leaf, and every node on the path whose last child it was, are
    /// used up for the scan, and eviction takes them first
    /// ([`super::cache::Cache::used_up`]).
    fn leave_behind(&self, path: &ScanPath) {
        if path.next.is_none() {
            return;
        }
        self.cache.used_up(path.leaf_block);
        for lv in path.levels.iter().rev() {
            if lv.child + 1 < lv.entry.node.children.len() {
                break;
            }
            self.cache.used_up(lv.block);
        }
    }

    /// The entries of the leaf holding `from` that lie in `[from, hi)`,
    /// with every buffered message applied, and where the next leaf
    /// starts (None: nothing is left before `hi`).
    pub fn scan_leaf(&self, env: Env<'_>, from: &[u8], hi: Option<&[u8]>) -> Result<LeafScan> {
        let path = self.descend_for_scan(env, from, hi)?;
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let lp = path.leaf.node.prefix.clone();
        path.leaf_entries(from, |k, v| {
            out.push((concat(&lp, k), v.to_vec()));
            true
        })?;
        self.apply_levels(&path.levels, &mut out, from, path.end.as_deref())?;
        self.leave_behind(&path);
        Ok((out, path.next))
    }

    /// [`State::scan_leaf`] handing each entry to `f` as slices instead of
    /// returning owned copies: when no buffered message on the path falls
    /// in the window (the common case for data at rest), the slices point
    /// into the cached leaf and nothing is allocated per entry. `f`
    /// returns false to stop; `on_next` learns where the next leaf starts
    /// before `f` sees the first entry. Returns where the next leaf starts
    /// and whether `f` wants more.
    pub fn visit_leaf(
        &self,
        env: Env<'_>,
        from: &[u8],
        hi: Option<&[u8]>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        on_next: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(Option<Vec<u8>>, bool)> {
        let path = self.descend_for_scan(env, from, hi)?;
        // Known before the entries are handed out: the caller can start
        // reading the next leaf while `f` works through this one.
        on_next(path.next.as_deref());
        let more = self.visit_path(&path, from, f)?;
        if more {
            self.leave_behind(&path);
        }
        Ok((path.next, more))
    }

    /// [`State::visit_leaf`]'s work on the leaf `path` leads to: hands
    /// `f` the window's entries from `from` on; false if `f` stopped.
    fn visit_path(
        &self,
        path: &ScanPath,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool> {
        // What the buffered messages on the path touch in the window: the
        // keys of point messages and the spans of range deletes.
        let mut touched: Vec<Vec<u8>> = Vec::new();
        let mut spans: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for lv in &path.levels {
            let node = &lv.entry.node;
            let Some(Part::Buffer(buf)) = node.parts[lv.child].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("block {} holds no buffer", lv.block),
                ));
            };
            if buf.is_empty() {
                continue;
            }
            let p = &node.prefix;
            let rend = path.end.as_ref().map(|e| &e[p.len()..]);
            let rfrom = &from[p.len()..];
            spans.extend(
                buf.ranges
                    .overlapping(rfrom, rend)
                    .map(|(lo, r)| (concat(p, lo), concat(p, &r.hi))),
            );
            touched.extend(buf.keys_in(rfrom, rend).map(|k| concat(p, k)));
        }
        touched.sort_unstable();
        touched.dedup();
        let affected = |k: &[u8]| {
            touched.binary_search_by(|t| t.as_slice().cmp(k)).is_ok()
                || spans
                    .iter()
                    .any(|(lo, hi)| lo.as_slice() <= k && k < hi.as_slice())
        };
        let lp = &path.leaf.node.prefix;
        let mut key = Vec::with_capacity(lp.len() + 64);
        // The touched entries (and those the messages create) get their
        // final values the usual way; the rest are lent as they are.
        let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        if spans.is_empty() {
            // Only point messages (if any): look their keys up in the
            // leaf. They are sorted, so each search starts where the last
            // one ended (a galloping search in the same basement) instead
            // of searching the pivots and the basement anew: these lookups
            // were a quarter of a cold scan's own time.
            let leaf = &path.leaf.node;
            let (mut j, mut hint) = (usize::MAX, 0);
            for t in &touched {
                let rel = &t[lp.len()..];
                let at = leaf.part_index_near(rel, j);
                if at != j {
                    (j, hint) = (at, 0);
                }
                if let Some(Part::Basement(bm)) = leaf.parts[j].data.get() {
                    if let Some(v) = bm.get_from(rel, &mut hint) {
                        merged.push((t.clone(), v.to_vec()));
                    }
                }
            }
            if !touched.is_empty() {
                self.apply_levels(&path.levels, &mut merged, from, path.end.as_deref())?;
            }
        } else {
            path.leaf_entries(from, |k, v| {
                key.clear();
                key.extend_from_slice(lp);
                key.extend_from_slice(k);
                if affected(&key) {
                    merged.push((key.clone(), v.to_vec()));
                }
                true
            })?;
            self.apply_levels(&path.levels, &mut merged, from, path.end.as_deref())?;
        }
        let mut stopped = false;
        if spans.is_empty() {
            // Only point messages: walk the leaf with one comparison per
            // entry against the next key where something happens (a
            // touched key, or a computed entry to hand out), on keys
            // relative to the leaf's frame (every key in the window
            // starts with it).
            let lpl = lp.len();
            debug_assert!(touched.iter().all(|t| t.starts_with(lp)));
            debug_assert!(merged.iter().all(|(m, _)| m.starts_with(lp)));
            let stop_at = |ti: usize, mi: usize| -> Option<&[u8]> {
                let t = touched.get(ti).map(|t| &t[lpl..]);
                let m = merged.get(mi).map(|(m, _)| &m[lpl..]);
                match (t, m) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            let (mut ti, mut mi) = (0, 0);
            let mut stop = stop_at(0, 0);
            path.leaf_entries(from, |k, v| {
                if stop.is_none_or(|s| k < s) {
                    key.clear();
                    key.extend_from_slice(lp);
                    key.extend_from_slice(k);
                    stopped = !f(&key, v);
                    return !stopped;
                }
                // Computed entries up to this key go first (new keys, and
                // this key's own final value if it is touched).
                while mi < merged.len() && &merged[mi].0[lpl..] <= k {
                    if !f(&merged[mi].0, &merged[mi].1) {
                        stopped = true;
                        return false;
                    }
                    mi += 1;
                }
                while ti < touched.len() && &touched[ti][lpl..] < k {
                    ti += 1;
                }
                if ti < touched.len() && &touched[ti][lpl..] == k {
                    ti += 1;
                } else {
                    key.clear();
                    key.extend_from_slice(lp);
                    key.extend_from_slice(k);
                    if !f(&key, v) {
                        stopped = true;
                        return false;
                    }
                }
                stop = stop_at(ti, mi);
                true
            })?;
            if stopped {
                return Ok(false);
            }
            for (mk, mv) in &merged[mi..] {
                if !f(mk, mv) {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let mut next_merged = merged.iter().peekable();
        path.leaf_entries(from, |k, v| {
            key.clear();
            key.extend_from_slice(lp);
            key.extend_from_slice(k);
            while let Some((mk, mv)) =
                next_merged.next_if(|(mk, _)| mk.as_slice() <= key.as_slice())
            {
                if !f(mk, mv) {
                    stopped = true;
                    return false;
                }
            }
            if affected(&key) {
                // Its final value, if any, was just handed over.
                return true;
            }
            if !f(&key, v) {
                stopped = true;
                return false;
            }
            true
        })?;
        if stopped {
            return Ok(false);
        }
        for (mk, mv) in next_merged {
            if !f(mk, mv) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Applies the buffered messages of every level (deepest first) to
    /// the sorted entries `out` of the window `[from, end)`, one sorted
    /// merge per level.
    fn apply_levels(
        &self,
        levels: &[Level],
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
        from: &[u8],
        end: Option<&[u8]>,
    ) -> Result<()> {
        for lv in levels.iter().rev() {
            let node = &lv.entry.node;
            let Some(Part::Buffer(buf)) = node.parts[lv.child].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("block {} holds no buffer", lv.block),
                ));
            };
            if buf.is_empty() {
                continue;
            }
            let p = &node.prefix;
            let rfrom = &from[p.len()..];
            let rend = end.map(|e| &e[p.len()..]);
            let ranges: Vec<(Vec<u8>, Vec<u8>)> = buf
                .ranges
                .overlapping(rfrom, rend)
                .map(|(lo, r)| (concat(p, lo), concat(p, &r.hi)))
                .collect();
            let points: Vec<(Vec<u8>, Msgs<'_>)> = buf
                .points_in(rfrom, rend)
                .map(|(k, m)| (concat(p, k), m))
                .collect();
            if ranges.is_empty() && points.is_empty() {
                continue;
            }
            *out = merge_level(std::mem::take(out), &ranges, points);
        }
        Ok(())
    }
}

/// Sorted entries with one buffer's messages applied: entries inside a
/// range delete go, then each key's point messages apply to what is left.
fn merge_level(
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    ranges: &[(Vec<u8>, Vec<u8>)],
    points: Vec<(Vec<u8>, Msgs<'_>)>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(entries.len() + points.len());
    let mut r = 0;
    // Is `k` inside a range? Keys are asked in increasing order.
    let mut covered = |k: &[u8]| {
        while r < ranges.len() && ranges[r].1.as_slice() <= k {
            r += 1;
        }
        r < ranges.len() && ranges[r].0.as_slice() <= k
    };
    let mut entries = entries.into_iter().peekable();
    for (key, msgs) in points {
        let mut old = None;
        while let Some((k, _)) = entries.peek() {
            if *k > key {
                break;
            }
            let (k, v) = entries.next().expect("peeked");
            if k == key {
                old = (!covered(&k)).then_some(v);
                break;
            }
            if !covered(&k) {
                out.push((k, v));
            }
        }
        // A covered old value was dropped above; a missing one stays missing.
        if let Some(v) = apply_all(old, &msgs) {
            out.push((key, v));
        }
    }
    for (k, v) in entries {
        if !covered(&k) {
            out.push((k, v));
        }
    }
    out
}

/// A node's stored frame prefix must be the one its parent's edge implies,
/// and must be a prefix of the key being looked for.
fn check_prefix(entry: &CacheEntry, b: BlockNum, expect: &[u8], key: &[u8]) -> Result<()> {
    if entry.node.prefix != expect {
        return Err(Error::corrupt(
            "node",
            0,
            format!("block {b}: frame prefix does not match its parent's lift"),
        ));
    }
    if !key.starts_with(expect) {
        // Keys outside a node's frame never route to it; reaching here
        // means pivots and lifts disagree.
        return Err(Error::corrupt(
            "node",
            0,
            format!("block {b}: key routed outside the node's frame"),
        ));
    }
    Ok(())
}
