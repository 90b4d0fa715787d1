//! Log records: one record is one atomic batch of operations.
//!
//! Frame: `lsn u64 | payload length u32 | chain u32 | payload`. `lsn` is
//! the record's own log position, so a record left from an earlier lap of
//! the circular region never matches where it is found. `chain` is
//! crc32c(previous chain ‖ lsn ‖ length ‖ payload): it detects a torn or
//! damaged record, and a stale record of this lap that happens to start
//! where a new chain continues after a recovery, because its chain was
//! computed from a different predecessor.
//!
//! Payload: `1u8` (batch), varint op count, then per op a kind byte (never
//! renumbered) and its fields; `2u8` (bindings); or `3u8`, a batch packed
//! into the log's LZ4 stream (`packing`), which unpacks to a `1u8` payload.

use crate::format::bytes::{Dec, DecResult, Enc};
use crate::tree::Op;
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

pub(crate) const FRAME_HEADER_BYTES: u64 = 16;

pub(crate) const PAYLOAD_BATCH: u8 = 1;
const PAYLOAD_BINDINGS: u8 = 2;

mod op_kind {
    pub const INSERT: u8 = 1;
    pub const DELETE: u8 = 2;
    pub const PATCH: u8 = 3;
    pub const TRUNCATE: u8 = 4;
    pub const DELETE_RANGE: u8 = 5;
    pub const RANGE_MOVE: u8 = 6;
    /// An insert whose value is not in the log: a binding record names the
    /// node that holds it (late-binding journal).
    pub const UNBOUND_INSERT: u8 = 7;
}

/// A logged operation as recovery reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Logged {
    Op(Op),
    Unbound { key: Vec<u8>, len: u32 },
}

/// Where the value of an unbound insert went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// In this node, as it was written to this extent.
    Node {
        block: u64,
        offset: u64,
        len: u64,
        header_len: u32,
        header_crc: u32,
    },
    /// Made obsolete by a later operation logged before the binding; replay
    /// skips it.
    Obsolete,
}

/// A binding: record LSN and op index → target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Binding {
    pub lsn: u64,
    pub op: u32,
    pub target: Target,
}

/// Bindings are written as runs: consecutive ops of one record bound to
/// the same target take one entry (record LSN, first op, count, target),
/// so a 1 MiB batch of 4 KiB values bound to one leaf costs a few dozen
/// bytes of log instead of ten thousand.
pub(crate) fn encode_bindings(bs: &[Binding]) -> Vec<u8> {
    let mut runs: Vec<(u64, u32, u32, &Target)> = Vec::new();
    for b in bs {
        match runs.last_mut() {
            Some((lsn, first, count, target))
                if *lsn == b.lsn && *first + *count == b.op && **target == b.target =>
            {
                *count += 1;
            }
            _ => runs.push((b.lsn, b.op, 1, &b.target)),
        }
    }
    let mut e = Enc::with_capacity(8 + runs.len() * 48);
    e.u8(PAYLOAD_BINDINGS);
    e.varint(runs.len() as u64);
    for (lsn, first, count, target) in runs {
        e.u64(lsn);
        e.varint(u64::from(first));
        e.varint(u64::from(count));
        match target {
            Target::Node {
                block,
                offset,
                len,
                header_len,
                header_crc,
            } => {
                e.u8(1);
                e.u64(*block);
                e.u64(*offset);
                e.u64(*len);
                e.u32(*header_len);
                e.u32(*header_crc);
            }
            Target::Obsolete => e.u8(2),
        }
    }
    e.buf
}

/// A record's payload: a batch or a list of bindings.
#[derive(Debug)]
pub(crate) enum Payload {
    Batch(Vec<Logged>),
    Bindings(Vec<Binding>),
}

pub(crate) fn decode_payload(buf: &[u8]) -> DecResult<Payload> {
    match buf.first() {
        Some(&PAYLOAD_BATCH) => decode_batch(buf).map(Payload::Batch),
        Some(&PAYLOAD_BINDINGS) => {
            let mut d = Dec::new(&buf[1..]);
            let n = d.count("binding runs")?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let lsn = d.u64("binding lsn")?;
                let first = d.varint("binding op")?;
                let count = d.varint("binding count")?;
                if count == 0 || first + count > u64::from(u32::MAX) || count > 1 << 24 {
                    return Err(format!("binding run of {count} ops from {first}"));
                }
                let target = match d.u8("binding kind")? {
                    1 => Target::Node {
                        block: d.u64("block")?,
                        offset: d.u64("offset")?,
                        len: d.u64("length")?,
                        header_len: d.u32("header length")?,
                        header_crc: d.u32("header crc")?,
                    },
                    2 => Target::Obsolete,
                    k => return Err(format!("unknown binding kind {k}")),
                };
                for op in first..first + count {
                    out.push(Binding {
                        lsn,
                        op: op as u32,
                        target: target.clone(),
                    });
                }
            }
            d.finish("bindings")?;
            Ok(Payload::Bindings(out))
        }
        _ => Err("unknown log payload kind".into()),
    }
}

/// Encodes a batch; inserts marked in `unbound` are logged without their
/// values (late binding).
pub(crate) fn encode_batch(ops: &[Op], unbound: bool) -> Vec<u8> {
    // Sized up front: growing it copied a file's blocks once or twice more
    // (1 % of the request thread in an untar).
    let mut e = Enc::with_capacity(encoded_bound(ops, unbound));
    e.u8(PAYLOAD_BATCH);
    e.varint(ops.len() as u64);
    for op in ops {
        match op {
            Op::Insert { key, value } if unbound => {
                e.u8(op_kind::UNBOUND_INSERT);
                e.bytes(key);
                e.varint(value.len() as u64);
            }
            Op::Insert { key, value } => {
                e.u8(op_kind::INSERT);
                e.bytes(key);
                e.bytes(value);
            }
            Op::Delete { key } => {
                e.u8(op_kind::DELETE);
                e.bytes(key);
            }
            Op::Patch { key, offset, data } => {
                e.u8(op_kind::PATCH);
                e.bytes(key);
                e.varint(u64::from(*offset));
                e.bytes(data);
            }
            Op::Truncate { key, len } => {
                e.u8(op_kind::TRUNCATE);
                e.bytes(key);
                e.varint(u64::from(*len));
            }
            Op::DeleteRange { lo, hi } => {
                e.u8(op_kind::DELETE_RANGE);
                e.bytes(lo);
                e.bytes(hi);
            }
            Op::RangeMove { from, to } => {
                e.u8(op_kind::RANGE_MOVE);
                e.bytes(from);
                e.bytes(to);
            }
        }
    }
    e.buf
}

/// At least the bytes [`encode_batch`] produces: each op's kind byte, its
/// byte strings with a ten-byte length each, and a ten-byte number.
fn encoded_bound(ops: &[Op], unbound: bool) -> usize {
    const FIXED: usize = 1 + 10 + 10;
    let strings: usize = ops
        .iter()
        .map(|op| match op {
            Op::Insert { key, .. } if unbound => key.len(),
            Op::Insert { key, value } => key.len() + value.len(),
            Op::Delete { key } | Op::Truncate { key, .. } => key.len(),
            Op::Patch { key, data, .. } => key.len() + data.len(),
            Op::DeleteRange { lo, hi } => lo.len() + hi.len(),
            Op::RangeMove { from, to } => from.len() + to.len(),
        } + FIXED + 10)
        .sum();
    1 + 10 + strings
}

pub(crate) fn decode_batch(buf: &[u8]) -> DecResult<Vec<Logged>> {
    let mut d = Dec::new(buf);
    if d.u8("payload kind")? != PAYLOAD_BATCH {
        return Err("log payload is not a batch".into());
    }
    let n = d.count("batch ops")?;
    let mut ops = Vec::with_capacity(n);
    let key = |d: &mut Dec<'_>, what| d.bytes(what, MAX_KEY_BYTES).map(<[u8]>::to_vec);
    for _ in 0..n {
        let op = match d.u8("op kind")? {
            op_kind::INSERT => Op::Insert {
                key: key(&mut d, "key")?,
                value: d.bytes("value", MAX_VALUE_BYTES)?.to_vec(),
            },
            op_kind::DELETE => Op::Delete {
                key: key(&mut d, "key")?,
            },
            op_kind::PATCH => {
                let k = key(&mut d, "key")?;
                let offset = d.varint("offset")?;
                let data = d.bytes("data", MAX_VALUE_BYTES)?.to_vec();
                if offset + data.len() as u64 > MAX_VALUE_BYTES as u64 {
                    return Err("patch past the maximum value size".into());
                }
                Op::Patch {
                    key: k,
                    offset: offset as u32,
                    data,
                }
            }
            op_kind::TRUNCATE => {
                let k = key(&mut d, "key")?;
                let len = d.varint("length")?;
                if len > MAX_VALUE_BYTES as u64 {
                    return Err("truncate past the maximum value size".into());
                }
                Op::Truncate {
                    key: k,
                    len: len as u32,
                }
            }
            op_kind::DELETE_RANGE => Op::DeleteRange {
                lo: key(&mut d, "lo")?,
                hi: key(&mut d, "hi")?,
            },
            op_kind::RANGE_MOVE => Op::RangeMove {
                from: key(&mut d, "from")?,
                to: key(&mut d, "to")?,
            },
            op_kind::UNBOUND_INSERT => {
                let k = key(&mut d, "key")?;
                let len = d.varint("value length")?;
                if len > MAX_VALUE_BYTES as u64 {
                    return Err("unbound value past the maximum value size".into());
                }
                ops.push(Logged::Unbound {
                    key: k,
                    len: len as u32,
                });
                continue;
            }
            other => return Err(format!("unknown op kind {other}")),
        };
        ops.push(Logged::Op(op));
    }
    d.finish("batch")?;
    Ok(ops)
}

/// The chain value of a record.
pub(crate) fn chain(prev: u32, lsn: u64, payload: &[u8]) -> u32 {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&lsn.to_le_bytes());
    head[8..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let c = crate::crc::crc32c_append(prev, &head);
    crate::crc::crc32c_append(c, payload)
}

/// Appends the frame of `payload` at `lsn` to `out` (the log buffer: one
/// copy of the payload, no frame of its own in between); returns its
/// chain value.
pub(crate) fn frame_into(out: &mut Vec<u8>, prev: u32, lsn: u64, payload: &[u8]) -> u32 {
    let c = chain(prev, lsn, payload);
    out.reserve(FRAME_HEADER_BYTES as usize + payload.len());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(payload);
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // Lengths on both sides of a one-byte varint.
        proptest::collection::vec(any::<u8>(), 0..300)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (bytes(), bytes()).prop_map(|(key, value)| Op::Insert { key, value }),
            bytes().prop_map(|key| Op::Delete { key }),
            (bytes(), any::<u32>(), bytes()).prop_map(|(key, offset, data)| Op::Patch {
                key,
                offset,
                data
            }),
            (bytes(), any::<u32>()).prop_map(|(key, len)| Op::Truncate { key, len }),
            (bytes(), bytes()).prop_map(|(lo, hi)| Op::DeleteRange { lo, hi }),
            (bytes(), bytes()).prop_map(|(from, to)| Op::RangeMove { from, to }),
        ]
    }

    proptest! {
        /// The size a batch is encoded into up front is never too small,
        /// so encoding it never grows (copies) the buffer.
        #[test]
        fn a_batch_fits_the_size_reserved_for_it(
            ops in proptest::collection::vec(op(), 0..20),
            unbound in any::<bool>(),
        ) {
            let encoded = encode_batch(&ops, unbound);
            prop_assert!(encoded.len() <= encoded_bound(&ops, unbound));
        }
    }
}
