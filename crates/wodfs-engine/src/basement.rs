//! A basement: one independently readable partition of a leaf, holding
//! sorted key/value pairs (keys relative to the leaf's frame prefix).

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::msg::{PointMsg, PointOp};

/// Per-entry accounting overhead besides key and value bytes (encoded).
const ENTRY_OVERHEAD_BYTES: usize = 6;
/// Per-entry heap overhead in memory, beyond the encoded size.
const MEM_OVERHEAD_PER_ENTRY: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Basement {
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

pub(crate) fn entry_bytes(k: &[u8], v: &[u8]) -> usize {
    k.len() + v.len() + ENTRY_OVERHEAD_BYTES
}

impl Basement {
    pub fn from_map(entries: BTreeMap<Vec<u8>, Vec<u8>>) -> Self {
        let bytes = entries.iter().map(|(k, v)| entry_bytes(k, v)).sum();
        Basement { entries, bytes }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Heap bytes this basement costs in memory (two `Vec` headers and
    /// B-tree slot overhead per entry besides the bytes themselves).
    pub fn mem_bytes(&self) -> usize {
        self.bytes + self.entries.len() * MEM_OVERHEAD_PER_ENTRY
    }

    pub fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.entries.get(key)
    }

    /// Applies a key's messages (oldest first).
    pub fn apply(&mut self, key: &[u8], msgs: &[PointMsg]) {
        let mut value = self.remove(key);
        for m in msgs {
            value = match (&m.op, value) {
                (PointOp::Insert(v), _) => Some(v.clone()),
                (op, old) => op.apply(old),
            };
        }
        if let Some(v) = value {
            self.bytes += entry_bytes(key, &v);
            self.entries.insert(key.to_vec(), v);
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.entries.remove(key)?;
        self.bytes -= entry_bytes(key, &v);
        Some(v)
    }

    /// Deletes every key in `[lo, hi)`.
    pub fn delete_range(&mut self, lo: &[u8], hi: &[u8]) {
        let dead: Vec<Vec<u8>> = self
            .entries
            .range::<[u8], _>((Included(lo), Excluded(hi)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            self.remove(&k);
        }
    }

    pub fn range<'a>(
        &'a self,
        lo: &'a [u8],
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)> + 'a {
        let upper = match hi {
            Some(h) => Excluded(h),
            None => Unbounded,
        };
        self.entries.range::<[u8], _>((Included(lo), upper))
    }
}
