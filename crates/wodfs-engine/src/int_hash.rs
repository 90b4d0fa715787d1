//! A hasher for maps keyed by integers the engine itself made (log
//! positions, block numbers): one rotate, xor and multiply per word, as
//! rustc's FxHash. Std's SipHash resists keys chosen by an attacker, which
//! these are not, and costs most of each lookup: building the map of a
//! sequential stream's binding answers (one entry per insert) took 10 %
//! of engine-compare's sequential-insert profile, half of it hashing.
//!
//! Keys that come from users (the file system's path keys) hash through
//! [`SeededState`]: the same words, started from a seed drawn once per
//! process, so that nobody can pick names that all share a bucket.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::OnceLock;

/// FxHash's multiplier (from Firefox, used by rustc).
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[derive(Clone, Copy, Debug, Default)]
pub struct IntHasher(u64);

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
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A `HashSet` hashed with [`IntHasher`].
pub type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;

/// Builds [`IntHasher`]s that start from this process's random seed: for
/// maps whose keys users choose (`HashMap::with_hasher(SeededState::new())`).
#[derive(Clone, Copy, Debug)]
pub struct SeededState(u64);

impl SeededState {
    /// The process's seed (drawn by std's `RandomState` on first use).
    pub fn new() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        SeededState(
            *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64)),
        )
    }
}

impl Default for SeededState {
    fn default() -> Self {
        SeededState::new()
    }
}

impl BuildHasher for SeededState {
    type Hasher = IntHasher;
    fn build_hasher(&self) -> IntHasher {
        IntHasher(self.0)
    }
}

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

    /// Path-like keys that differ only in their last bytes (a directory's
    /// numbered files, the TableFS benchmark's names) spread as well.
    #[test]
    fn keys_differing_in_their_last_bytes_spread_over_buckets() {
        let buckets = 1 << 12;
        let mut used = vec![0u32; buckets];
        let state = SeededState::new();
        for i in 0..(16 * buckets) {
            let key = format!("\x10/table/dir/f{i:09}").into_bytes();
            used[(state.hash_one(&key) as usize) & (buckets - 1)] += 1;
        }
        let max = *used.iter().max().unwrap();
        assert!(max < 64, "a bucket got {max} of an average 16");
    }
}
