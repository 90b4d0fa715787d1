//! A node's dictionary: bytes stored once in its header that LZ4 may
//! refer to from every partition of the node (a leaf's basements, an
//! internal node's buffers and their segments).
//!
//! Partitions are compressed one by one so that a point query reads and
//! decodes one 16 KiB basement, not its whole leaf. LZ4 finds only
//! repeats, and inside 16 KiB it finds few of what a leaf repeats from
//! one basement to the next: mail bodies that open with the same text,
//! source files that share their licence header and includes. Postmark
//! is the extreme: every file it writes is copied out of one 4 KiB buffer
//! of random characters, so each basement stored its first copy of that
//! buffer whole (a quarter of the basement) and only the others as
//! references. With a dictionary taken from the leaf's own bytes, the
//! first copy is a reference too. This is the technique of RocksDB's
//! dictionary compression and of zstd's trained dictionaries, reduced to
//! its simplest form: the dictionary is a stretch of the leaf itself (no
//! training), chosen afresh each time the node is written: a leaf's
//! middle basement, an internal node's largest buffer.
//!
//! The dictionary lives in the header, which a reader has whenever it
//! reads a partition; a partition compressed against it records codec
//! [`CODEC_LZ4_DICT`](super::partition::CODEC_LZ4_DICT). Postmark, 100,000
//! files and 200,000 transactions: node bytes 782 MiB without, 218 MiB
//! with 8 KiB dictionaries, 140 MiB with 16 KiB, 130 MiB with 32 KiB.

use std::sync::Arc;

use super::bytes::{Dec, DecResult, Enc};
use super::partition::{compress, decompress, encode_basement, looks_incompressible};
use crate::config::Compression;
use crate::node::{Node, Part};

/// The dictionary's length at most: a whole leaf basement (16 KiB by
/// default). Measured in Postmark (module doc): half as long left 60 %
/// more node bytes, twice as long (internal nodes only: a basement is
/// not longer) saved 7 % more. LZ4 hashes the dictionary before each
/// partition it compresses, and a cached node holds it beside its
/// partitions (counted in the cache), so it is not made longer.
pub(crate) const DICT_BYTES: usize = 16 << 10;

/// The longest dictionary a header may hold (LZ4 refers at most 64 KiB
/// back); a longer one is a damaged header.
const DICT_MAX_BYTES: usize = 64 << 10;

/// Below this, a candidate is not worth its place in the header. Small
/// enough that the tests' tiny nodes (512-byte partitions) have
/// dictionaries too, so every test image and the decoders' fuzzing see
/// them.
const DICT_MIN_BYTES: usize = 256;

/// The dictionary to compress leaf `node`'s partitions against, if it
/// should have one: the leaf has more than one basement, and the first
/// bytes of its middle basement pass [`judged`] on another basement.
pub(crate) fn for_leaf(node: &Node, compression: Compression) -> Option<Arc<[u8]>> {
    if compression == Compression::None || !node.is_leaf() || node.parts.len() < 2 {
        return None;
    }
    let encoded = |i: usize| {
        let Some(Part::Basement(b)) = node.parts[i].data.get() else {
            panic!("a leaf is fully loaded, with basements only, before it is written");
        };
        let mut e = Enc::with_capacity(b.bytes() + 16);
        encode_basement(b, &mut e);
        e.buf
    };
    let n = node.parts.len();
    judged(&encoded(n / 2), &encoded(n / 4), compression)
}

/// The dictionary of an internal node whose buffers are encoded as
/// `raws`: the first bytes of the largest, judged on the bytes after
/// them (or, in a buffer too short for that, on the next largest).
pub(crate) fn for_buffers(raws: &[&[u8]], compression: Compression) -> Option<Arc<[u8]>> {
    let mut by_size: Vec<&[u8]> = raws.to_vec();
    by_size.sort_by_key(|r| std::cmp::Reverse(r.len()));
    let source = *by_size.first()?;
    let trial = match source.get(DICT_BYTES..) {
        Some(rest) if rest.len() >= DICT_MIN_BYTES => &rest[..rest.len().min(DICT_BYTES)],
        _ => by_size.get(1).copied().unwrap_or_default(),
    };
    judged(source, trial, compression)
}

/// The first [`DICT_BYTES`] of `source` as a dictionary, if compression is
/// on, they are not too few, they do not look incompressible, and LZ4
/// against them stores `trial` (other bytes of the same node) at least
/// 1/16 smaller than LZ4 alone. The trial is what keeps random data
/// without one: the basement a dictionary is taken from always
/// compresses against it (it repeats its own first bytes), and a
/// 512-byte sample can land on the keys between random values.
fn judged(source: &[u8], trial: &[u8], compression: Compression) -> Option<Arc<[u8]>> {
    let candidate = &source[..source.len().min(DICT_BYTES)];
    if compression == Compression::None
        || candidate.len() < DICT_MIN_BYTES
        || trial.len() < DICT_MIN_BYTES
        || looks_incompressible(candidate)
    {
        return None;
    }
    let alone = lz4_flex::block::compress(trial).len().min(trial.len());
    let with = lz4_flex::block::compress_with_dict(trial, candidate).len();
    (with < alone - alone / 16).then(|| Arc::from(candidate))
}

/// Appends `dict` to a header: its codec, decoded length and stored bytes
/// (LZ4 if that pays).
pub(crate) fn encode(dict: &[u8], h: &mut Enc) {
    let (codec, stored) = compress(dict.to_vec(), Compression::Lz4, &[]);
    h.u8(codec);
    h.varint(dict.len() as u64);
    h.bytes(&stored);
}

/// Reads a dictionary written by [`encode`].
pub(crate) fn decode(d: &mut Dec<'_>) -> DecResult<Arc<[u8]>> {
    let codec = d.u8("dictionary codec")?;
    let raw_len = d.varint("dictionary length")? as usize;
    if raw_len == 0 || raw_len > DICT_MAX_BYTES {
        return Err(format!("dictionary of {raw_len} bytes"));
    }
    let stored = d.bytes("dictionary", DICT_MAX_BYTES)?;
    // Without a dictionary of its own, codec 2 is refused too.
    Ok(Arc::from(decompress(stored.into(), codec, raw_len, &[])?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::basement::Basement;
    use crate::buffer::MsgBuffer;
    use crate::format::node::{decode_header, decode_part, encode_node};
    use crate::format::partition::{compress_tail, CODEC_LZ4_DICT};
    use crate::msg::{PointMsg, PointOp};
    use crate::node::{Edge, PartSlot};
    use crate::test_bytes::{printable, random_bytes};

    /// A leaf of `parts` basements, each holding entries made by `value`.
    fn leaf(parts: usize, value: impl Fn(usize) -> Vec<u8>) -> Node {
        let mut node = Node::empty_leaf(Vec::new());
        node.parts.clear();
        let mut n = 0;
        for p in 0..parts {
            let mut entries = std::collections::BTreeMap::new();
            let mut bytes = 0;
            while bytes < 16 << 10 {
                let v = value(n);
                bytes += v.len();
                entries.insert(format!("k{n:08}").into_bytes(), v);
                n += 1;
            }
            node.parts
                .push(PartSlot::loaded(Part::Basement(Basement::from_map(
                    entries,
                ))));
            if p > 0 {
                node.pivots.push(format!("k{:08}", n - 1).into_bytes());
            }
        }
        node
    }

    fn stored_bytes(node: &Node, dict: &[u8]) -> usize {
        let mut total = 0;
        for slot in &node.parts {
            let Some(Part::Basement(b)) = slot.data.get() else {
                unreachable!()
            };
            let mut e = Enc::default();
            encode_basement(b, &mut e);
            let raw = e.buf.clone();
            let codec = compress_tail(&mut e.buf, 0, Compression::Lz4, dict);
            if !dict.is_empty() && codec == CODEC_LZ4_DICT {
                let back = decompress(e.buf.as_slice().into(), codec, raw.len(), dict).unwrap();
                assert_eq!(back, raw);
                assert!(decompress(e.buf.as_slice().into(), codec, raw.len(), &[]).is_err());
            }
            total += e.buf.len();
        }
        total
    }

    #[test]
    fn copies_of_one_block_across_a_leaf_shrink_to_references() {
        // Postmark's files: prefixes of one 4 KiB block of random text.
        let block = printable(4096, 3);
        let node = leaf(8, |n| block[..512 + (n * 977) % 3585].to_vec());
        let dict = for_leaf(&node, Compression::Lz4).expect("text gets a dictionary");
        assert_eq!(dict.len(), DICT_BYTES);
        let (plain, with) = (stored_bytes(&node, &[]), stored_bytes(&node, &dict));
        assert!(
            with * 3 < plain,
            "{plain} bytes alone, {with} with the dictionary"
        );
    }

    /// Each partition of `node` as `encode_node` stored it, decoded from
    /// the image through its header, as a reader does; and how many were
    /// compressed against the header's dictionary (decoding them without
    /// it fails).
    fn through_an_image(node: &Node) -> (Vec<Part>, usize) {
        let image = encode_node(node, 7, Compression::Lz4, 4096);
        let len = image.bytes.len() as u64;
        let header = &image.bytes[..image.header_len as usize];
        let read = decode_header(header, 7, len).unwrap();
        assert_eq!(read.dict, image.dict);
        let mut parts = Vec::new();
        let mut dict_uses = 0;
        let mut bare = read.clone();
        bare.dict = None;
        for (i, slot) in read.parts.iter().enumerate() {
            let loc = slot.disk.unwrap();
            let stored = &image.bytes[loc.offset as usize..(loc.offset + loc.stored_len) as usize];
            parts.push(decode_part(stored, &loc, &read, i).unwrap());
            let uses_dict = loc.codec == CODEC_LZ4_DICT
                || slot
                    .summary
                    .as_deref()
                    .is_some_and(|s| s.segments.iter().any(|g| g.codec == CODEC_LZ4_DICT));
            if uses_dict {
                assert!(decode_part(stored, &loc, &bare, i).is_err());
                dict_uses += 1;
            }
        }
        (parts, dict_uses)
    }

    #[test]
    fn a_leaf_and_an_internal_node_read_back_through_their_dictionaries() {
        let block = printable(4096, 8);
        let node = leaf(6, |n| block[n % 100..].to_vec());
        let (parts, dict_uses) = through_an_image(&node);
        assert_eq!(dict_uses, node.parts.len());
        for (slot, back) in node.parts.iter().zip(&parts) {
            let (Some(Part::Basement(a)), Part::Basement(b)) = (slot.data.get(), back) else {
                unreachable!()
            };
            assert!(a.iter().eq(b.iter()));
        }
        // An internal node: two buffers of inserts, the first cut into
        // segments.
        let mut internal = Node::empty_leaf(Vec::new());
        internal.height = 1;
        internal.parts.clear();
        internal.pivots = vec![b"m".to_vec()].into();
        for (c, keys) in [(b'a', 40u64), (b'n', 3)] {
            let mut b = MsgBuffer::default();
            for k in 0..keys {
                let op = PointOp::Insert(block[(k as usize) % 50..].to_vec());
                b.put_point(vec![c, k as u8], PointMsg { msn: k + 1, op });
            }
            internal.parts.push(PartSlot::loaded(Part::Buffer(b)));
            internal.children.push(Edge {
                child: u64::from(c),
                lift: Vec::new(),
            });
        }
        let (parts, dict_uses) = through_an_image(&internal);
        assert_eq!(dict_uses, 2);
        for (slot, back) in internal.parts.iter().zip(&parts) {
            let (Some(Part::Buffer(a)), Part::Buffer(b)) = (slot.data.get(), back) else {
                unreachable!()
            };
            assert_eq!(a.key_count(), b.key_count());
            for key in a.keys() {
                assert_eq!(a.lookup(key).1, b.lookup(key).1, "{key:?}");
            }
        }
        // Random values: no dictionary, and every partition decodes alone.
        let node = leaf(3, |n| random_bytes(3000, n as u64));
        assert_eq!(through_an_image(&node).1, 0);
    }

    #[test]
    fn no_dictionary_without_compression_or_for_random_bytes_or_one_basement() {
        let block = printable(4096, 4);
        assert!(for_leaf(&leaf(4, |_| block.clone()), Compression::None).is_none());
        assert!(for_leaf(&leaf(1, |_| block.clone()), Compression::Lz4).is_none());
        assert!(for_leaf(&leaf(4, |n| random_bytes(4096, n as u64)), Compression::Lz4).is_none());
        // Random values between keys (`io_counts`' scattered tree, where
        // the sample's runs fell on the keys often enough to pass it):
        // the trial keeps them without one.
        let keyed = leaf(4, |n| random_bytes(700, n as u64));
        assert!(for_leaf(&keyed, Compression::Lz4).is_none());
    }

    #[test]
    fn a_dictionary_round_trips_and_damage_is_an_error() {
        for dict in [
            printable(DICT_BYTES, 5),
            vec![7u8; DICT_BYTES],
            random_bytes(2000, 6),
        ] {
            let mut h = Enc::default();
            encode(&dict, &mut h);
            let mut d = Dec::new(&h.buf);
            assert_eq!(&*decode(&mut d).unwrap(), &dict[..]);
            d.finish("dictionary").unwrap();
        }
        let mut h = Enc::default();
        h.u8(0);
        h.varint(DICT_MAX_BYTES as u64 + 1);
        h.bytes(&[0u8; 4]);
        assert!(decode(&mut Dec::new(&h.buf)).is_err());
        let mut h = Enc::default();
        h.u8(9);
        h.varint(4);
        h.bytes(&[0u8; 4]);
        assert!(decode(&mut Dec::new(&h.buf)).is_err());
    }
}
