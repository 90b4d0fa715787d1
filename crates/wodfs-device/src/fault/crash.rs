//! How a power cut turns the unsynced epoch into media contents.
//!
//! The image is a pure function of the durable bytes, the epoch's writes and
//! a seed, so the same history always crashes the same way.

use std::ops::Range;

use super::rng::SplitMix64;
use crate::SECTOR_BYTES;

/// A write issued since the last successful sync, kept whole so a crash can
/// replay any part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingWrite {
    pub(crate) offset: u64,
    pub(crate) data: Vec<u8>,
}

/// What a power cut did to one unsynced write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Applied,
    Dropped,
    Torn,
}

/// Relative odds of each [`Outcome`]; at least one is non-zero.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Weights {
    pub(crate) applied: u32,
    pub(crate) dropped: u32,
    pub(crate) torn: u32,
}

impl Weights {
    fn choose(self, rng: &mut SplitMix64) -> Outcome {
        let total = u64::from(self.applied) + u64::from(self.dropped) + u64::from(self.torn);
        let pick = rng.below(total);
        if pick < u64::from(self.applied) {
            Outcome::Applied
        } else if pick < u64::from(self.applied) + u64::from(self.dropped) {
            Outcome::Dropped
        } else {
            Outcome::Torn
        }
    }
}

/// Builds the bytes a restarted machine would read: `durable`, then the
/// epoch's writes in a shuffled order, each applied whole, dropped, or torn
/// into a random subset of its sector pieces.
pub(crate) fn crash_image(
    durable: &[u8],
    epoch: &[PendingWrite],
    weights: Weights,
    seed: u64,
) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed);
    let mut image = durable.to_vec();
    let mut order: Vec<usize> = (0..epoch.len()).collect();
    rng.shuffle(&mut order);
    for index in order {
        let write = &epoch[index];
        match weights.choose(&mut rng) {
            Outcome::Applied => apply(&mut image, write, 0..write.data.len()),
            Outcome::Dropped => {}
            Outcome::Torn => {
                for piece in sector_pieces(write.offset, write.data.len()) {
                    if rng.coin() {
                        apply(&mut image, write, piece);
                    }
                }
            }
        }
    }
    image
}

fn apply(image: &mut [u8], write: &PendingWrite, piece: Range<usize>) {
    let start = write.offset as usize + piece.start;
    let end = write.offset as usize + piece.end;
    image[start..end].copy_from_slice(&write.data[piece]);
}

/// Splits a write at absolute sector boundaries into the pieces a power cut
/// can separate, as ranges into the write's buffer. The partial first and
/// last sectors of an unaligned write are pieces of their own.
pub(crate) fn sector_pieces(offset: u64, len: usize) -> impl Iterator<Item = Range<usize>> {
    let mut start = 0usize;
    std::iter::from_fn(move || {
        if start >= len {
            return None;
        }
        let absolute = offset + start as u64;
        let to_boundary = SECTOR_BYTES - absolute % SECTOR_BYTES;
        let end = len.min(start + to_boundary as usize);
        let piece = start..end;
        start = end;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::{crash_image, sector_pieces, PendingWrite, Weights};

    fn pieces(offset: u64, len: usize) -> Vec<std::ops::Range<usize>> {
        sector_pieces(offset, len).collect()
    }

    #[test]
    fn aligned_writes_split_into_whole_sectors() {
        assert_eq!(pieces(1024, 1536), vec![0..512, 512..1024, 1024..1536]);
    }

    #[test]
    fn unaligned_writes_keep_partial_end_sectors_as_pieces() {
        assert_eq!(
            pieces(100, 1500),
            vec![0..412, 412..924, 924..1436, 1436..1500]
        );
        assert_eq!(pieces(600, 10), vec![0..10]);
        assert_eq!(pieces(510, 4), vec![0..2, 2..4]);
        assert!(pieces(512, 0).is_empty());
    }

    #[test]
    fn an_empty_epoch_leaves_the_durable_bytes() {
        let durable = vec![7u8; 2048];
        let weights = Weights {
            applied: 1,
            dropped: 1,
            torn: 1,
        };
        assert_eq!(crash_image(&durable, &[], weights, 3), durable);
    }

    #[test]
    fn weights_can_force_one_outcome() {
        let durable = vec![0u8; 2048];
        let epoch = [PendingWrite {
            offset: 512,
            data: vec![9u8; 1024],
        }];
        let applied_only = Weights {
            applied: 1,
            dropped: 0,
            torn: 0,
        };
        let dropped_only = Weights {
            applied: 0,
            dropped: 1,
            torn: 0,
        };
        for seed in 0..20 {
            let image = crash_image(&durable, &epoch, applied_only, seed);
            assert!(image[512..1536].iter().all(|&b| b == 9));
            assert_eq!(crash_image(&durable, &epoch, dropped_only, seed), durable);
        }
    }
}
