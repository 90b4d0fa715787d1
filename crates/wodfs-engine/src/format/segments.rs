//! Buffer segments: a large message buffer stored as several pieces, each
//! compressed and checksummed on its own, so that a point query reads the
//! one piece that can hold its key instead of the whole buffer.
//!
//! Why: a child's buffer in a 4 MiB internal node is often hundreds of KiB
//! (engine-compare's store averages 385 KiB), and a point query whose key
//! is buffered there (about one in ten after random inserts) read, checked
//! and parsed all of it. Cut into pieces of about a partition's size, it
//! reads one piece, as it reads one basement of a leaf.
//!
//! The pieces split the buffer's encoding (`partition::encode_buffer`) at
//! key boundaries: joined, they are exactly the unsegmented encoding, so a
//! whole load decodes as before. The first piece holds the encoding's
//! head (kind, range deletes, key count). The partition-table entry covers
//! all pieces (codec [`CODEC_SEGMENTS`], the checksum of all stored bytes);
//! the directory (first key, lengths, codec, checksum of each piece) sits
//! in the node header after the buffer's Bloom filter.

use std::borrow::Cow;

use super::bytes::{Dec, DecResult, Enc};
use super::checksum;
use super::frozen::decode_list;
use super::partition::{compress, decompress, known_codec, read_msg, PART_BUFFER};
use crate::config::Compression;
use crate::msg::PointMsg;
use crate::node::PartLoc;
use crate::MAX_KEY_BYTES;

/// Partition codec of a segmented buffer (persisted; never reuse). Its
/// pieces name their own codecs.
pub(crate) const CODEC_SEGMENTS: u8 = 0x80;

/// One piece of a segmented buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// The first key whose messages it holds (relative to the node).
    pub first: Vec<u8>,
    /// Byte offset from the start of the partition (derived, not stored).
    pub offset: u32,
    pub stored_len: u32,
    pub raw_len: u32,
    pub codec: u8,
    pub crc: u32,
}

impl Segment {
    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.first.len() + 48
    }
}

/// Where the encoding of a buffer may be cut: the byte offset of a key's
/// entry and that key.
pub(crate) type Cut = (usize, Vec<u8>);

/// Compresses each piece of `raw` between consecutive cuts (the first cut
/// is at the first key's entry, the first piece starts at 0). Returns the
/// stored bytes of all pieces, joined, and their directory.
pub(crate) fn split(
    raw: Vec<u8>,
    cuts: &[Cut],
    compression: Compression,
    dict: &[u8],
) -> (Vec<u8>, Vec<Segment>) {
    let bounds: Vec<(usize, usize)> = (0..cuts.len())
        .map(|j| {
            let start = if j == 0 { 0 } else { cuts[j].0 };
            (start, cuts.get(j + 1).map_or(raw.len(), |c| c.0))
        })
        .collect();
    let piece = |j: usize, offset: usize, bytes: &[u8], codec: u8| Segment {
        first: cuts[j].1.clone(),
        offset: offset as u32,
        stored_len: bytes.len() as u32,
        raw_len: (bounds[j].1 - bounds[j].0) as u32,
        codec,
        crc: checksum(bytes),
    };
    let (start, end) = bounds[0];
    let (codec, first) = compress(raw[start..end].to_vec(), compression, dict);
    if codec == Compression::None as u8 {
        // One buffer's messages are alike: if its first piece does not
        // compress, the others are stored as they are too, without trying
        // (the probe alone would compress a quarter of the bytes) and
        // without a copy.
        let segments = bounds
            .iter()
            .enumerate()
            .map(|(j, &(s, e))| piece(j, s, &raw[s..e], codec))
            .collect();
        return (raw, segments);
    }
    let mut stored = Vec::with_capacity(raw.len());
    let mut segments = Vec::with_capacity(cuts.len());
    segments.push(piece(0, 0, &first, codec));
    stored.extend_from_slice(&first);
    for (j, &(s, e)) in bounds.iter().enumerate().skip(1) {
        let (codec, bytes) = compress(raw[s..e].to_vec(), compression, dict);
        segments.push(piece(j, stored.len(), &bytes, codec));
        stored.extend_from_slice(&bytes);
    }
    (stored, segments)
}

/// Writes a buffer's segment directory into its node header (a count of
/// 0: not segmented).
pub(crate) fn encode_dir(segments: &[Segment], e: &mut Enc) {
    e.varint(segments.len() as u64);
    for s in segments {
        e.bytes(&s.first);
        e.u32(s.stored_len);
        e.u32(s.raw_len);
        e.u8(s.codec);
        e.u32(s.crc);
    }
}

/// Reads a buffer's segment directory and checks it against the buffer's
/// partition-table entry: pieces exactly when the codec says so, first
/// keys ascending, lengths adding up.
pub(crate) fn decode_dir(d: &mut Dec<'_>, loc: &PartLoc) -> DecResult<Vec<Segment>> {
    let n = d.count("buffer segments")?;
    if (n > 0) != (loc.codec == CODEC_SEGMENTS) || n == 1 {
        return Err(format!(
            "{n} buffer segments for a partition of codec {}",
            loc.codec
        ));
    }
    let mut segments: Vec<Segment> = Vec::with_capacity(n);
    let (mut stored, mut raw) = (0u64, 0u64);
    for _ in 0..n {
        let first = d.bytes("segment first key", MAX_KEY_BYTES)?.to_vec();
        if segments.last().is_some_and(|l| l.first >= first) {
            return Err("buffer segments out of order".into());
        }
        let s = Segment {
            first,
            offset: stored as u32,
            stored_len: d.u32("segment length")?,
            raw_len: d.u32("segment raw length")?,
            codec: d.u8("segment codec")?,
            crc: d.u32("segment checksum")?,
        };
        if !known_codec(s.codec) {
            return Err(format!("unknown segment codec {}", s.codec));
        }
        stored += u64::from(s.stored_len);
        raw += u64::from(s.raw_len);
        segments.push(s);
    }
    if n > 0 && (stored != u64::from(loc.stored_len) || raw != u64::from(loc.raw_len)) {
        return Err("buffer segments do not add up to their partition".into());
    }
    Ok(segments)
}

/// The decoded bytes of a whole segmented buffer (its checksum already
/// checked): every piece decompressed, joined.
pub(crate) fn join(
    stored: &[u8],
    segments: &[Segment],
    raw_len: usize,
    dict: &[u8],
) -> DecResult<Vec<u8>> {
    let mut raw = Vec::with_capacity(raw_len);
    for s in segments {
        let piece = &stored[s.offset as usize..(s.offset + s.stored_len) as usize];
        raw.extend_from_slice(&decompress(
            Cow::Borrowed(piece),
            s.codec,
            s.raw_len as usize,
            dict,
        )?);
    }
    Ok(raw)
}

/// The piece that can hold `key`'s messages, if any can.
pub(crate) fn find(segments: &[Segment], key: &[u8]) -> Option<usize> {
    segments
        .partition_point(|s| s.first.as_slice() <= key)
        .checked_sub(1)
}

/// `key`'s messages in piece `j` (read alone: `stored` is its stored
/// bytes), oldest first; empty if it has none. For a buffer without range
/// deletes only: the first piece must have none.
#[cfg(test)]
pub(crate) fn messages_of(
    stored: Vec<u8>,
    segments: &[Segment],
    j: usize,
    key: &[u8],
) -> DecResult<Vec<PointMsg>> {
    Ok(read_piece(stored, segments, j, &[])?.messages(key))
}

/// Piece `j` (read alone: `stored` is its stored bytes), checked,
/// decompressed and indexed.
pub(crate) fn read_piece(
    stored: Vec<u8>,
    segments: &[Segment],
    j: usize,
    dict: &[u8],
) -> DecResult<Piece> {
    let s = &segments[j];
    if checksum(&stored) != s.crc {
        return Err("buffer segment checksum mismatch".into());
    }
    let raw = decompress(Cow::Owned(stored), s.codec, s.raw_len as usize, dict)?;
    Piece::parse(raw, j == 0, Some(&s.first))
}

/// One decoded piece of a segmented buffer with the place of each of its
/// keys, validated once: a point query that reads the piece again (the
/// tree's segment cache keeps it) binary-searches it instead of
/// decompressing and scanning it.
#[derive(Debug)]
pub(crate) struct Piece {
    raw: Vec<u8>,
    /// Per key, in order: where its bytes start and end (its encoded
    /// message list follows).
    keys: Vec<(u32, u32)>,
}

impl Piece {
    /// Validates a decoded piece (`head`: the first piece, which starts
    /// with the buffer's kind, range deletes and key count; `first`: the
    /// key it must start with, if known): keys in order, each with a
    /// well-formed, non-empty message list. Indexes its keys.
    pub fn parse(raw: Vec<u8>, head: bool, first: Option<&[u8]>) -> DecResult<Piece> {
        let mut keys = Vec::new();
        let mut d = Dec::new(&raw);
        if head {
            if d.u8("partition kind")? != PART_BUFFER {
                return Err("partition is not a message buffer".into());
            }
            if d.count("range deletes")? != 0 {
                return Err("range deletes in a buffer summarized without".into());
            }
            // The whole buffer's key count, not this piece's: it may
            // exceed the piece's bytes, so it is read as a number, not
            // bounded as a count of what follows (unused here).
            d.varint("message keys")?;
        }
        let mut last: Option<&[u8]> = None;
        while d.remaining() > 0 {
            let k = d.bytes("message key", MAX_KEY_BYTES)?;
            let misplaced = match last {
                Some(l) => l >= k,
                None => first.is_some_and(|f| f != k),
            };
            if misplaced {
                return Err("buffer segment keys out of order".into());
            }
            last = Some(k);
            let key_end = d.pos();
            keys.push(((key_end - k.len()) as u32, key_end as u32));
            let n = d.count("messages of a key")?;
            if n == 0 {
                return Err("key with no messages".into());
            }
            for _ in 0..n {
                read_msg(&mut d)?;
            }
        }
        Ok(Piece { raw, keys })
    }

    /// `key`'s messages, oldest first; empty if it has none.
    pub fn messages(&self, key: &[u8]) -> Vec<PointMsg> {
        let key_at = |&(start, end): &(u32, u32)| &self.raw[start as usize..end as usize];
        let i = self.keys.partition_point(|k| key_at(k) < key);
        match self.keys.get(i) {
            Some(k) if key_at(k) == key => decode_list(&self.raw[k.1 as usize..]),
            _ => Vec::new(),
        }
    }

    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.raw.capacity() + self.keys.capacity() * std::mem::size_of::<(u32, u32)>() + 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::MsgBuffer;
    use crate::format::partition::encode_buffer;
    use crate::msg::PointOp;

    /// A buffer of `n` keys with every kind of point message.
    fn buffer(n: u32) -> MsgBuffer {
        let mut b = MsgBuffer::default();
        for i in 0..n {
            let key = format!("k{:05}", i * 2).into_bytes();
            let op = match i % 4 {
                0 => PointOp::Insert(vec![i as u8; 40]),
                1 => PointOp::Delete,
                2 => PointOp::Patch {
                    offset: i,
                    data: b"patch".to_vec(),
                },
                _ => PointOp::Truncate { len: 7 },
            };
            b.put_point(key.clone(), PointMsg { msn: 10, op });
            if i % 3 == 0 {
                let op = PointOp::Patch {
                    offset: 1,
                    data: vec![9],
                };
                b.put_point(key, PointMsg { msn: 11, op });
            }
        }
        b
    }

    fn segmented(b: &MsgBuffer, every: usize, c: Compression) -> (Vec<u8>, Vec<u8>, Vec<Segment>) {
        let mut e = Enc::default();
        let cuts = encode_buffer(b, &mut e, every);
        let (stored, segments) = split(e.buf.clone(), &cuts, c, &[]);
        (e.buf, stored, segments)
    }

    /// Every key's messages come out of its one piece exactly as the whole
    /// buffer has them, for keys present, absent, before and after all.
    #[test]
    fn each_key_is_found_in_its_piece_as_in_the_whole_buffer() {
        for c in [Compression::None, Compression::Lz4] {
            let b = buffer(500);
            let (raw, stored, segments) = segmented(&b, 1024, c);
            assert!(segments.len() > 10, "{} pieces", segments.len());
            assert_eq!(join(&stored, &segments, raw.len(), &[]).unwrap(), raw);
            for i in 0..1002u32 {
                let key = format!("k{i:05}").into_bytes();
                let want = b.lookup(&key).1.into_owned();
                let got = match find(&segments, &key) {
                    None => Vec::new(),
                    Some(j) => {
                        let s = &segments[j];
                        let piece = &stored[s.offset as usize..(s.offset + s.stored_len) as usize];
                        messages_of(piece.to_vec(), &segments, j, &key).unwrap()
                    }
                };
                assert_eq!(got, want, "{c:?} key {i}");
            }
            assert_eq!(find(&segments, b"a"), None);
        }
    }

    /// The first piece starts with the whole buffer's key count, which may
    /// exceed the piece's own bytes: a point query into it must still be
    /// answered. Found by the srctree benchmark: a remount failed with
    /// "message keys count 17060 exceeds the 16432 bytes left".
    #[test]
    fn a_first_piece_holding_fewer_bytes_than_the_buffer_has_keys_answers() {
        let b = buffer(3000);
        let (raw, stored, segments) = segmented(&b, 1024, Compression::None);
        let s = &segments[0];
        assert!(b.key_count() > s.raw_len as usize, "{} keys", b.key_count());
        assert_eq!(join(&stored, &segments, raw.len(), &[]).unwrap(), raw);
        let piece = &stored[s.offset as usize..(s.offset + s.stored_len) as usize];
        let got = messages_of(piece.to_vec(), &segments, 0, &s.first).unwrap();
        assert_eq!(got, b.lookup(&s.first).1.into_owned());
    }

    /// The directory survives its encoding, is checked against the
    /// partition's entry, and a damaged piece is an error, never data.
    #[test]
    fn directory_round_trips_and_damage_is_an_error() {
        let b = buffer(200);
        let (raw, mut stored, segments) = segmented(&b, 512, Compression::None);
        let loc = PartLoc {
            offset: 0,
            stored_len: stored.len() as u32,
            raw_len: raw.len() as u32,
            codec: CODEC_SEGMENTS,
            crc: checksum(&stored),
        };
        let mut e = Enc::default();
        encode_dir(&segments, &mut e);
        assert_eq!(decode_dir(&mut Dec::new(&e.buf), &loc).unwrap(), segments);
        let unsegmented = PartLoc { codec: 0, ..loc };
        assert!(decode_dir(&mut Dec::new(&e.buf), &unsegmented).is_err());
        let short = PartLoc {
            stored_len: loc.stored_len - 1,
            ..loc
        };
        assert!(decode_dir(&mut Dec::new(&e.buf), &short).is_err());
        let s = segments[1].clone();
        stored[s.offset as usize + 3] ^= 1;
        let piece = stored[s.offset as usize..(s.offset + s.stored_len) as usize].to_vec();
        assert!(messages_of(piece, &segments, 1, &s.first).is_err());
    }

    /// A buffer smaller than a piece, or with no point messages, is not cut.
    #[test]
    fn small_buffers_stay_whole() {
        let mut e = Enc::default();
        assert_eq!(encode_buffer(&buffer(3), &mut e, 4096).len(), 1);
        let mut e = Enc::default();
        assert!(encode_buffer(&MsgBuffer::default(), &mut e, 1).is_empty());
    }
}
