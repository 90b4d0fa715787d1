//! Batch records compressed as one LZ4 stream.
//!
//! A batch is usually small (a file's few KiB, an attribute change), and
//! what it repeats is in the batches before it: the same keys, the same
//! file bodies. Each batch alone compresses little; LZ4's linked blocks,
//! which match against the last 64 KiB of everything compressed before,
//! find those repeats (Postmark's log of 256 MiB: 48.5 MiB as independent
//! 64 KiB blocks, 26 MiB linked; RocksDB compresses its WAL as a stream
//! for the same reason).
//!
//! The stream runs through every packed batch since it started; binding
//! records and plain batches are not in it. A batch whose sample looks
//! incompressible (the partitions' test: bytes near uniform, few repeats;
//! zlib-compressed git objects, media) is logged plain without going
//! through LZ4 at all; every other batch is packed, even where that saves
//! nothing (LZ4 then stores its blocks as they are: 4 bytes a block more
//! than plain). A packed record says whether it starts a stream.
//! The log starts one at its first batch after open and after every
//! checkpoint's position (a checkpoint restarts it under the tree's lock,
//! where its LSN is taken), so recovery, which reads from a checkpoint's
//! position, always finds the start of the stream it needs.
//!
//! Packed payload: `3u8`, flags (bit 0: this record starts a stream),
//! varint length of the plain payload, then LZ4 frame blocks (a `u32` size
//! whose top bit marks a block stored as it is, then the block), linked,
//! at most 64 KiB each, without checksums: the record's chain covers them.

use std::borrow::Cow;
use std::io::Write;

use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};

use crate::format::bytes::{varint_len, Dec, DecResult, Enc};
use crate::format::partition::looks_incompressible;

/// Payload kind of a packed batch (beside `record`'s plain batch and
/// bindings; never renumbered).
pub(crate) const PAYLOAD_PACKED: u8 = 3;

const STARTS_STREAM: u8 = 1;

/// LZ4's window: how far back a match may reach.
const WINDOW_BYTES: usize = 64 << 10;

/// The largest block, and so the largest piece decoded at once.
const BLOCK_BYTES: usize = 64 << 10;

/// A block's size word: the top bit marks a block stored uncompressed.
const STORED_BIT: u32 = 1 << 31;

/// The LZ4 frame header the encoder writes before a stream's first block:
/// magic, flags, block descriptor and header checksum. Not logged.
const FRAME_HEADER_BYTES: usize = 7;

/// Batches above this size are judged by a sample before packing; smaller
/// ones are packed.
const SAMPLED_FROM_BYTES: usize = 4096;

/// The most a packed record can exceed its plain payload by: kind, flags,
/// the length varint, and a size word per block.
pub(crate) fn packed_bound(plain_len: usize) -> usize {
    plain_len + 2 + varint_len(plain_len as u64) + 4 * (plain_len / BLOCK_BYTES + 1)
}

/// The writer's side: the stream so far.
pub(crate) struct Packer {
    /// `None`: the next batch starts a stream.
    encoder: Option<FrameEncoder<Vec<u8>>>,
}

impl std::fmt::Debug for Packer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("streaming", &self.encoder.is_some())
            .finish()
    }
}

impl Packer {
    pub fn new() -> Packer {
        Packer { encoder: None }
    }

    /// The next batch starts a new stream.
    pub fn restart(&mut self) {
        self.encoder = None;
    }

    /// The payload to log for the plain batch payload `plain`: `plain`
    /// itself if a sample says it will not compress, else packed.
    pub fn pack<'a>(&mut self, plain: &'a [u8]) -> Cow<'a, [u8]> {
        if plain.len() > SAMPLED_FROM_BYTES && looks_incompressible(plain) {
            return Cow::Borrowed(plain);
        }
        let starts = self.encoder.is_none();
        let encoder = self.encoder.get_or_insert_with(|| {
            let info = FrameInfo::new()
                .block_mode(BlockMode::Linked)
                .block_size(BlockSize::Max64KB);
            FrameEncoder::with_frame_info(info, Vec::new())
        });
        // The record's head first, then the blocks the encoder appends:
        // the payload is built in one buffer of its largest size.
        let mut head = Enc::with_capacity(packed_bound(plain.len()) + FRAME_HEADER_BYTES);
        head.u8(PAYLOAD_PACKED);
        head.u8(if starts { STARTS_STREAM } else { 0 });
        head.varint(plain.len() as u64);
        let head_len = head.len();
        *encoder.get_mut() = head.buf;
        // Writing into a `Vec` cannot fail, nor can the compression.
        encoder.write_all(plain).expect("packing into memory");
        encoder.flush().expect("packing into memory");
        let mut out = std::mem::take(encoder.get_mut());
        if starts {
            // The frame header the encoder wrote before its first block.
            debug_assert_eq!(out[head_len..head_len + 4], 0x184D_2204u32.to_le_bytes());
            out.drain(head_len..head_len + FRAME_HEADER_BYTES);
        }
        debug_assert!(out.len() <= packed_bound(plain.len()));
        Cow::Owned(out)
    }
}

/// The reader's side (recovery): the stream's last bytes, to decode the
/// next packed record against.
#[derive(Debug, Default)]
pub(crate) struct Unpacker {
    /// The stream's bytes so far, at least its last `WINDOW_BYTES`.
    history: Vec<u8>,
    /// A stream's start has been seen.
    started: bool,
}

impl Unpacker {
    /// The plain payload of a logged payload: a packed batch decoded,
    /// anything else (a plain batch, bindings: no part of the stream) as
    /// it is.
    pub fn unpack<'a>(&mut self, payload: &'a [u8]) -> DecResult<Cow<'a, [u8]>> {
        match payload.first() {
            Some(&PAYLOAD_PACKED) => self.unpack_packed(payload).map(Cow::Owned),
            _ => Ok(Cow::Borrowed(payload)),
        }
    }

    fn unpack_packed(&mut self, payload: &[u8]) -> DecResult<Vec<u8>> {
        let mut d = Dec::new(&payload[1..]);
        let flags = d.u8("packing flags")?;
        if flags & !STARTS_STREAM != 0 {
            return Err(format!("unknown packing flags {flags:#x}"));
        }
        if flags & STARTS_STREAM != 0 {
            self.history.clear();
            self.started = true;
        } else if !self.started {
            return Err("packed batch continues a stream that started before the replay".into());
        }
        let plain_len = d.varint("plain length")?;
        if plain_len == 0 || plain_len > payload.len() as u64 * 256 + BLOCK_BYTES as u64 {
            return Err(format!("packed batch of {plain_len} plain bytes"));
        }
        let plain_len = plain_len as usize;
        // Blocks decode straight into their place in the batch.
        let mut out = vec![0u8; plain_len];
        let mut at = 0;
        while d.remaining() > 0 {
            let word = d.u32("block size")?;
            let size = (word & !STORED_BIT) as usize;
            if size == 0 || size > BLOCK_BYTES || size > d.remaining() {
                return Err(format!("packed block of {size} bytes"));
            }
            let bytes = d.raw(size, "block")?;
            let room = &mut out[at..(at + BLOCK_BYTES).min(plain_len)];
            let n = if word & STORED_BIT != 0 {
                let Some(place) = room.get_mut(..size) else {
                    return Err("packed batch longer than it says".into());
                };
                place.copy_from_slice(bytes);
                size
            } else {
                let dict = &self.history[self.history.len().saturating_sub(WINDOW_BYTES)..];
                lz4_flex::block::decompress_into_with_dict(bytes, room, dict)
                    .map_err(|e| format!("packed block: {e}"))?
            };
            self.remember(&out[at..at + n]);
            at += n;
        }
        if at != plain_len {
            return Err("packed batch shorter than it says".into());
        }
        Ok(out)
    }

    /// Adds bytes to the history, which keeps at least the last window.
    fn remember(&mut self, bytes: &[u8]) {
        if self.history.len() + bytes.len() > 16 * WINDOW_BYTES {
            let keep_from = (self.history.len() + bytes.len()).saturating_sub(WINDOW_BYTES);
            let keep_from = keep_from.min(self.history.len());
            self.history.drain(..keep_from);
        }
        self.history.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_bytes::{printable, random_bytes};
    use proptest::prelude::*;

    fn batch(body: &[u8]) -> Vec<u8> {
        let mut b = vec![super::super::record::PAYLOAD_BATCH];
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn batches_that_repeat_earlier_ones_shrink_and_come_back() {
        let body = printable(4096, 1);
        let mut packer = Packer::new();
        let mut unpacker = Unpacker::default();
        let mut logged = 0;
        for i in 0..100u32 {
            let plain = batch(
                &[
                    format!("file{i}").as_bytes(),
                    &body[..1000 + i as usize * 30],
                ]
                .concat(),
            );
            let payload = packer.pack(&plain);
            logged += payload.len();
            assert_eq!(payload[0], PAYLOAD_PACKED, "{i}");
            assert_eq!(payload[1] & STARTS_STREAM != 0, i == 0);
            assert_eq!(unpacker.unpack(&payload).unwrap(), &plain[..]);
        }
        // The first batch is random characters; the others repeat it.
        assert!(logged < 4096 + 100 * 64, "{logged}");
    }

    #[test]
    fn incompressible_batches_are_logged_plain_and_stay_out_of_the_stream() {
        let mut packer = Packer::new();
        let mut unpacker = Unpacker::default();
        let first = batch(&printable(3000, 2));
        let random = batch(&random_bytes(20_000, 3));
        let fresh = batch(&printable(3000, 4));
        let again = batch(&[&fresh[1..], &first[1..]].concat());
        let payloads: Vec<Vec<u8>> = [&first, &random, &fresh, &again]
            .iter()
            .map(|p| packer.pack(p).into_owned())
            .collect();
        assert_eq!(payloads[0][0], PAYLOAD_PACKED);
        assert_eq!(payloads[1], random, "random bytes are not even tried");
        // Packed although it saves nothing: its blocks are stored.
        assert_eq!(payloads[2][0], PAYLOAD_PACKED);
        assert!(payloads[2].len() <= packed_bound(fresh.len()));
        assert_eq!(payloads[3][0], PAYLOAD_PACKED);
        assert!(payloads[3].len() < 200, "{}", payloads[3].len());
        for (p, plain) in payloads.iter().zip([&first, &random, &fresh, &again]) {
            assert_eq!(unpacker.unpack(p).unwrap(), &plain[..]);
        }
    }

    #[test]
    fn recovery_from_a_restart_needs_nothing_before_it() {
        let body = printable(2000, 4);
        let mut packer = Packer::new();
        let _ = packer.pack(&batch(&body));
        packer.restart();
        let after = packer.pack(&batch(&body)).into_owned();
        assert_eq!(after[1], STARTS_STREAM);
        let next = packer.pack(&batch(&body)).into_owned();
        // Read from the restart on, as recovery from a checkpoint would.
        let mut unpacker = Unpacker::default();
        assert_eq!(unpacker.unpack(&after).unwrap(), &batch(&body)[..]);
        assert_eq!(unpacker.unpack(&next).unwrap(), &batch(&body)[..]);
        // A record that continues a stream whose start was not read is an
        // error, not a guess.
        let mut late = Unpacker::default();
        assert!(late.unpack(&next).is_err());
    }

    #[test]
    fn damaged_packed_records_are_errors() {
        let mut packer = Packer::new();
        let plain = batch(&printable(5000, 5).repeat(3));
        let good = packer.pack(&plain).into_owned();
        for cut in [3, good.len() / 2, good.len() - 1] {
            assert!(Unpacker::default().unpack(&good[..cut]).is_err(), "{cut}");
        }
        let mut flags = good.clone();
        flags[1] = 0x80;
        assert!(Unpacker::default().unpack(&flags).is_err());
        let mut length = good.clone();
        length[2] ^= 1;
        assert!(Unpacker::default().unpack(&length).is_err());
    }

    proptest! {
        /// Any sequence of batches, compressible or not, with restarts
        /// anywhere, comes back byte for byte when read from the last
        /// restart on, and a packed record never exceeds the bound the log
        /// reserves for it.
        #[test]
        fn packed_batches_round_trip(
            batches in proptest::collection::vec(
                (proptest::collection::vec(0u8..4, 1..9000), any::<bool>(), any::<u64>()),
                1..40,
            ),
        ) {
            let mut packer = Packer::new();
            let mut unpacker = Unpacker::default();
            let mut pending: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for (body, restart, seed) in batches {
                if restart {
                    packer.restart();
                    pending.clear();
                    unpacker = Unpacker::default();
                }
                // One batch in four of random bytes, which is not packed.
                let body = if seed % 4 == 0 {
                    random_bytes(body.len(), seed)
                } else {
                    body.iter().map(|b| b * 60).collect()
                };
                let plain = batch(&body);
                let payload = packer.pack(&plain).into_owned();
                prop_assert!(payload.len() <= packed_bound(plain.len()));
                pending.push((plain, payload));
            }
            for (plain, payload) in &pending {
                prop_assert_eq!(&unpacker.unpack(payload).unwrap()[..], &plain[..]);
            }
        }
    }
}
