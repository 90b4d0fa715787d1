//! `verify()`: every structural invariant of the tree, checked by walking
//! all of it. Used after every step of the model tests and by fsck.
//!
//! Checked: uniform height and heights recorded in the block table; pivot
//! order; every key, message and range inside its node's and partition's
//! bounds; frame prefixes equal to the common prefix of the bounds, and
//! lifts equal to the difference between parent and child frames; per-key
//! MSN order in a buffer and MSNs below the counter; messages higher on a
//! path newer than those below them for the same keys; range deletes
//! disjoint and newer than... nothing older they cover; buffer and basement
//! byte accounting; reference counts equal to the edges that reach each
//! block; no unreachable block; no two extents overlapping, and none
//! overlapping free space.

use std::collections::HashMap;

use super::frame::{concat, Bounds};
use super::state::{Env, State};
use super::write::child_bounds;
use crate::buffer::MsgBuffer;
use crate::error::{Error, Result};
use crate::node::{Node, Part};
use crate::table::BlockNum;

/// What `verify` walked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Tree height (0: a single leaf).
    pub height: u8,
    /// Nodes reached.
    pub nodes: u64,
    /// Leaves reached.
    pub leaves: u64,
    /// Key/value pairs in leaves.
    pub leaf_entries: u64,
    /// Point messages waiting in buffers.
    pub buffered_points: u64,
    /// Range deletes waiting in buffers.
    pub buffered_ranges: u64,
    /// Bytes of buffered messages.
    pub buffered_bytes: u64,
    /// Bytes of node extents in use.
    pub extent_bytes: u64,
}

fn bad(msg: String) -> Error {
    Error::Invariant(msg)
}

struct Walk<'a> {
    st: &'a State,
    env: Env<'a>,
    refs: HashMap<BlockNum, u32>,
    report: VerifyReport,
}

pub(crate) fn verify(st: &State, env: Env<'_>) -> Result<VerifyReport> {
    let mut w = Walk {
        st,
        env,
        refs: HashMap::new(),
        report: VerifyReport {
            height: st.height,
            ..Default::default()
        },
    };
    let mut path: Vec<(Vec<u8>, MsgBuffer)> = Vec::new();
    w.node(st.root, st.height, &Bounds::all(), &[], &mut path)?;
    // Reference counts: the root has one (from the superblock).
    for (b, e) in st.table.entries() {
        let reached = w.refs.get(&b).copied().unwrap_or(0);
        if reached == 0 {
            return Err(bad(format!("block {b} is allocated but unreachable")));
        }
        if e.refcount != reached {
            return Err(bad(format!(
                "block {b} has refcount {} but {reached} references",
                e.refcount
            )));
        }
    }
    // Extents: disjoint, inside the node area, not free.
    let mut used: Vec<(u64, u64, String)> = st
        .table
        .entries()
        .filter_map(|(b, e)| e.loc.map(|x| (x.offset, x.len, format!("block {b}"))))
        .collect();
    if let Some((o, l)) = st.table_blob {
        used.push((o, l, "block table".into()));
    }
    used.sort();
    for pair in used.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            return Err(bad(format!(
                "{} and {} overlap on the device",
                pair[0].2, pair[1].2
            )));
        }
    }
    for (o, l, what) in &used {
        if *o < st.layout.node_start || o + l > st.layout.device_bytes {
            return Err(bad(format!("{what} lies outside the node area")));
        }
        w.report.extent_bytes += l;
    }
    let free: Vec<(u64, u64)> = st.table.space.iter().collect();
    for (o, l, what) in &used {
        let i = free.partition_point(|(fo, _)| fo <= o);
        let prev_overlaps = i > 0 && free[i - 1].0 + free[i - 1].1 > *o;
        let next_overlaps = i < free.len() && free[i].0 < o + l;
        if prev_overlaps || next_overlaps {
            return Err(bad(format!("{what} overlaps free space")));
        }
    }
    Ok(w.report)
}

impl Walk<'_> {
    fn load(&self, b: BlockNum) -> Result<Node> {
        let node = match self.st.cache.get(b) {
            Some(e) => e.node.clone(),
            None => {
                let e = self.st.node_for_read(self.env, b)?;
                let n = e.node.clone();
                // Do not leave the whole tree in the cache.
                if !e.dirty {
                    drop(e);
                    self.st.cache.discard(b);
                }
                n
            }
        };
        self.st.load_all(self.env, b, node)
    }

    fn node(
        &mut self,
        b: BlockNum,
        height: u8,
        bounds: &Bounds,
        expect_prefix: &[u8],
        path: &mut Vec<(Vec<u8>, MsgBuffer)>,
    ) -> Result<()> {
        let count = self.refs.entry(b).or_insert(0);
        *count += 1;
        if *count > 1 {
            return Ok(()); // A shared subtree is walked once.
        }
        let entry = self
            .st
            .table
            .get(b)
            .ok_or_else(|| bad(format!("edge to unallocated block {b}")))?;
        let node = self.load(b)?;
        self.report.nodes += 1;
        if node.height != height || entry.height != height {
            return Err(bad(format!(
                "block {b}: height {} (table {}), expected {height}",
                node.height, entry.height
            )));
        }
        let frame = bounds.frame();
        if node.prefix != frame || node.prefix != expect_prefix {
            return Err(bad(format!(
                "block {b}: frame prefix is not the common prefix of its bounds"
            )));
        }
        if node.max_msn >= self.st.next_msn {
            return Err(bad(format!("block {b}: max MSN from the future")));
        }
        if node.pivots.len() + 1 != node.parts.len() {
            return Err(bad(format!(
                "block {b}: {} pivots for {} partitions",
                node.pivots.len(),
                node.parts.len()
            )));
        }
        for (i, p) in node.pivots.iter().enumerate() {
            if i > 0 && node.pivots[i - 1] >= *p {
                return Err(bad(format!("block {b}: pivots out of order")));
            }
            let abs = concat(&node.prefix, p);
            if abs <= bounds.lo || bounds.hi.as_ref().is_some_and(|h| abs >= *h) {
                return Err(bad(format!("block {b}: pivot outside the node's bounds")));
            }
        }
        if node.is_leaf() {
            self.report.leaves += 1;
            for j in 0..node.parts.len() {
                let Some(Part::Basement(bm)) = node.parts[j].data.get() else {
                    return Err(bad(format!("leaf {b} holds a buffer")));
                };
                let pb = child_bounds(&node, bounds, j);
                for (k, _) in bm.iter() {
                    if !pb.contains(&concat(&node.prefix, k)) {
                        return Err(bad(format!("leaf {b}: key outside basement {j}'s bounds")));
                    }
                }
                let recount: usize = bm
                    .iter()
                    .map(|(k, v)| crate::basement::entry_bytes(k, v))
                    .sum();
                if recount != bm.bytes() {
                    return Err(bad(format!("leaf {b}: basement {j} byte count is off")));
                }
                self.report.leaf_entries += bm.len() as u64;
            }
            if height != 0 {
                return Err(bad(format!("leaf {b} at height {height}")));
            }
            return Ok(());
        }
        if node.children.len() != node.parts.len() {
            return Err(bad(format!(
                "block {b}: children and buffers differ in number"
            )));
        }
        for j in 0..node.parts.len() {
            let Some(Part::Buffer(buf)) = node.parts[j].data.get() else {
                return Err(bad(format!("internal node {b} holds a basement")));
            };
            let cb = child_bounds(&node, bounds, j);
            let cframe = cb.frame();
            if concat(&node.prefix, &node.children[j].lift) != cframe {
                return Err(bad(format!(
                    "block {b}: lift of child {j} is not its frame"
                )));
            }
            self.check_buffer(b, &node.prefix, buf, &cb, path)?;
            if let Some(sum) = &node.parts[j].summary {
                let missed = buf.keys().any(|k| !sum.filter.may_contain(k));
                if sum.has_ranges == buf.ranges.is_empty() || missed {
                    return Err(bad(format!(
                        "block {b}: the header's summary of buffer {j} misses messages"
                    )));
                }
                // A point query trusts the segment directory to say where
                // a key's messages are: each segment starts at a key the
                // buffer holds, and no key lies before the first segment.
                let misplaced = sum
                    .segments
                    .iter()
                    .any(|seg| buf.lookup(&seg.first).1.is_empty())
                    || sum.segments.first().is_some_and(|seg| {
                        buf.keys().next().is_some_and(|k| k < seg.first.as_slice())
                    });
                if misplaced {
                    return Err(bad(format!(
                        "block {b}: the segment directory of buffer {j} does not match its keys"
                    )));
                }
            }
            path.push((node.prefix.clone(), buf.clone()));
            let r = self.node(node.children[j].child, height - 1, &cb, &cframe, path);
            path.pop();
            r?;
        }
        Ok(())
    }

    fn check_buffer(
        &mut self,
        b: BlockNum,
        prefix: &[u8],
        buf: &MsgBuffer,
        cb: &Bounds,
        path: &[(Vec<u8>, MsgBuffer)],
    ) -> Result<()> {
        let mut recount = buf.clone();
        recount.recount();
        if recount.bytes() != buf.bytes() {
            return Err(bad(format!("block {b}: buffer byte count is off")));
        }
        self.report.buffered_bytes += buf.bytes() as u64;
        let mut last_hi: Option<&[u8]> = None;
        for (lo, r) in buf.ranges.iter() {
            self.report.buffered_ranges += 1;
            if lo >= &r.hi || last_hi.is_some_and(|h| h > lo.as_slice()) {
                return Err(bad(format!(
                    "block {b}: range deletes empty or overlapping"
                )));
            }
            last_hi = Some(&r.hi);
            let alo = concat(prefix, lo);
            let ahi = concat(prefix, &r.hi);
            if alo < cb.lo || cb.hi.as_ref().is_some_and(|h| ahi > *h) {
                return Err(bad(format!(
                    "block {b}: range delete outside its child's bounds"
                )));
            }
            if r.msn >= self.st.next_msn {
                return Err(bad(format!("block {b}: range delete MSN from the future")));
            }
            for (apfx, abuf) in path {
                if !alo.starts_with(apfx) {
                    continue;
                }
                let rlo = &alo[apfx.len()..];
                let rhi = &ahi[apfx.len()..];
                let older_above = abuf
                    .points_in(rlo, Some(rhi))
                    .any(|(_, l)| l[0].msn < r.msn)
                    || abuf
                        .ranges
                        .overlapping(rlo, Some(rhi))
                        .any(|(_, ar)| ar.msn < r.msn);
                if older_above {
                    return Err(bad(format!(
                        "block {b}: a message above is older than a range delete below"
                    )));
                }
            }
        }
        for (k, list) in buf.iter_points() {
            self.report.buffered_points += list.len() as u64;
            let abs = concat(prefix, k);
            if !cb.contains(&abs) {
                return Err(bad(format!(
                    "block {b}: message key outside its child's bounds"
                )));
            }
            if list.is_empty() || list.windows(2).any(|w| w[0].msn >= w[1].msn) {
                return Err(bad(format!(
                    "block {b}: messages of a key empty or out of MSN order"
                )));
            }
            if list[1..].iter().any(|m| m.op.is_blind_total()) {
                return Err(bad(format!(
                    "block {b}: a total message after another message of its key"
                )));
            }
            if let Some((_, r)) = buf.ranges.covering(k) {
                if r.msn >= list[0].msn {
                    return Err(bad(format!(
                        "block {b}: a point message older than the range delete covering it"
                    )));
                }
            }
            let newest = list.last().expect("non-empty").msn;
            if newest >= self.st.next_msn {
                return Err(bad(format!("block {b}: MSN from the future")));
            }
            for (apfx, abuf) in path {
                let rel = &abs[apfx.len()..];
                let (covered, above) = abuf.lookup(rel);
                let range_older = covered
                    && abuf
                        .ranges
                        .covering(rel)
                        .is_some_and(|(_, r)| r.msn < newest);
                if range_older || above.first().is_some_and(|m| m.msn < newest) {
                    return Err(bad(format!(
                        "block {b}: a message above is older than one below for the same key"
                    )));
                }
            }
        }
        Ok(())
    }
}
