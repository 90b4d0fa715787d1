//! The in-memory form of a node.
//!
//! A node is a header (height, frame prefix, pivots, child edges) plus
//! partitions: for an internal node, one message buffer per child; for a
//! leaf, basements holding sorted entries. Partitions load lazily and one at
//! a time, so a point query reads one partition per level. A node that is
//! modified is always fully loaded first (it is written back whole,
//! redirect-on-write).
//!
//! Keys, pivots and range bounds inside a node are stored relative to the
//! node's frame prefix (lifting): every key in the node's range starts with
//! that prefix, so it is stored once, on the parent's edge, and rebuilt on
//! the way down.

use std::sync::OnceLock;

use crate::basement::Basement;
use crate::buffer::MsgBuffer;
use crate::key_cmp::key_cmp;
use crate::msg::Msn;
use crate::pivots::Pivots;
use crate::table::BlockNum;

/// Where a partition sits inside its node's extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartLoc {
    /// Byte offset from the start of the node's extent.
    pub offset: u32,
    /// Stored (possibly compressed) length.
    pub stored_len: u32,
    /// Decoded length.
    pub raw_len: u32,
    /// Compression codec number.
    pub codec: u8,
    /// crc32c of the stored bytes.
    pub crc: u32,
}

/// Heap cost of a node's header, besides its prefix, pivots and edges.
const NODE_MEM_BYTES: usize = 64;
/// Heap cost of a pivot besides its bytes: its vector and its 8-byte head
/// (`pivots.rs`).
const PIVOT_MEM_BYTES: usize = 32;
/// Heap cost of a child edge besides its lift.
const EDGE_MEM_BYTES: usize = 48;
/// Heap cost of a loaded partition besides its contents.
pub(crate) const PART_MEM_BYTES: usize = 64;

/// What a node counts for: its heap bytes (the cache budget), its
/// content bytes (node-size decisions) and, for a leaf, its entries
/// (loaded partitions only; an unloaded one counts its decoded length).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub mem: usize,
    pub content: usize,
    pub entries: usize,
}

impl Tally {
    /// `self` with a part that counted `before` now counting `after`.
    pub fn replaced(self, before: Tally, after: Tally) -> Tally {
        Tally {
            mem: self.mem + after.mem - before.mem,
            content: self.content + after.content - before.content,
            entries: self.entries + after.entries - before.entries,
        }
    }

    pub fn plus(self, o: Tally) -> Tally {
        Tally {
            mem: self.mem + o.mem,
            content: self.content + o.content,
            entries: self.entries + o.entries,
        }
    }
}

/// A partition's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Buffer(MsgBuffer),
    Basement(Basement),
}

impl Part {
    /// Encoded-size accounting (node size decisions).
    pub fn bytes(&self) -> usize {
        match self {
            Part::Buffer(b) => b.bytes(),
            Part::Basement(b) => b.bytes(),
        }
    }

    /// Heap cost (cache budget).
    pub fn mem_bytes(&self) -> usize {
        match self {
            Part::Buffer(b) => b.mem_bytes(),
            Part::Basement(b) => b.mem_bytes(),
        }
    }
}

/// A partition slot: its place on disk (if the node was ever written) and
/// its contents once loaded.
#[derive(Clone, Debug, Default)]
pub(crate) struct PartSlot {
    pub disk: Option<PartLoc>,
    pub data: OnceLock<Part>,
    /// For a buffer read from disk and not loaded: what the header says
    /// it may contain. Cleared when the node changes.
    pub summary: Option<std::sync::Arc<crate::bloom::BufferSummary>>,
}

impl PartSlot {
    pub fn loaded(part: Part) -> Self {
        PartSlot {
            disk: None,
            data: OnceLock::from(part),
            summary: None,
        }
    }
}

/// A child pointer of an internal node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Edge {
    pub child: BlockNum,
    /// Bytes the child's frame prefix adds to this node's: the common
    /// prefix of the child's two bounding pivots, relative to this node.
    pub lift: Vec<u8>,
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// 0 for a leaf.
    pub height: u8,
    /// Absolute frame prefix of every key in this node.
    pub prefix: Vec<u8>,
    /// Separators between partitions (children for internal nodes,
    /// basements for leaves), relative to `prefix`.
    pub pivots: Pivots,
    /// Child edges; empty for a leaf.
    pub children: Vec<Edge>,
    pub parts: Vec<PartSlot>,
    /// Highest MSN of any message this node holds or has applied.
    pub max_msn: Msn,
    /// The dictionary of the image its stored partitions are in
    /// (`format::dict`): needed to decode any of them. Kept when the
    /// node changes (no partition is stored then, so it is unused until
    /// the next write replaces it): the cache's tally of the node stays
    /// what it was.
    pub dict: Option<std::sync::Arc<[u8]>>,
}

impl Node {
    pub fn empty_leaf(prefix: Vec<u8>) -> Self {
        Node {
            height: 0,
            prefix,
            pivots: Pivots::default(),
            children: Vec::new(),
            parts: vec![PartSlot::loaded(Part::Basement(Basement::default()))],
            max_msn: 0,
            dict: None,
        }
    }

    pub fn is_leaf(&self) -> bool {
        self.height == 0
    }

    /// Index of the partition holding relative key `rel`.
    pub fn part_index(&self, rel: &[u8]) -> usize {
        self.pivots.count_le(rel)
    }

    /// [`Node::part_index`], trying partition `guess` first (two pivot
    /// comparisons instead of a search when it holds `rel`).
    pub fn part_index_near(&self, rel: &[u8], guess: usize) -> usize {
        let above_lo = guess == 0
            || self
                .pivots
                .get(guess - 1)
                .is_some_and(|p| key_cmp(p, rel).is_le());
        let below_hi = self
            .pivots
            .get(guess)
            .is_none_or(|p| key_cmp(rel, p).is_lt());
        if guess < self.parts.len() && above_lo && below_hi {
            guess
        } else {
            self.part_index(rel)
        }
    }

    /// Index of the partition holding the greatest key below `hi`
    /// (relative; the last partition a range ending at `hi` reaches).
    pub fn part_index_before(&self, hi: &[u8]) -> usize {
        self.pivots
            .partition_point(|p| p.as_slice() < hi)
            .min(self.parts.len().saturating_sub(1))
    }

    /// Does a basement keep its bytes as a slice of the node's read
    /// buffer ([`crate::format::raw_bytes::RawBytes`])?
    pub fn has_shared_basements(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p.data.get(), Some(Part::Basement(b)) if b.is_shared()))
    }

    /// Gives every basement whose bytes are a slice of the node's read
    /// buffer bytes of its own (a copy each), so that the buffer is freed:
    /// before the writer changes the node, whose replaced basements would
    /// otherwise stay in memory, counted nowhere, as long as any sibling
    /// kept the buffer. True if there was one.
    pub fn unshare(&mut self) -> bool {
        let mut any = false;
        if self.is_leaf() {
            for slot in &mut self.parts {
                if let Some(Part::Basement(b)) = slot.data.get_mut() {
                    any |= b.is_shared();
                    b.unshare();
                }
            }
        }
        any
    }

    pub fn is_fully_loaded(&self) -> bool {
        self.parts.iter().all(|p| p.data.get().is_some())
    }

    /// Bytes of all partitions (loaded ones only are counted exactly).
    pub fn content_bytes(&self) -> usize {
        self.tally().content
    }

    /// What the whole node counts for, in one pass over its partitions.
    pub fn tally(&self) -> Tally {
        let header = NODE_MEM_BYTES
            + self.prefix.len()
            + self.dict.as_ref().map_or(0, |d| d.len())
            + self
                .children
                .iter()
                .map(|e| e.lift.len() + EDGE_MEM_BYTES)
                .sum::<usize>();
        let mut t = self.span_tally(0..self.parts.len());
        t.mem += header;
        t
    }

    /// What partitions `span` count for, with every pivot that bounds
    /// one of them (the one before the first and the one after the
    /// last): a change inside the span that cuts a partition or drops
    /// one changes only these, so the tally of the span before and after
    /// gives the change to the node's tally without visiting the rest.
    pub fn span_tally(&self, span: std::ops::Range<usize>) -> Tally {
        let first_pivot = span.start.saturating_sub(1);
        let end_pivot = span.end.min(self.pivots.len()).max(first_pivot);
        let pivots = self.pivots[first_pivot..end_pivot]
            .iter()
            .map(|p| p.len() + PIVOT_MEM_BYTES)
            .sum::<usize>();
        let mut t = Tally {
            mem: pivots,
            ..Tally::default()
        };
        for p in &self.parts[span] {
            t.mem += p.summary.as_ref().map_or(0, |s| s.mem_bytes());
            match p.data.get() {
                Some(d) => {
                    t.mem += d.mem_bytes() + PART_MEM_BYTES;
                    t.content += d.bytes();
                    if let Part::Basement(b) = d {
                        t.entries += b.len();
                    }
                }
                None => t.content += p.disk.map_or(0, |l| l.raw_len as usize),
            }
        }
        t
    }

    pub fn buffer(&self, i: usize) -> &MsgBuffer {
        match self.parts[i].data.get() {
            Some(Part::Buffer(b)) => b,
            _ => panic!("buffer {i} of an internal node is not loaded"),
        }
    }

    pub fn buffer_mut(&mut self, i: usize) -> &mut MsgBuffer {
        match self.parts[i].data.get_mut() {
            Some(Part::Buffer(b)) => b,
            _ => panic!("buffer {i} of an internal node is not loaded"),
        }
    }

    pub fn basement_mut(&mut self, i: usize) -> &mut Basement {
        match self.parts[i].data.get_mut() {
            Some(Part::Basement(b)) => b,
            _ => panic!("basement {i} of a leaf is not loaded"),
        }
    }

    pub fn basement(&self, i: usize) -> &Basement {
        match self.parts[i].data.get() {
            Some(Part::Basement(b)) => b,
            _ => panic!("basement {i} of a leaf is not loaded"),
        }
    }

    /// Sum of the loaded buffers' bytes (internal nodes are fully loaded
    /// whenever this is asked).
    pub fn buffer_bytes(&self) -> usize {
        (0..self.parts.len())
            .map(|i| self.parts[i].data.get().map_or(0, |p| p.bytes()))
            .sum()
    }

    /// Does the node hold loaded partitions that are also on disk (and so
    /// can be dropped and read again)?
    pub fn has_droppable_parts(&self) -> bool {
        self.parts
            .iter()
            .any(|p| p.disk.is_some() && p.data.get().is_some())
    }

    /// Unloads every partition that is on disk; returns what they held
    /// (the caller decides where it is freed).
    pub fn unload_stored_parts(&mut self) -> Vec<Part> {
        // Sized up front: growing the list reallocated it several times
        // per leaf (3 % of the writer's samples under random inserts).
        let mut taken = Vec::with_capacity(self.parts.len());
        taken.extend(
            self.parts
                .iter_mut()
                .filter(|p| p.disk.is_some())
                .filter_map(|p| p.data.take()),
        );
        taken
    }

    /// A copy of the header with every partition that is on disk unloaded.
    pub fn without_stored_parts(&self) -> Node {
        Node {
            height: self.height,
            prefix: self.prefix.clone(),
            pivots: self.pivots.clone(),
            children: self.children.clone(),
            parts: self
                .parts
                .iter()
                .map(|p| match p.disk {
                    Some(loc) => PartSlot {
                        disk: Some(loc),
                        data: OnceLock::new(),
                        summary: p.summary.clone(),
                    },
                    None => p.clone(),
                })
                .collect(),
            max_msn: self.max_msn,
            dict: self.dict.clone(),
        }
    }

    /// Forgets where partitions were on disk: the node is dirty and will
    /// be written whole to a new place.
    pub fn mark_modified(&mut self) {
        for p in &mut self.parts {
            p.disk = None;
            p.summary = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `part_index_near` answers as `part_index` does, whatever the guess.
    #[test]
    fn part_index_near_agrees_with_part_index_whatever_the_guess() {
        let mut node = Node::empty_leaf(Vec::new());
        node.pivots = vec![vec![10], vec![20], vec![30]].into();
        node.parts = (0..4)
            .map(|_| PartSlot::loaded(Part::Basement(Basement::default())))
            .collect();
        for key in 0u8..40 {
            for guess in 0..6 {
                assert_eq!(
                    node.part_index_near(&[key], guess),
                    node.part_index(&[key]),
                    "key {key}, guess {guess}"
                );
            }
        }
    }
}
