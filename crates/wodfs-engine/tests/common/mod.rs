//! Shared by the engine's integration tests: the `BTreeMap` model of the
//! tree and a small deterministic random generator.

#![allow(dead_code)]

use std::collections::BTreeMap;

use wodfs_engine::{prefix_successor, Config, Op};

/// 256 KiB nodes with the default partition size and fanout: trees of a
/// few levels from a few thousand 4 KiB values.
pub fn small_nodes() -> Config {
    Config {
        node_bytes: 256 << 10,
        partition_bytes: 16 << 10,
        fanout: 16,
        cache_bytes: 6 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    }
}

/// `n` bytes that do not compress.
pub fn incompressible(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// What the tree should hold.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies one operation to the model, with the engine's semantics.
pub fn apply(m: &mut Model, op: &Op) {
    match op {
        Op::Insert { key, value } => {
            m.insert(key.clone(), value.clone());
        }
        Op::Delete { key } => {
            m.remove(key);
        }
        Op::Patch { key, offset, data } => {
            let mut v = m.remove(key).unwrap_or_default();
            let end = *offset as usize + data.len();
            if v.len() < end {
                v.resize(end, 0);
            }
            v[*offset as usize..end].copy_from_slice(data);
            m.insert(key.clone(), v);
        }
        Op::Truncate { key, len } => {
            if let Some(v) = m.get_mut(key) {
                v.truncate(*len as usize);
            }
        }
        Op::DeleteRange { lo, hi } => delete_range(m, lo, hi),
        Op::RangeMove { from, to } => {
            delete_range(m, to, &prefix_successor(to).unwrap());
            let from_end = prefix_successor(from).unwrap();
            let moving: Vec<_> = m
                .range(from.clone()..from_end)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (k, v) in moving {
                m.remove(&k);
                let mut nk = to.clone();
                nk.extend_from_slice(&k[from.len()..]);
                m.insert(nk, v);
            }
        }
    }
}

fn delete_range(m: &mut Model, lo: &[u8], hi: &[u8]) {
    let dead: Vec<_> = m
        .range(lo.to_vec()..hi.to_vec())
        .map(|(k, _)| k.clone())
        .collect();
    for k in dead {
        m.remove(&k);
    }
}

/// SplitMix64: deterministic from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A number from the environment (soak and size knobs), or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
