//! Encoding of a whole node: header, then partitions.
//!
//! The header is read with one I/O (its length and checksum are in the
//! block table), and names each partition's place, length, codec and
//! checksum, so any one partition can then be read and verified alone.

use super::bytes::{Dec, DecResult, Enc};
use super::checksum;
use super::dict;
use super::frozen::{FrozenBasement, FrozenPoints};
use super::partition::{
    compress, compress_tail, decompress, encode_basement, encode_buffer, PART_BASEMENT, PART_BUFFER,
};
use super::raw_bytes::RawBytes;
use super::segments;
use crate::basement::Basement;
use crate::bloom::{Bloom, BufferSummary};
use crate::buffer::MsgBuffer;
use crate::config::Compression;
use crate::node::{Edge, Node, Part, PartLoc, PartSlot};
use crate::table::BlockNum;
use crate::MAX_KEY_BYTES;

const NODE_MAGIC: u32 = u32::from_le_bytes(*b"WODN");
/// Bytes of one partition-table entry.
const PART_ENTRY_BYTES: usize = 1 + 4 + 4 + 4 + 1 + 4;
/// Header flag: a dictionary (`format::dict`) follows the child edges.
const NODE_HAS_DICT: u8 = 1;
/// Edge flag: the edge carries a translation prefix (reserved for clones).
const EDGE_HAS_TRANSLATION: u8 = 1;
const MAX_HEIGHT: u8 = 32;

/// A serialized node ready to be written.
#[derive(Debug)]
pub(crate) struct NodeImage {
    pub bytes: Vec<u8>,
    pub header_len: u32,
    pub header_crc: u32,
    pub part_locs: Vec<PartLoc>,
    /// Internal nodes: each buffer's summary as the header records it, so
    /// a node kept cached after it is written has them without a reread.
    pub summaries: Vec<std::sync::Arc<crate::bloom::BufferSummary>>,
    /// The dictionary the partitions were compressed against, if any.
    pub dict: Option<std::sync::Arc<[u8]>>,
}

impl NodeImage {
    /// The extent this image occupies when written at `offset`.
    pub fn extent_at(&self, offset: u64) -> crate::table::Extent {
        crate::table::Extent {
            offset,
            len: crate::alloc::round_up(self.bytes.len() as u64),
            header_len: self.header_len,
            header_crc: self.header_crc,
        }
    }

    /// Records in `node` (the one this image was made from) where its
    /// partitions went, its buffers' summaries and its dictionary, as a
    /// header read back from the image would have them.
    pub fn set_places(&self, node: &mut Node) {
        node.dict = self.dict.clone();
        for (slot, loc) in node.parts.iter_mut().zip(&self.part_locs) {
            slot.disk = Some(*loc);
        }
        if node.height > 0 {
            for (slot, summary) in node.parts.iter_mut().zip(&self.summaries) {
                slot.summary = Some(summary.clone());
            }
        }
    }
}

/// Serializes a fully loaded node. A buffer larger than `segment_bytes`
/// is stored in segments of about that size (`format::segments`).
pub(crate) fn encode_node(
    node: &Node,
    block: BlockNum,
    compression: Compression,
    segment_bytes: usize,
) -> NodeImage {
    encode_node_into(node, block, compression, segment_bytes, Vec::new())
}

/// [`encode_node`], a leaf's image into `buf` (emptied first): a buffer
/// kept from an earlier image has its pages mapped already
/// (`tree::image_bufs`). An internal node's image is assembled from its
/// parts' buffers instead.
pub(crate) fn encode_node_into(
    node: &Node,
    block: BlockNum,
    compression: Compression,
    segment_bytes: usize,
    buf: Vec<u8>,
) -> NodeImage {
    if node.height == 0 {
        return encode_leaf(node, block, compression, buf);
    }
    // Every buffer is encoded before any is compressed: the dictionary
    // is taken from the largest.
    let mut kinds = Vec::with_capacity(node.parts.len());
    let mut encoded = Vec::with_capacity(node.parts.len());
    for slot in &node.parts {
        let mut e = Enc::with_capacity(slot.data.get().map_or(0, Part::bytes) + 16);
        let mut cuts = Vec::new();
        match slot
            .data
            .get()
            .expect("a node is fully loaded before it is written")
        {
            Part::Basement(b) => {
                kinds.push(PART_BASEMENT);
                encode_basement(b, &mut e);
            }
            Part::Buffer(b) => {
                kinds.push(PART_BUFFER);
                cuts = encode_buffer(b, &mut e, segment_bytes.max(1));
            }
        }
        encoded.push((e.buf, cuts));
    }
    let raws: Vec<&[u8]> = encoded.iter().map(|(raw, _)| raw.as_slice()).collect();
    let node_dict = dict::for_buffers(&raws, compression);
    let d = node_dict.as_deref().unwrap_or_default();
    let mut stored = Vec::with_capacity(node.parts.len());
    let mut segment_dirs = Vec::new();
    for (raw, cuts) in encoded {
        let raw_len = raw.len() as u32;
        if cuts.len() > 1 {
            let (bytes, segments) = segments::split(raw, &cuts, compression, d);
            stored.push((raw_len, segments::CODEC_SEGMENTS, bytes));
            segment_dirs.push(segments);
        } else {
            let (codec, bytes) = compress(raw, compression, d);
            stored.push((raw_len, codec, bytes));
            segment_dirs.push(Vec::new());
        }
    }

    let mut h = header_start(node, block, node_dict.as_deref());
    // Internal nodes: a summary of each buffer (range deletes present?
    // a Bloom filter of its keys) after the partition table.
    let mut summaries = Enc::default();
    let mut kept = Vec::new();
    if node.height > 0 {
        for (slot, segments) in node.parts.iter().zip(segment_dirs) {
            let Some(Part::Buffer(b)) = slot.data.get() else {
                continue;
            };
            summaries.u8(u8::from(!b.ranges.is_empty()));
            let f = Bloom::build(b.key_count(), b.keys());
            summaries.u8(f.probes);
            summaries.bytes(&f.bits);
            segments::encode_dir(&segments, &mut summaries);
            kept.push(std::sync::Arc::new(crate::bloom::BufferSummary {
                has_ranges: !b.ranges.is_empty(),
                filter: f,
                segments,
            }));
        }
    }
    let header_len = h.len() + node.parts.len() * PART_ENTRY_BYTES + summaries.len() + 4;
    let mut offset = header_len;
    let mut part_locs = Vec::with_capacity(stored.len());
    for (i, (raw_len, codec, bytes)) in stored.iter().enumerate() {
        let loc = PartLoc {
            offset: offset as u32,
            stored_len: bytes.len() as u32,
            raw_len: *raw_len,
            codec: *codec,
            crc: checksum(bytes),
        };
        part_entry(&mut h, kinds[i], &loc);
        part_locs.push(loc);
        offset += bytes.len();
    }
    h.raw(&summaries.buf);
    let header_crc = checksum(&h.buf);
    h.u32(header_crc);
    debug_assert_eq!(h.len(), header_len);
    let mut out = h.buf;
    out.reserve(offset - header_len);
    for (_, _, bytes) in stored {
        out.extend_from_slice(&bytes);
    }
    NodeImage {
        bytes: out,
        header_len: header_len as u32,
        header_crc,
        part_locs,
        summaries: kept,
        dict: node_dict,
    }
}

/// The header's fields before the partition table: everything but the
/// partitions' places, lengths and checksums.
fn header_start(node: &Node, block: BlockNum, dict: Option<&[u8]>) -> Enc {
    let mut h = Enc::with_capacity(256);
    h.u32(NODE_MAGIC);
    h.u16(super::FORMAT_VERSION as u16);
    h.u8(node.height);
    h.u8(if dict.is_some() { NODE_HAS_DICT } else { 0 });
    h.u64(block);
    h.u64(node.max_msn);
    h.u32(node.parts.len() as u32);
    h.bytes(&node.prefix);
    for p in node.pivots.iter() {
        h.bytes(p);
    }
    for edge in &node.children {
        h.u64(edge.child);
        h.bytes(&edge.lift);
        h.u8(0);
    }
    if let Some(d) = dict {
        dict::encode(d, &mut h);
    }
    h
}

/// One entry of the partition table.
fn part_entry(h: &mut Enc, kind: u8, loc: &PartLoc) {
    h.u8(kind);
    h.u32(loc.offset);
    h.u32(loc.stored_len);
    h.u32(loc.raw_len);
    h.u8(loc.codec);
    h.u32(loc.crc);
}

/// [`encode_node`] of a leaf, in one buffer: a leaf's header has no
/// buffer summaries, so its length is known before the partitions are
/// encoded, and each basement is encoded (and compressed, if that pays)
/// straight into its place after a gap left for the header. Encoding
/// each partition into a buffer of its own and joining them copied every
/// byte of a sequential write once more (3 % of the daemon's CPU).
fn encode_leaf(node: &Node, block: BlockNum, compression: Compression, buf: Vec<u8>) -> NodeImage {
    let leaf_dict = dict::for_leaf(node, compression);
    let mut h = header_start(node, block, leaf_dict.as_deref());
    let header_len = h.len() + node.parts.len() * PART_ENTRY_BYTES + 4;
    let parts_bytes: usize = node
        .parts
        .iter()
        .map(|slot| slot.data.get().map_or(0, Part::bytes) + 16)
        .sum();
    let mut out = Enc { buf };
    out.buf.clear();
    out.buf.reserve_exact(header_len + parts_bytes);
    out.buf.resize(header_len, 0);
    let mut part_locs = Vec::with_capacity(node.parts.len());
    for slot in &node.parts {
        let Some(Part::Basement(b)) = slot.data.get() else {
            panic!("a leaf is fully loaded, with basements only, before it is written");
        };
        let start = out.len();
        encode_basement(b, &mut out);
        let raw_len = out.len() - start;
        let codec = compress_tail(
            &mut out.buf,
            start,
            compression,
            leaf_dict.as_deref().unwrap_or_default(),
        );
        let loc = PartLoc {
            offset: start as u32,
            stored_len: (out.len() - start) as u32,
            raw_len: raw_len as u32,
            codec,
            crc: checksum(&out.buf[start..]),
        };
        part_entry(&mut h, PART_BASEMENT, &loc);
        part_locs.push(loc);
    }
    let header_crc = checksum(&h.buf);
    h.u32(header_crc);
    debug_assert_eq!(h.len(), header_len);
    out.buf[..header_len].copy_from_slice(&h.buf);
    NodeImage {
        bytes: out.buf,
        header_len: header_len as u32,
        header_crc,
        part_locs,
        summaries: Vec::new(),
        dict: leaf_dict,
    }
}

/// Decodes a node header (exactly the header bytes, checksum included) into
/// a node whose partitions are not loaded yet. `extent_len` bounds the
/// partition offsets.
pub(crate) fn decode_header(buf: &[u8], block: BlockNum, extent_len: u64) -> DecResult<Node> {
    if buf.len() < 4 {
        return Err("node header shorter than its checksum".into());
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    let crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if checksum(body) != crc {
        return Err("node header checksum mismatch".into());
    }
    let mut d = Dec::new(body);
    if d.u32("magic")? != NODE_MAGIC {
        return Err("bad node magic".into());
    }
    let version = d.u16("version")?;
    if u32::from(version) != super::FORMAT_VERSION {
        return Err(format!("node format version {version}"));
    }
    let height = d.u8("height")?;
    if height > MAX_HEIGHT {
        return Err(format!("node height {height} is impossible"));
    }
    let flags = d.u8("flags")?;
    if flags & !NODE_HAS_DICT != 0 {
        return Err(format!("unknown node flags {flags:#x}"));
    }
    let stored_block = d.u64("block number")?;
    if stored_block != block {
        return Err(format!(
            "node belongs to block {stored_block}, expected block {block}"
        ));
    }
    let max_msn = d.u64("max msn")?;
    let n_parts = d.u32("partition count")? as usize;
    if n_parts == 0 || n_parts > d.remaining() {
        return Err(format!("partition count {n_parts}"));
    }
    let prefix = d.bytes("prefix", MAX_KEY_BYTES)?.to_vec();
    let mut pivots = Vec::with_capacity(n_parts - 1);
    for _ in 1..n_parts {
        let p = d.bytes("pivot", MAX_KEY_BYTES)?.to_vec();
        if pivots.last().is_some_and(|l: &Vec<u8>| *l >= p) {
            return Err("pivots out of order".into());
        }
        pivots.push(p);
    }
    let mut children = Vec::new();
    if height > 0 {
        for _ in 0..n_parts {
            let child = d.u64("child block")?;
            let lift = d.bytes("lift", MAX_KEY_BYTES)?.to_vec();
            let flags = d.u8("edge flags")?;
            if flags & EDGE_HAS_TRANSLATION != 0 {
                return Err("translation prefixes are not supported by this version".into());
            }
            if flags != 0 {
                return Err(format!("unknown edge flags {flags:#x}"));
            }
            children.push(Edge { child, lift });
        }
    }
    let node_dict = if flags & NODE_HAS_DICT != 0 {
        Some(dict::decode(&mut d)?)
    } else {
        None
    };
    let want_kind = if height == 0 {
        PART_BASEMENT
    } else {
        PART_BUFFER
    };
    let mut parts = Vec::with_capacity(n_parts);
    for _ in 0..n_parts {
        let kind = d.u8("partition kind")?;
        let loc = PartLoc {
            offset: d.u32("partition offset")?,
            stored_len: d.u32("partition length")?,
            raw_len: d.u32("partition raw length")?,
            codec: d.u8("partition codec")?,
            crc: d.u32("partition checksum")?,
        };
        if kind != want_kind {
            return Err(format!(
                "partition kind {kind} in a node of height {height}"
            ));
        }
        if u64::from(loc.offset) + u64::from(loc.stored_len) > extent_len
            || (loc.offset as usize) < buf.len()
        {
            return Err("partition outside its node".into());
        }
        if loc.raw_len as usize > 64 * extent_len.max(1 << 20) as usize {
            return Err("partition raw length implausible".into());
        }
        parts.push(PartSlot {
            disk: Some(loc),
            data: Default::default(),
            summary: None,
        });
    }
    if height > 0 {
        for slot in &mut parts {
            let loc = slot.disk.expect("set above");
            let has_ranges = match d.u8("buffer flags")? {
                0 => false,
                1 => true,
                f => return Err(format!("unknown buffer flags {f}")),
            };
            let probes = d.u8("filter probes")?;
            if probes == 0 || probes > 32 {
                return Err(format!("filter with {probes} probes"));
            }
            let bits = d.bytes("filter", 1 << 24)?.to_vec();
            let segments = segments::decode_dir(&mut d, &loc)?;
            slot.summary = Some(std::sync::Arc::new(BufferSummary {
                has_ranges,
                filter: Bloom { bits, probes },
                segments,
            }));
        }
    }
    d.finish("node header")?;
    Ok(Node {
        height,
        prefix,
        pivots: pivots.into(),
        children,
        parts,
        max_msn,
        dict: node_dict,
    })
}

/// Partition `i` of `node` (whose header was read with it) decoded from
/// its stored bytes at `loc` (checksum not checked): decompressed against
/// the node's dictionary if it has one, or a segmented buffer's pieces
/// (named by the header's summary) joined.
pub(crate) fn decoded_bytes(
    stored: std::borrow::Cow<'_, [u8]>,
    loc: &PartLoc,
    node: &Node,
    i: usize,
) -> DecResult<Vec<u8>> {
    let dict = node.dict.as_deref().unwrap_or_default();
    if loc.codec != segments::CODEC_SEGMENTS || node.is_leaf() {
        return decompress(stored, loc.codec, loc.raw_len as usize, dict);
    }
    let pieces = node.parts[i]
        .summary
        .as_deref()
        .map_or(&[][..], |s| s.segments.as_slice());
    if pieces.is_empty() {
        return Err("segmented buffer without a segment directory".into());
    }
    segments::join(&stored, pieces, loc.raw_len as usize, dict)
}

/// [`decode_part`] of a leaf's basement stored uncompressed at
/// `read.bytes()[start..]`, kept as a slice of `read` instead of a copy
/// (see [`RawBytes`]).
pub(crate) fn decode_shared_basement(
    read: &std::sync::Arc<wodfs_device::OwnedRead>,
    start: usize,
    loc: &PartLoc,
) -> DecResult<Part> {
    let len = loc.stored_len as usize;
    let stored = read
        .bytes()
        .get(start..start + len)
        .ok_or("partition past the end of the bytes read")?;
    if checksum(stored) != loc.crc {
        return Err("partition checksum mismatch".into());
    }
    if Compression::from_u8(loc.codec) != Some(Compression::None) || len != loc.raw_len as usize {
        return Err("a shared basement must be stored uncompressed".into());
    }
    let raw = RawBytes::shared(read, start, len);
    Ok(Part::Basement(Basement::from_frozen(
        FrozenBasement::parse(raw)?,
    )))
}

/// Verifies and decodes partition `i` of `node` from its stored bytes at
/// `loc` (see [`decoded_bytes`]).
pub(crate) fn decode_part<'s>(
    stored: impl Into<std::borrow::Cow<'s, [u8]>>,
    loc: &PartLoc,
    node: &Node,
    i: usize,
) -> DecResult<Part> {
    let stored = stored.into();
    if checksum(&stored) != loc.crc {
        return Err("partition checksum mismatch".into());
    }
    let raw = decoded_bytes(stored, loc, node, i)?;
    // Kept frozen: searched in place until the writer changes it.
    if node.is_leaf() {
        Ok(Part::Basement(Basement::from_frozen(
            FrozenBasement::parse(raw)?,
        )))
    } else {
        let (ranges, points) = FrozenPoints::parse(raw)?;
        Ok(Part::Buffer(MsgBuffer::from_frozen(ranges, points)))
    }
}
