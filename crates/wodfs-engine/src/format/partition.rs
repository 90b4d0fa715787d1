//! Encoding of partitions: leaf basements and internal message buffers,
//! and the per-partition compression wrapper.

use std::borrow::Cow;

use super::bytes::{Dec, DecResult, Enc};
use super::frozen::{FrozenBasement, FrozenPoints};
use super::segments::Cut;
use crate::basement::Basement;
use crate::buffer::{ListRef, MsgBuffer};
use crate::config::Compression;
use crate::msg::{kind, Msn, PointMsg, PointOp};
use crate::range_index::RangeIndex;
use crate::MAX_VALUE_BYTES;

/// Partition kinds (persisted; never renumber).
pub(crate) const PART_BASEMENT: u8 = 1;
pub(crate) const PART_BUFFER: u8 = 2;

pub(crate) fn encode_basement(b: &Basement, e: &mut Enc) {
    if let Some(raw) = b.frozen_raw() {
        // Unchanged since it was read: its bytes are its encoding.
        e.raw(raw);
        return;
    }
    e.u8(PART_BASEMENT);
    e.varint(b.len() as u64);
    for (k, v) in b.iter() {
        e.bytes(k);
        e.bytes(v);
    }
}

/// Decodes a basement into its open (map) form.
pub(crate) fn decode_basement(buf: &[u8]) -> DecResult<Basement> {
    let mut b = Basement::from_frozen(FrozenBasement::parse(buf.to_vec())?);
    b.thaw();
    Ok(b)
}

/// Encodes a buffer and returns where its encoding may be cut into
/// segments of at least `every` bytes (see `format::segments`): the first
/// key's entry, then each key's entry that starts `every` or more bytes
/// after the previous cut. Empty for a buffer without point messages.
pub(crate) fn encode_buffer(b: &MsgBuffer, e: &mut Enc, every: usize) -> Vec<Cut> {
    let start = e.len();
    encode_ranges(&b.ranges, e);
    e.varint(b.key_count() as u64);
    let mut cuts: Vec<Cut> = Vec::new();
    let mut cut_before = |e: &Enc, k: &[u8]| {
        let at = e.len() - start;
        if cuts.last().is_none_or(|c| at - c.0 >= every) {
            cuts.push((at, k.to_vec()));
        }
    };
    for (k, list) in b.lists() {
        cut_before(e, k);
        e.bytes(k);
        match list {
            // Unchanged since read: copied as stored.
            ListRef::Encoded(encoded) => e.raw(encoded),
            ListRef::Decoded(list) => encode_msgs(list, e),
        }
    }
    cuts
}

/// A buffer's kind byte and range deletes: everything before its point
/// messages.
pub(crate) fn encode_ranges(ranges: &RangeIndex, e: &mut Enc) {
    e.u8(PART_BUFFER);
    e.varint(ranges.len() as u64);
    for (lo, r) in ranges.iter() {
        e.bytes(lo);
        e.bytes(&r.hi);
        e.u64(r.msn);
    }
}

/// One key's message list: its count, then each message.
pub(crate) fn encode_msgs(list: &[PointMsg], e: &mut Enc) {
    e.varint(list.len() as u64);
    for m in list {
        e.u64(m.msn);
        match &m.op {
            PointOp::Insert(v) => {
                e.u8(kind::INSERT);
                e.bytes(v);
            }
            PointOp::Delete => e.u8(kind::DELETE),
            PointOp::Patch { offset, data } => {
                e.u8(kind::PATCH);
                e.varint(u64::from(*offset));
                e.bytes(data);
            }
            PointOp::Truncate { len } => {
                e.u8(kind::TRUNCATE);
                e.varint(u64::from(*len));
            }
        }
    }
}

/// Decodes a message buffer into its open (map) form.
pub(crate) fn decode_buffer(buf: &[u8]) -> DecResult<MsgBuffer> {
    let (ranges, points) = FrozenPoints::parse(buf.to_vec())?;
    let mut b = MsgBuffer::from_frozen(ranges, points);
    b.thaw();
    Ok(b)
}

/// How much of a partition is tried first to see whether it compresses.
const PROBE_BYTES: usize = 4096;

/// Compresses `raw` if it pays (saves at least 1/8); returns the codec used
/// and the stored bytes.
pub(crate) fn compress(raw: Vec<u8>, c: Compression) -> (u8, Vec<u8>) {
    match c {
        Compression::None => (Compression::None as u8, raw),
        Compression::Lz4 => {
            // Incompressible data (random values, compressed files) is
            // common: a probe of the first bytes decides cheaply.
            if raw.len() > 2 * PROBE_BYTES {
                let probe = lz4_flex::block::compress(&raw[..PROBE_BYTES]);
                if probe.len() >= PROBE_BYTES - PROBE_BYTES / 16 {
                    return (Compression::None as u8, raw);
                }
            }
            let packed = lz4_flex::block::compress(&raw);
            if packed.len() < raw.len() - raw.len() / 8 {
                (Compression::Lz4 as u8, packed)
            } else {
                (Compression::None as u8, raw)
            }
        }
    }
}

/// Undoes [`compress`]; `raw_len` is the recorded decoded length. An
/// uncompressed partition handed over owned (a single partition just
/// read) becomes the decoded bytes without a copy.
pub(crate) fn decompress(stored: Cow<'_, [u8]>, codec: u8, raw_len: usize) -> DecResult<Vec<u8>> {
    match Compression::from_u8(codec) {
        Some(Compression::None) => {
            if stored.len() != raw_len {
                return Err("uncompressed partition length mismatch".into());
            }
            Ok(stored.into_owned())
        }
        Some(Compression::Lz4) => {
            let out =
                lz4_flex::block::decompress(&stored, raw_len).map_err(|e| format!("lz4: {e}"))?;
            if out.len() != raw_len {
                return Err("decompressed partition length mismatch".into());
            }
            Ok(out)
        }
        None => Err(format!("unknown compression codec {codec}")),
    }
}

/// A point message's operation, borrowing its bytes from the encoding.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpRef<'a> {
    Insert(&'a [u8]),
    Delete,
    Patch { offset: u32, data: &'a [u8] },
    Truncate { len: u32 },
}

impl OpRef<'_> {
    pub fn to_op(self) -> PointOp {
        match self {
            OpRef::Insert(v) => PointOp::Insert(v.to_vec()),
            OpRef::Delete => PointOp::Delete,
            OpRef::Patch { offset, data } => PointOp::Patch {
                offset,
                data: data.to_vec(),
            },
            OpRef::Truncate { len } => PointOp::Truncate { len },
        }
    }

    /// Same as [`PointOp::encoded_bytes`] of the owned operation.
    pub fn encoded_bytes(self) -> usize {
        match self {
            OpRef::Insert(v) => PointOp::Insert(Vec::new()).encoded_bytes() + v.len(),
            OpRef::Patch { data, .. } => {
                PointOp::Patch {
                    offset: 0,
                    data: Vec::new(),
                }
                .encoded_bytes()
                    + data.len()
            }
            other => other.to_op().encoded_bytes(),
        }
    }
}

#[cold]
#[inline(never)]
fn unknown_kind(kind: u8) -> String {
    format!("unknown message kind {kind}")
}

/// Reads one message (MSN, kind, payload) and checks its limits. Inlined
/// into the parse loops, which call it once per buffered message.
#[inline]
pub(crate) fn read_msg<'a>(d: &mut Dec<'a>) -> DecResult<(Msn, OpRef<'a>)> {
    let msn = d.u64("msn")?;
    let op = match d.u8("message kind")? {
        kind::INSERT => OpRef::Insert(d.bytes("value", MAX_VALUE_BYTES)?),
        kind::DELETE => OpRef::Delete,
        kind::PATCH => {
            let offset = d.varint("patch offset")?;
            let data = d.bytes("patch data", MAX_VALUE_BYTES)?;
            if offset + data.len() as u64 > MAX_VALUE_BYTES as u64 {
                return Err("patch past the maximum value size".into());
            }
            OpRef::Patch {
                offset: offset as u32,
                data,
            }
        }
        kind::TRUNCATE => {
            let len = d.varint("truncate length")?;
            if len > MAX_VALUE_BYTES as u64 {
                return Err("truncate past the maximum value size".into());
            }
            OpRef::Truncate { len: len as u32 }
        }
        other => return Err(unknown_kind(other)),
    };
    Ok((msn, op))
}
