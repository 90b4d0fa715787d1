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

/// How much of a partition is tried first to see whether it compresses;
/// a partition of at most twice this is compressed whole instead. 8 KiB,
/// not 4: a probe sees only repeats that fall inside it, and Postmark's
/// files, each starting with the same 4 KiB of random characters, packed
/// a leaf's 16 KiB partitions with copies that a 4 KiB probe never saw
/// twice, so its leaves went to disk uncompressed (1,405 MiB of node
/// writes in 200,000 transactions; LZ4 over 64 KiB pieces of them: 6×
/// smaller).
const PROBE_BYTES: usize = 8192;

/// Partitions above this size are judged by a sample before LZ4 is tried
/// at all; smaller ones are simply tried.
const SAMPLED_FROM_BYTES: usize = 8192;

/// Bytes sampled for the entropy estimate: `SAMPLE_RUNS` runs of
/// `SAMPLE_RUN` bytes spread evenly over the partition. 512 bytes: a
/// 16 KiB leaf partition is judged on 1/32 of its bytes. Every basement of
/// every leaf written is judged (350,000 for a 4 GiB file), and with 1 KiB
/// samples that was 12 % of the daemon's CPU in a sequential write
/// (session 25: 2.1 µs a judgement, now 1.1).
const SAMPLE_RUN: usize = 32;
const SAMPLE_RUNS: usize = 16;

/// Byte entropy (bits per byte) of a sample at or above which a partition
/// is stored without trying LZ4 (unless the sample repeats itself). A
/// 512-byte sample underestimates: uniformly random bytes measure about
/// 7.6 bits, random bytes of 128 values (7 bits) about 6.8, random
/// printable characters (95 values, 6.57 bits) about 6.44, English text
/// and source code 4.5-5.5. The cut lies between 95 and 128 values: text
/// of any kind is always tried, binary data near uniform is not. btrfs
/// gives up at 6.4 (80 % of 8 bits, `ENTROPY_LVL_HIGH` in
/// `fs/btrfs/compression.c`), but its codecs code entropy and find
/// repeats across a whole extent; LZ4 only finds repeats, and a sample's
/// entropy says nothing about repeats 4 KiB apart: at 6.4, half of
/// Postmark's partitions (copies of one random printable block) were
/// judged by their sample and stored raw. At 7.0, the benchmark's
/// sequential write (random bytes with the low bit set, 7 bits) was
/// tried in every partition: LZ4 was 6 % of the daemon's samples.
const INCOMPRESSIBLE_BITS: f32 = 6.6;

/// Codec number of a partition (or a buffer's segment) compressed by LZ4
/// against its node's dictionary (`format::dict`).
pub(crate) const CODEC_LZ4_DICT: u8 = 2;

/// The codec of bytes LZ4 compressed, against `dict` if it is not empty.
fn lz4_codec(dict: &[u8]) -> u8 {
    if dict.is_empty() {
        Compression::Lz4 as u8
    } else {
        CODEC_LZ4_DICT
    }
}

/// Compresses `raw` if it pays (saves at least 1/8), against `dict` if it
/// is not empty (a node's: LZ4 also finds repeats of it); returns the
/// codec used and the stored bytes.
pub(crate) fn compress(raw: Vec<u8>, c: Compression, dict: &[u8]) -> (u8, Vec<u8>) {
    match packed_if_worth(&raw, c, dict) {
        Some(packed) => (lz4_codec(dict), packed),
        None => (Compression::None as u8, raw),
    }
}

/// [`compress`] of the bytes of `buf` from `start` on, in place: they are
/// replaced by their compressed form if that pays. Returns the codec.
pub(crate) fn compress_tail(buf: &mut Vec<u8>, start: usize, c: Compression, dict: &[u8]) -> u8 {
    match packed_if_worth(&buf[start..], c, dict) {
        Some(packed) => {
            buf.truncate(start);
            buf.extend_from_slice(&packed);
            lz4_codec(dict)
        }
        None => Compression::None as u8,
    }
}

/// Whether `codec` names a way partitions are stored (segments aside).
pub(crate) fn known_codec(codec: u8) -> bool {
    codec == CODEC_LZ4_DICT || Compression::from_u8(codec).is_some()
}

/// The LZ4 form of `raw` (against `dict` if it is not empty) if
/// compression is on and it saves at least 1/8.
fn packed_if_worth(raw: &[u8], c: Compression, dict: &[u8]) -> Option<Vec<u8>> {
    match c {
        Compression::None => None,
        Compression::Lz4 => {
            // Incompressible data (random values, compressed files) is
            // common: a sample of its byte distribution, then a probe of
            // the first bytes, decide cheaply. The sample costs a
            // histogram of 512 bytes; a probe, LZ4's table and a pass
            // over 4 KiB, was 8 % of the daemon's CPU in a sequential
            // write of random data when it ran on every partition. A
            // dictionary is only made from bytes that passed the sample
            // (`format::dict`), so the probe is skipped with one: what
            // the partition repeats of it, the probe would not see.
            if raw.len() > SAMPLED_FROM_BYTES && looks_incompressible(raw) {
                return None;
            }
            if dict.is_empty() && raw.len() > 2 * PROBE_BYTES {
                let probe = lz4_flex::block::compress(&raw[..PROBE_BYTES]);
                if probe.len() >= PROBE_BYTES - PROBE_BYTES / 16 {
                    return None;
                }
            }
            let packed = if dict.is_empty() {
                lz4_flex::block::compress(raw)
            } else {
                lz4_flex::block::compress_with_dict(raw, dict)
            };
            (packed.len() < raw.len() - raw.len() / 8).then_some(packed)
        }
    }
}

/// Whether a sample of `raw` looks like data LZ4 cannot shrink: bytes
/// near uniformly distributed (entropy at least [`INCOMPRESSIBLE_BITS`])
/// and hardly a 4-byte sequence seen twice. LZ4 compresses by finding
/// repeats, so uniform bytes that repeat (a pattern, a block written
/// twice) still compress; btrfs's heuristic looks for repeats too. Found
/// by the rename benchmark, whose files repeat the bytes 1..=255: judged
/// by entropy alone they were stored uncompressed, and 100 renames of a
/// 256 MiB file wrote 16 GB instead of 0.2.
pub(crate) fn looks_incompressible(raw: &[u8]) -> bool {
    let mut buf = [0u8; SAMPLE_RUN * SAMPLE_RUNS];
    let sample = fill_sample(raw, &mut buf);
    entropy_bits(sample) >= INCOMPRESSIBLE_BITS
        && repeated_quads(sample) * 8 < sample.len().saturating_sub(3)
}

/// Copies `SAMPLE_RUNS` runs of `SAMPLE_RUN` bytes of `raw`, at even
/// steps, into `buf` (runs, not single bytes, so that a run of zeros or
/// a repeated short pattern shows); returns the filled part.
fn fill_sample<'b>(raw: &[u8], buf: &'b mut [u8; SAMPLE_RUN * SAMPLE_RUNS]) -> &'b [u8] {
    let runs = SAMPLE_RUNS.min(raw.len() / SAMPLE_RUN).max(1);
    let step = raw.len() / runs;
    let mut n = 0;
    for r in 0..runs {
        let at = r * step;
        let run = &raw[at..(at + SAMPLE_RUN).min(raw.len())];
        buf[n..n + run.len()].copy_from_slice(run);
        n += run.len();
    }
    &buf[..n]
}

/// Shannon entropy, in bits per byte, of a sample of `raw` (see
/// [`looks_incompressible`]).
#[cfg(test)]
pub(crate) fn sample_entropy_bits(raw: &[u8]) -> f32 {
    let mut buf = [0u8; SAMPLE_RUN * SAMPLE_RUNS];
    entropy_bits(fill_sample(raw, &mut buf))
}

fn entropy_bits(sample: &[u8]) -> f32 {
    let mut counts = [0u16; 256];
    for &byte in sample {
        counts[byte as usize] += 1;
    }
    if sample.is_empty() {
        return 0.0;
    }
    let c_log_c = c_log2_c();
    let total = sample.len() as f32;
    let sum: f32 = counts.iter().map(|&c| c_log_c[usize::from(c)]).sum();
    total.log2() - sum / total
}

/// `c · log2(c)` for every count a sample can hold (0 for 0), computed
/// once: 256 `log2f` calls per judgement were a fifth of its time.
fn c_log2_c() -> &'static [f32; SAMPLE_RUN * SAMPLE_RUNS + 1] {
    static TABLE: std::sync::OnceLock<[f32; SAMPLE_RUN * SAMPLE_RUNS + 1]> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0f32; SAMPLE_RUN * SAMPLE_RUNS + 1];
        for (c, v) in t.iter_mut().enumerate().skip(1) {
            *v = c as f32 * (c as f32).log2();
        }
        t
    })
}

/// How many of the sample's 4-byte sequences occurred earlier in it (as
/// LZ4 would find them: the last sequence under each hash is remembered
/// and compared). The table keeps the sequences themselves, tagged so an
/// empty slot matches nothing, rather than their positions: comparing
/// positions' bytes called `memcmp` once a window and made this sample
/// a fifth of the daemon's CPU in a sequential write (session 15).
fn repeated_quads(sample: &[u8]) -> usize {
    // Twice as many slots as the sample has sequences.
    const HASH_BITS: u32 = 10;
    const SEEN: u64 = 1 << 32;
    let mut last = [0u64; 1 << HASH_BITS];
    let mut repeats = 0;
    for quad in sample.windows(4) {
        let word = u32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]]);
        let h = (word.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize;
        let tagged = SEEN | u64::from(word);
        repeats += usize::from(last[h] == tagged);
        last[h] = tagged;
    }
    repeats
}

/// Undoes [`compress`] and [`compress_tail`]; `raw_len` is the recorded
/// decoded length, `dict` the node's dictionary (empty if it has none).
/// An uncompressed partition handed over owned (a single partition just
/// read) becomes the decoded bytes without a copy.
pub(crate) fn decompress(
    stored: Cow<'_, [u8]>,
    codec: u8,
    raw_len: usize,
    dict: &[u8],
) -> DecResult<Vec<u8>> {
    let out = match codec {
        CODEC_LZ4_DICT if dict.is_empty() => {
            return Err("partition compressed against a dictionary its node lacks".into())
        }
        CODEC_LZ4_DICT => lz4_flex::block::decompress_with_dict(&stored, raw_len, dict)
            .map_err(|e| format!("lz4 with dictionary: {e}"))?,
        _ => match Compression::from_u8(codec) {
            Some(Compression::None) => {
                if stored.len() != raw_len {
                    return Err("uncompressed partition length mismatch".into());
                }
                return Ok(stored.into_owned());
            }
            Some(Compression::Lz4) => {
                lz4_flex::block::decompress(&stored, raw_len).map_err(|e| format!("lz4: {e}"))?
            }
            None => return Err(format!("unknown compression codec {codec}")),
        },
    };
    if out.len() != raw_len {
        return Err("decompressed partition length mismatch".into());
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_bytes::{printable, random_bytes};

    fn text(n: usize) -> Vec<u8> {
        let line = b"static int wait_for_completion(struct completion *x, long timeout)\n";
        line.iter().copied().cycle().take(n).collect()
    }

    #[test]
    fn the_entropy_sample_tells_random_bytes_from_text_and_zeros() {
        let random = sample_entropy_bits(&random_bytes(64 << 10, 7));
        assert!(random >= INCOMPRESSIBLE_BITS, "random bytes: {random}");
        let text = sample_entropy_bits(&text(64 << 10));
        assert!(text < 5.0, "text: {text}");
        assert_eq!(sample_entropy_bits(&vec![0u8; 64 << 10]), 0.0);
        assert_eq!(sample_entropy_bits(&[]), 0.0);
        // Shorter than one run: the whole input is the sample.
        assert!(sample_entropy_bits(b"ab") > 0.99);
    }

    #[test]
    fn uniform_bytes_that_repeat_are_worth_compressing() {
        // The default leaf partition (16 KiB) and a large one.
        for n in [16 << 10, 64 << 10] {
            // The rename benchmark's files: the bytes 1..=255 over and over.
            let pattern: Vec<u8> = (1..=255u8).cycle().take(n).collect();
            if n == 64 << 10 {
                // Uniform enough to pass the entropy test: the repeats
                // are what tell.
                assert!(sample_entropy_bits(&pattern) >= INCOMPRESSIBLE_BITS);
            }
            assert!(!looks_incompressible(&pattern), "{n}");
            let (codec, stored) = compress(pattern.clone(), Compression::Lz4, &[]);
            assert_eq!(codec, Compression::Lz4 as u8);
            assert!(stored.len() < pattern.len() / 20);
            // A random 4 KiB block written again and again, as a copy does.
            let block = random_bytes(4096, 21);
            let copies: Vec<u8> = block.iter().copied().cycle().take(n).collect();
            assert!(!looks_incompressible(&copies), "{n}");
            // Random bytes, and random bytes with their low bit set (128
            // values: 7 bits each), do not repeat.
            assert!(looks_incompressible(&random_bytes(n, 5)), "{n}");
            let odd: Vec<u8> = random_bytes(n, 6).iter().map(|b| b | 1).collect();
            assert!(looks_incompressible(&odd), "{n}");
            assert!(!looks_incompressible(&text(n)), "{n}");
        }
    }

    #[test]
    fn the_entropy_cut_lies_between_printable_characters_and_seven_bit_bytes() {
        let (mut printable_max, mut seven_min) = (0f32, 8f32);
        for seed in 0..500 {
            printable_max = printable_max.max(sample_entropy_bits(&printable(16 << 10, seed)));
            let seven: Vec<u8> = random_bytes(16 << 10, seed).iter().map(|b| b | 1).collect();
            seven_min = seven_min.min(sample_entropy_bits(&seven));
        }
        assert!(printable_max < INCOMPRESSIBLE_BITS, "{printable_max}");
        assert!(seven_min >= INCOMPRESSIBLE_BITS, "{seven_min}");
    }

    #[test]
    fn copies_of_a_random_printable_block_are_compressed() {
        let block = printable(4096, 11);
        for n in [16 << 10, 64 << 10] {
            // Entries of a small key and one file's 4 KiB block each.
            let mut part = Vec::new();
            let mut i = 0u32;
            while part.len() < n {
                part.extend_from_slice(format!("key{i:08}").as_bytes());
                part.extend_from_slice(&block);
                i += 1;
            }
            part.truncate(n);
            let bits = sample_entropy_bits(&part);
            assert!(bits < INCOMPRESSIBLE_BITS && bits > 6.0, "{bits}");
            let (codec, stored) = compress(part.clone(), Compression::Lz4, &[]);
            assert_eq!(codec, Compression::Lz4 as u8, "{n}");
            assert!(stored.len() < part.len() / 2, "{n}: {}", stored.len());
            // The same characters without copies are stored as they are.
            let fresh = printable(n, 12);
            assert_eq!(
                compress(fresh, Compression::Lz4, &[]).0,
                Compression::None as u8
            );
        }
    }

    #[test]
    fn compression_is_kept_only_where_it_pays_and_round_trips() {
        for raw in [
            text(64 << 10),
            vec![0u8; 64 << 10],
            random_bytes(64 << 10, 3),
            // Random with a compressible half: the sample sees both.
            [random_bytes(32 << 10, 5), vec![0u8; 32 << 10]].concat(),
            text(100),
        ] {
            let (codec, stored) = compress(raw.clone(), Compression::Lz4, &[]);
            let mut tail = b"header".to_vec();
            tail.extend_from_slice(&raw);
            let tail_codec = compress_tail(&mut tail, 6, Compression::Lz4, &[]);
            assert_eq!((tail_codec, &tail[6..]), (codec, &stored[..]));
            assert_eq!(&tail[..6], b"header");
            let back = decompress(Cow::Borrowed(&stored), codec, raw.len(), &[]).unwrap();
            assert_eq!(back, raw);
            if codec == Compression::Lz4 as u8 {
                assert!(stored.len() < raw.len() - raw.len() / 8);
            }
        }
        let (codec, _) = compress(random_bytes(64 << 10, 9), Compression::Lz4, &[]);
        assert_eq!(codec, Compression::None as u8);
        let (codec, _) = compress(text(64 << 10), Compression::Lz4, &[]);
        assert_eq!(codec, Compression::Lz4 as u8);
        let (codec, _) = compress(text(64 << 10), Compression::None, &[]);
        assert_eq!(codec, Compression::None as u8);
    }
}
