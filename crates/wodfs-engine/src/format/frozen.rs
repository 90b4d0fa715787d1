//! Partitions searched in place, in their encoded form.
//!
//! A partition read from disk is validated once, in one pass that records
//! where every entry starts, and then kept as its decoded-but-unparsed
//! bytes plus that offset index. Point queries binary-search the index and
//! scans walk it; nothing is allocated per entry. Decoding into the
//! mutable map form ("thawing") happens only when the writer changes the
//! partition, and an unchanged frozen partition is written back byte for
//! byte. Before this, every partition a reader touched was decoded into a
//! `BTreeMap` of owned vectors and freed again at eviction, which made a
//! cold point query spend most of its time in malloc and free.

use super::bytes::{varint_len, Dec, DecResult, Enc};
use super::entry_index::{EntryIndex, Span};
use super::partition::{read_msg, OpRef, PART_BASEMENT, PART_BUFFER};
use super::raw_bytes::RawBytes;
use crate::buffer::KEY_OVERHEAD_BYTES;
use crate::msg::{Msn, PointMsg};
use crate::range_index::RangeIndex;
use crate::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// A frozen leaf basement: sorted key/value pairs.
#[derive(Clone, Debug)]
pub(crate) struct FrozenBasement {
    raw: RawBytes,
    index: EntryIndex,
    /// Leading bytes of every stored key that are not part of the key
    /// (see [`FrozenBasement::strip_keys`]): nonzero, the raw bytes are no
    /// longer this basement's encoding.
    stripped: usize,
}

impl FrozenBasement {
    /// Validates an encoded basement (kind byte, count, sorted entries
    /// within the size limits) and indexes it.
    pub fn parse(raw: impl Into<RawBytes>) -> DecResult<Self> {
        let raw = raw.into();
        let mut d = Dec::new(&raw);
        if d.u8("partition kind")? != PART_BASEMENT {
            return Err("partition is not a basement".into());
        }
        let n = d.count("basement entries")?;
        let mut index = Vec::with_capacity(n);
        let mut last: Option<&[u8]> = None;
        for _ in 0..n {
            let k = d.bytes("key", MAX_KEY_BYTES)?;
            let key_end = d.pos();
            let v = d.bytes("value", MAX_VALUE_BYTES)?;
            if last.is_some_and(|l| l >= k) {
                return Err("basement keys out of order".into());
            }
            last = Some(k);
            index.push(Span {
                key_start: (key_end - k.len()) as u32,
                key_end: key_end as u32,
                rest_start: (d.pos() - v.len()) as u32,
                rest_end: d.pos() as u32,
            });
        }
        d.finish("basement")?;
        let index = EntryIndex::new(index, &raw);
        Ok(FrozenBasement {
            raw,
            index,
            stripped: 0,
        })
    }

    /// Encodes sorted, distinct entries straight into the frozen form (no
    /// map, no per-entry allocation): one pass sizes the buffer, a second
    /// fills it, so the bytes are copied once.
    pub fn build<'a, I>(entries: I) -> Self
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
        I::IntoIter: Clone,
    {
        let entries = entries.into_iter();
        let (mut n, mut body) = (0usize, 0usize);
        for (k, v) in entries.clone() {
            n += 1;
            body += varint_len(k.len() as u64) + k.len() + varint_len(v.len() as u64) + v.len();
        }
        let mut out = Enc::with_capacity(1 + varint_len(n as u64) + body);
        out.u8(PART_BASEMENT);
        out.varint(n as u64);
        let mut spans = Vec::with_capacity(n);
        for (k, v) in entries {
            out.bytes(k);
            let key_end = out.len();
            out.bytes(v);
            spans.push(Span {
                key_start: (key_end - k.len()) as u32,
                key_end: key_end as u32,
                rest_start: (out.len() - v.len()) as u32,
                rest_end: out.len() as u32,
            });
        }
        debug_assert_eq!(out.buf.len(), out.buf.capacity());
        FrozenBasement {
            index: EntryIndex::new(spans, &out.buf),
            raw: out.buf.into(),
            stripped: 0,
        }
    }

    /// The encoded basement, unless its keys were stripped since.
    pub fn raw(&self) -> Option<&[u8]> {
        (self.stripped == 0).then_some(&self.raw[..])
    }

    /// Are its bytes a slice of its node's read buffer ([`RawBytes`])?
    pub fn is_shared(&self) -> bool {
        self.raw.is_shared()
    }

    /// Gives it bytes of its own if they are a slice of its node's read
    /// buffer ([`RawBytes::unshare`]).
    pub fn unshare(&mut self) {
        self.raw.unshare();
    }

    /// Drops the first `n` bytes of every key (all keys share them: the
    /// basement moves under a longer frame prefix), in place: only the
    /// index changes, no entry is copied. The basement is then encoded
    /// entry by entry when it is written.
    pub fn strip_keys(&mut self, n: usize) {
        self.index.strip_keys(n);
        self.stripped += n;
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let s = self.index.span(i);
        &self.raw[s.key_start as usize..s.key_end as usize]
    }

    pub fn value(&self, i: usize) -> &[u8] {
        let s = self.index.span(i);
        &self.raw[s.rest_start as usize..s.rest_end as usize]
    }

    /// Index of the first entry with key `>= key`.
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        self.index.lower_bound(&self.raw, key)
    }

    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let i = self.lower_bound(key);
        (i < self.len() && self.key(i) == key).then(|| self.value(i))
    }

    /// [`FrozenBasement::lower_bound`] for a key known to lie at or after
    /// entry `from` (a galloping search from there).
    pub fn lower_bound_from(&self, key: &[u8], from: usize) -> usize {
        self.index.lower_bound_from(&self.raw, key, from)
    }

    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.raw.len() + self.index.mem_bytes() + 64
    }
}

/// The point messages of a frozen message buffer (its range deletes are
/// few and always decoded).
#[derive(Clone, Debug)]
pub(crate) struct FrozenPoints {
    raw: Box<[u8]>,
    index: EntryIndex,
    messages: usize,
    /// Accounting bytes of the point messages, counted as `MsgBuffer`
    /// counts them.
    bytes: usize,
    /// The highest MSN of any point message.
    max_msn: Msn,
}

/// A frozen buffer's parts: decoded range deletes, indexed point messages.
pub(crate) type FrozenBuffer = (RangeIndex, FrozenPoints);

impl FrozenPoints {
    /// Validates an encoded buffer (ranges sorted and disjoint, keys
    /// sorted, each key's messages non-empty, in MSN order and well
    /// formed) and indexes its point messages.
    pub fn parse(raw: Vec<u8>) -> DecResult<FrozenBuffer> {
        let mut d = Dec::new(&raw);
        if d.u8("partition kind")? != PART_BUFFER {
            return Err("partition is not a message buffer".into());
        }
        let mut ranges = RangeIndex::default();
        let n_ranges = d.count("range deletes")?;
        let mut last_hi: Option<&[u8]> = None;
        for _ in 0..n_ranges {
            let lo = d.bytes("range lo", MAX_KEY_BYTES)?;
            let hi = d.bytes("range hi", MAX_KEY_BYTES)?;
            let msn = d.u64("range msn")?;
            if lo >= hi || last_hi.is_some_and(|h| h > lo) {
                return Err("range deletes empty, unsorted or overlapping".into());
            }
            last_hi = Some(hi);
            ranges.insert(lo.to_vec(), hi.to_vec(), msn);
        }
        let n_keys = d.count("message keys")?;
        let mut index = Vec::with_capacity(n_keys);
        let mut messages = 0;
        let mut bytes = 0;
        let mut max_msn = 0;
        let mut last: Option<&[u8]> = None;
        for _ in 0..n_keys {
            let k = d.bytes("message key", MAX_KEY_BYTES)?;
            if last.is_some_and(|l| l >= k) {
                return Err("message keys out of order".into());
            }
            last = Some(k);
            let key_end = d.pos();
            let n = d.count("messages of a key")?;
            if n == 0 {
                return Err("key with no messages".into());
            }
            let mut last_msn = None;
            for _ in 0..n {
                let (msn, op) = read_msg(&mut d)?;
                if last_msn.is_some_and(|l| msn <= l) {
                    return Err("messages of a key out of MSN order".into());
                }
                last_msn = Some(msn);
                max_msn = max_msn.max(msn);
                bytes += 8 + op.encoded_bytes();
            }
            messages += n;
            bytes += k.len() + KEY_OVERHEAD_BYTES;
            index.push(Span {
                key_start: (key_end - k.len()) as u32,
                key_end: key_end as u32,
                rest_start: key_end as u32,
                rest_end: d.pos() as u32,
            });
        }
        d.finish("message buffer")?;
        let index = EntryIndex::new(index, &raw);
        Ok((
            ranges,
            FrozenPoints {
                raw: raw.into_boxed_slice(),
                index,
                messages,
                bytes,
                max_msn,
            },
        ))
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn message_count(&self) -> usize {
        self.messages
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let s = self.index.span(i);
        &self.raw[s.key_start as usize..s.key_end as usize]
    }

    /// The encoded message list of entry `i` (count, then messages).
    pub fn encoded_messages(&self, i: usize) -> &[u8] {
        let s = self.index.span(i);
        &self.raw[s.rest_start as usize..s.rest_end as usize]
    }

    /// The messages of entry `i`, decoded.
    pub fn messages(&self, i: usize) -> Vec<PointMsg> {
        decode_list(self.encoded_messages(i))
    }

    /// Entry `i`'s accounting bytes (counted as `parse` counts them, key
    /// included) and its number of messages, without decoding values.
    pub fn entry_accounting(&self, i: usize) -> (usize, usize) {
        let mut d = Dec::new(self.encoded_messages(i));
        // Validated by `parse`; the bytes never change afterwards.
        let n = d.count("messages of a key").unwrap_or(0);
        let bytes: usize = (0..n)
            .map_while(|_| read_msg(&mut d).ok())
            .map(|(_, op)| 8 + op.encoded_bytes())
            .sum();
        (self.key(i).len() + KEY_OVERHEAD_BYTES + bytes, n)
    }

    /// Index of the first key `>= key`.
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        self.index.lower_bound(&self.raw, key)
    }

    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let i = self.lower_bound(key);
        (i < self.len() && self.key(i) == key).then_some(i)
    }

    /// [`FrozenPoints::lower_bound`] for a key known to lie at or after
    /// entry `from` (a galloping search from there).
    pub fn lower_bound_from(&self, key: &[u8], from: usize) -> usize {
        self.index.lower_bound_from(&self.raw, key, from)
    }

    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.raw.len() + self.index.mem_bytes() + 64
    }

    pub fn max_msn(&self) -> Msn {
        self.max_msn
    }

    /// Accounting bytes of the point messages.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// A key's encoded message list (count, then messages, as `parse`
/// validated it), decoded.
pub(crate) fn decode_list(encoded: &[u8]) -> Vec<PointMsg> {
    let mut d = Dec::new(encoded);
    // Validated by `parse`; the bytes never change afterwards.
    let n = d.count("messages of a key").unwrap_or(0);
    (0..n)
        .map_while(|_| read_msg(&mut d).ok())
        .map(|(msn, op)| PointMsg {
            msn,
            op: op.to_op(),
        })
        .collect()
}

/// What an encoded message list does when it is one insert (`Some(Some(
/// value))`, the value borrowed from the list) or one delete
/// (`Some(None)`); `None` for anything else. Applying a flushed buffer to
/// a leaf needs no decoding in these cases, which are most of them.
pub(crate) fn lone_total(encoded: &[u8]) -> Option<Option<&[u8]>> {
    let mut d = Dec::new(encoded);
    if d.count("messages of a key").ok()? != 1 {
        return None;
    }
    match read_msg(&mut d).ok()?.1 {
        OpRef::Insert(v) => Some(Some(v)),
        OpRef::Delete => Some(None),
        _ => None,
    }
}
