//! A hasher for maps keyed by integers the engine itself made (log
//! positions, block numbers): one rotate, xor and multiply per word, as
//! rustc's FxHash. Std's SipHash resists keys chosen by an attacker, which
//! these are not, and costs most of each lookup: building the map of a
//! sequential stream's binding answers (one entry per insert) took 10 %
//! of engine-compare's sequential-insert profile, half of it hashing.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash's multiplier (from Firefox, used by rustc).
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IntHasher(u64);

impl IntHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The multiply carries low bits up, never down, and hashbrown
        // picks buckets by the low bits: fold the high half in (keys such
        // as multiples of 4096 would share a few buckets otherwise).
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(SEED) ^ (h >> 32)
    }
}

/// A `HashMap` hashed with [`IntHasher`].
pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A `HashSet` hashed with [`IntHasher`].
pub(crate) type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Consecutive log positions, the keys it is made for, spread over a
    /// table's buckets as well as random keys would.
    #[test]
    fn consecutive_keys_spread_over_buckets() {
        let buckets = 1 << 12;
        let mut used = vec![0u32; buckets];
        for lsn in 0..(4 * buckets as u64) {
            for op in 0..4u32 {
                let mut h = IntHasher::default();
                std::hash::Hash::hash(&(lsn * 4096, op), &mut h);
                used[(h.finish() as usize) & (buckets - 1)] += 1;
            }
        }
        let max = *used.iter().max().unwrap();
        assert!(max < 64, "a bucket got {max} of an average 16");
    }
}
