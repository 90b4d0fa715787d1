//! The records every workload inserts, reads and checks.
//!
//! Keys are 16 bytes and values 100 bytes (116 user bytes a record). Record
//! `i` is a pure function of `(seed, i)`, so a later process can pick any
//! existing key and the value it must find without sharing state with the
//! process that inserted it.
//!
//! * Random keys: `mix(i ^ seed)` big-endian, then `i` big-endian. `mix` is
//!   a bijection on `u64`, so no two records share a key and the insert
//!   order is a uniform shuffle of the key order.
//! * Sequential keys: `i` big-endian, then `mix(i ^ seed)`, so insert order
//!   is key order.
//! * Values are pseudo-random bytes: incompressible, so an engine that
//!   compresses (fjall uses LZ4 by default) gains nothing it would not gain
//!   on real data of unknown shape.

use serde::{Deserialize, Serialize};

pub const KEY_BYTES: usize = 16;
pub const VALUE_BYTES: usize = 100;
pub const RECORD_BYTES: u64 = (KEY_BYTES + VALUE_BYTES) as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyOrder {
    Random,
    Sequential,
}

/// The SplitMix64 finalizer: a bijection on `u64` with good avalanche.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn key(order: KeyOrder, seed: u64, i: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    let scrambled = mix(i ^ seed);
    let (hi, lo) = match order {
        KeyOrder::Random => (scrambled, i),
        KeyOrder::Sequential => (i, scrambled),
    };
    k[..8].copy_from_slice(&hi.to_be_bytes());
    k[8..].copy_from_slice(&lo.to_be_bytes());
    k
}

/// Recovers `i` from a key made by [`key`].
pub fn index_of(order: KeyOrder, key: &[u8]) -> Option<u64> {
    let bytes: [u8; KEY_BYTES] = key.try_into().ok()?;
    let half = match order {
        KeyOrder::Random => &bytes[8..],
        KeyOrder::Sequential => &bytes[..8],
    };
    Some(u64::from_be_bytes(half.try_into().ok()?))
}

pub fn value(seed: u64, i: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    let mut rng = Rng::new(seed.rotate_left(17) ^ i);
    for chunk in v.chunks_mut(8) {
        let word = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    v
}

/// A small deterministic generator (SplitMix64) for sampling read targets.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// A value in `0..n` (n > 0); the modulo bias is below 2^-40 for the
    /// record counts used here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn keys_are_unique_and_indexable() {
        for order in [KeyOrder::Random, KeyOrder::Sequential] {
            let keys: BTreeSet<_> = (0..10_000).map(|i| key(order, 7, i)).collect();
            assert_eq!(keys.len(), 10_000);
            for i in [0, 1, 9_999] {
                assert_eq!(index_of(order, &key(order, 7, i)), Some(i));
            }
        }
    }

    #[test]
    fn sequential_keys_sort_in_insert_order() {
        let keys: Vec<_> = (0..1_000)
            .map(|i| key(KeyOrder::Sequential, 3, i))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn random_keys_are_shuffled() {
        let keys: Vec<_> = (0..1_000).map(|i| key(KeyOrder::Random, 3, i)).collect();
        let ascending = keys.windows(2).filter(|w| w[0] < w[1]).count();
        assert!((300..700).contains(&ascending), "{ascending}");
    }

    #[test]
    fn values_depend_on_seed_and_index() {
        assert_eq!(value(1, 5), value(1, 5));
        assert_ne!(value(1, 5), value(1, 6));
        assert_ne!(value(1, 5), value(2, 5));
    }
}
