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
use crate::msg::apply_all;
use crate::node::Part;
use crate::table::BlockNum;

/// A leaf's worth of a scan: its entries in the window, and where the
/// next leaf starts.
pub(crate) type LeafScan = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

/// One internal level of a descent.
struct Level {
    entry: Arc<CacheEntry>,
    block: BlockNum,
    child: usize,
}

impl State {
    /// The value of `key`, reading at most one partition per level.
    pub fn get(&self, env: Env<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut levels: Vec<Level> = Vec::with_capacity(self.height as usize);
        let mut b = self.root;
        let mut expect_prefix: Vec<u8> = Vec::new();
        let value = loop {
            let entry = self.node_for_read(env, b)?;
            check_prefix(&entry, b, &expect_prefix, key)?;
            let rel = &key[entry.node.prefix.len()..];
            let i = entry.node.part_index(rel);
            if entry.node.is_leaf() {
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
                self.part(env, b, &entry, i)?;
            }
            let edge = &entry.node.children[i];
            expect_prefix = concat(&entry.node.prefix, &edge.lift);
            let next = edge.child;
            if needed {
                levels.push(Level {
                    entry,
                    block: b,
                    child: i,
                });
            }
            b = next;
        };
        let mut value = value;
        for lv in levels.iter().rev() {
            let Some(Part::Buffer(buf)) = lv.entry.node.parts[lv.child].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("block {} holds no buffer", lv.block),
                ));
            };
            value = buf.apply_to(&key[lv.entry.node.prefix.len()..], value);
        }
        Ok(value)
    }

    /// The entries of the leaf holding `from` that lie in `[from, hi)`,
    /// with every buffered message applied, and where the next leaf
    /// starts (None: nothing is left before `hi`).
    ///
    /// `from` lies inside every node's bounds on its path, and so does the
    /// window's end (the smaller of `hi` and the leaf's upper bound), so
    /// both start with every frame prefix on the path.
    pub fn scan_leaf(&self, env: Env<'_>, from: &[u8], hi: Option<&[u8]>) -> Result<LeafScan> {
        let mut levels: Vec<Level> = Vec::with_capacity(self.height as usize);
        let mut b = self.root;
        let mut bounds = Bounds::all();
        let mut expect_prefix: Vec<u8> = Vec::new();
        let mut leaf = loop {
            let entry = self.node_for_read(env, b)?;
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
        if !leaf.node.is_fully_loaded() {
            // A scan wants most of the leaf: read it whole, in one request,
            // instead of one request per basement.
            let node = self.load_all(env, b, leaf.node.clone())?;
            leaf = self.cache.put(b, node, leaf.dirty);
        }
        let end: Option<Vec<u8>> = match (&bounds.hi, hi) {
            (Some(a), Some(h)) => Some(a.as_slice().min(h).to_vec()),
            (Some(a), None) => Some(a.clone()),
            (None, h) => h.map(<[u8]>::to_vec),
        };
        let lp = &leaf.node.prefix;
        let rfrom = &from[lp.len()..];
        let rend = end.as_ref().map(|e| &e[lp.len()..]);
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let first = leaf.node.part_index(rfrom);
        for j in first..leaf.node.parts.len() {
            let Some(Part::Basement(bm)) = leaf.node.parts[j].data.get() else {
                return Err(Error::corrupt(
                    "node",
                    0,
                    format!("leaf {b} holds a buffer"),
                ));
            };
            out.extend(
                bm.range(rfrom, rend)
                    .map(|(k, v)| (concat(lp, k), v.to_vec())),
            );
            if rend
                .is_some_and(|e| j < leaf.node.pivots.len() && leaf.node.pivots[j].as_slice() >= e)
            {
                break;
            }
        }
        self.apply_levels(&levels, &mut out, from, end.as_deref())?;
        let next = match (bounds.hi, hi) {
            (None, _) => None,
            (Some(bh), Some(h)) if h <= bh.as_slice() => None,
            (Some(bh), _) => Some(bh),
        };
        Ok((out, next))
    }

    /// Loads the leaf holding `key` into the cache, whole (read-ahead for
    /// scans). Errors are left for the scan itself to meet and report.
    pub fn prefetch_leaf(&self, env: Env<'_>, key: &[u8]) {
        let mut b = self.root;
        loop {
            let Ok(entry) = self.node_for_read(env, b) else {
                return;
            };
            if !key.starts_with(&entry.node.prefix) {
                return;
            }
            let i = entry.node.part_index(&key[entry.node.prefix.len()..]);
            if entry.node.is_leaf() {
                if !entry.node.is_fully_loaded() {
                    if let Ok(node) = self.load_all(env, b, entry.node.clone()) {
                        self.cache.put(b, node, entry.dirty);
                    }
                }
                return;
            }
            if self.part(env, b, &entry, i).is_err() {
                return;
            }
            b = entry.node.children[i].child;
        }
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
