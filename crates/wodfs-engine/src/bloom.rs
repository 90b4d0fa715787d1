//! Bloom filters over the keys of an internal node's buffers, stored in the
//! node header. A cold point query reads a child's buffer partition only if
//! the filter says the key may have a message there (or the buffer holds
//! range deletes), so most lookups read no buffer at all.
//!
//! Hashing is crc32c (specified and hardware-accelerated, unlike Rust's
//! default hasher), with two seeds combined by double hashing.

/// Bits per key: about 1 % false positives with 7 probes.
const BITS_PER_KEY: usize = 10;
pub(crate) const PROBES: u8 = 7;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bloom {
    pub bits: Vec<u8>,
    pub probes: u8,
}

fn hashes(key: &[u8]) -> (u32, u32) {
    let h1 = crc32c::crc32c(key);
    let h2 = crc32c::crc32c_append(0x9E37_79B9, key) | 1;
    (h1, h2)
}

impl Bloom {
    pub fn build<'a>(n: usize, keys: impl Iterator<Item = &'a [u8]>) -> Bloom {
        let bytes = (n * BITS_PER_KEY).div_ceil(8).max(8);
        let mut b = Bloom {
            bits: vec![0; bytes],
            probes: PROBES,
        };
        let m = (bytes * 8) as u32;
        for k in keys {
            let (h1, h2) = hashes(k);
            for i in 0..u32::from(b.probes) {
                let bit = h1.wrapping_add(i.wrapping_mul(h2)) % m;
                b.bits[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        b
    }

    pub fn may_contain(&self, key: &[u8]) -> bool {
        if self.bits.is_empty() {
            return true;
        }
        let m = (self.bits.len() * 8) as u32;
        let (h1, h2) = hashes(key);
        (0..u32::from(self.probes)).all(|i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) % m;
            self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0
        })
    }
}

/// What a header says about one buffer without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BufferSummary {
    pub has_ranges: bool,
    pub filter: Bloom,
    /// The buffer's pieces, if it is stored segmented (see
    /// `format::segments`); empty otherwise.
    pub segments: Vec<crate::format::segments::Segment>,
}

impl BufferSummary {
    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        64 + self.filter.bits.len()
            + self
                .segments
                .iter()
                .map(crate::format::segments::Segment::mem_bytes)
                .sum::<usize>()
    }

    /// Could the buffer hold anything for `key`?
    pub fn may_affect(&self, key: &[u8]) -> bool {
        self.has_ranges || self.filter.may_contain(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| format!("/k/{i}").into_bytes())
            .collect();
        let b = Bloom::build(keys.len(), keys.iter().map(Vec::as_slice));
        assert!(keys.iter().all(|k| b.may_contain(k)));
        let fp = (0..10_000u32)
            .filter(|i| b.may_contain(format!("/other/{i}").as_bytes()))
            .count();
        assert!(fp < 300, "{fp} false positives in 10000");
    }
}
