//! Encoding of partitions: leaf basements and internal message buffers,
//! and the per-partition compression wrapper.

use std::collections::BTreeMap;

use super::bytes::{Dec, DecResult, Enc};
use crate::basement::Basement;
use crate::buffer::MsgBuffer;
use crate::config::Compression;
use crate::msg::{kind, PointMsg, PointOp};
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Partition kinds (persisted; never renumber).
pub(crate) const PART_BASEMENT: u8 = 1;
pub(crate) const PART_BUFFER: u8 = 2;

pub(crate) fn encode_basement(b: &Basement, e: &mut Enc) {
    e.u8(PART_BASEMENT);
    e.varint(b.entries.len() as u64);
    for (k, v) in &b.entries {
        e.bytes(k);
        e.bytes(v);
    }
}

pub(crate) fn decode_basement(buf: &[u8]) -> DecResult<Basement> {
    let mut d = Dec::new(buf);
    if d.u8("partition kind")? != PART_BASEMENT {
        return Err("partition is not a basement".into());
    }
    let n = d.count("basement entries")?;
    let mut entries = BTreeMap::new();
    let mut last: Option<&[u8]> = None;
    for _ in 0..n {
        let k = d.bytes("key", MAX_KEY_BYTES)?;
        let v = d.bytes("value", MAX_VALUE_BYTES)?;
        if last.is_some_and(|l| l >= k) {
            return Err("basement keys out of order".into());
        }
        last = Some(k);
        entries.insert(k.to_vec(), v.to_vec());
    }
    d.finish("basement")?;
    Ok(Basement::from_map(entries))
}

pub(crate) fn encode_buffer(b: &MsgBuffer, e: &mut Enc) {
    e.u8(PART_BUFFER);
    e.varint(b.ranges.len() as u64);
    for (lo, r) in b.ranges.iter() {
        e.bytes(lo);
        e.bytes(&r.hi);
        e.u64(r.msn);
    }
    e.varint(b.points.len() as u64);
    for (k, list) in &b.points {
        e.bytes(k);
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
}

pub(crate) fn decode_buffer(buf: &[u8]) -> DecResult<MsgBuffer> {
    let mut d = Dec::new(buf);
    if d.u8("partition kind")? != PART_BUFFER {
        return Err("partition is not a message buffer".into());
    }
    let mut out = MsgBuffer::default();
    let n_ranges = d.count("range deletes")?;
    let mut last_hi: Option<Vec<u8>> = None;
    for _ in 0..n_ranges {
        let lo = d.bytes("range lo", MAX_KEY_BYTES)?.to_vec();
        let hi = d.bytes("range hi", MAX_KEY_BYTES)?.to_vec();
        let msn = d.u64("range msn")?;
        if lo >= hi || last_hi.as_ref().is_some_and(|h| *h > lo) {
            return Err("range deletes empty, unsorted or overlapping".into());
        }
        last_hi = Some(hi.clone());
        out.ranges.insert(lo, hi, msn);
    }
    let n_keys = d.count("message keys")?;
    let mut last: Option<Vec<u8>> = None;
    for _ in 0..n_keys {
        let k = d.bytes("message key", MAX_KEY_BYTES)?.to_vec();
        if last.as_ref().is_some_and(|l| *l >= k) {
            return Err("message keys out of order".into());
        }
        let n = d.count("messages of a key")?;
        if n == 0 {
            return Err("key with no messages".into());
        }
        let mut list = Vec::with_capacity(n);
        let mut last_msn = 0;
        for _ in 0..n {
            let msn = d.u64("msn")?;
            if msn <= last_msn && !list.is_empty() {
                return Err("messages of a key out of MSN order".into());
            }
            last_msn = msn;
            let op = match d.u8("message kind")? {
                kind::INSERT => PointOp::Insert(d.bytes("value", MAX_VALUE_BYTES)?.to_vec()),
                kind::DELETE => PointOp::Delete,
                kind::PATCH => {
                    let offset = d.varint("patch offset")?;
                    let data = d.bytes("patch data", MAX_VALUE_BYTES)?.to_vec();
                    if offset + data.len() as u64 > MAX_VALUE_BYTES as u64 {
                        return Err("patch past the maximum value size".into());
                    }
                    PointOp::Patch {
                        offset: offset as u32,
                        data,
                    }
                }
                kind::TRUNCATE => {
                    let len = d.varint("truncate length")?;
                    if len > MAX_VALUE_BYTES as u64 {
                        return Err("truncate past the maximum value size".into());
                    }
                    PointOp::Truncate { len: len as u32 }
                }
                other => return Err(format!("unknown message kind {other}")),
            };
            list.push(PointMsg { msn, op });
        }
        last = Some(k.clone());
        out.points.insert(k, list);
    }
    d.finish("message buffer")?;
    out.recount();
    Ok(out)
}

/// Compresses `raw` if it pays (saves at least 1/8); returns the codec used
/// and the stored bytes.
pub(crate) fn compress(raw: Vec<u8>, c: Compression) -> (u8, Vec<u8>) {
    match c {
        Compression::None => (Compression::None as u8, raw),
        Compression::Lz4 => {
            let packed = lz4_flex::block::compress(&raw);
            if packed.len() < raw.len() - raw.len() / 8 {
                (Compression::Lz4 as u8, packed)
            } else {
                (Compression::None as u8, raw)
            }
        }
    }
}

/// Undoes [`compress`]; `raw_len` is the recorded decoded length.
pub(crate) fn decompress(stored: &[u8], codec: u8, raw_len: usize) -> DecResult<Vec<u8>> {
    match Compression::from_u8(codec) {
        Some(Compression::None) => {
            if stored.len() != raw_len {
                return Err("uncompressed partition length mismatch".into());
            }
            Ok(stored.to_vec())
        }
        Some(Compression::Lz4) => {
            let out =
                lz4_flex::block::decompress(stored, raw_len).map_err(|e| format!("lz4: {e}"))?;
            if out.len() != raw_len {
                return Err("decompressed partition length mismatch".into());
            }
            Ok(out)
        }
        None => Err(format!("unknown compression codec {codec}")),
    }
}
