//! A filter over the keys of a message buffer's map (an open buffer's, or
//! a frozen one's delta), so that a point query skips the map of a buffer
//! that holds nothing for its key.
//!
//! A cached point query looks its key up in the buffer of every level on
//! its path, and nearly always finds nothing there: under TableFS's
//! random stat/chmod/utime the buffers hold the last few thousand changed
//! files, out of a million. Each miss was a B-tree descent of the map,
//! one cache miss per map node: a fifth of the query (in-process,
//! `perf`). The filter answers most of those misses from one word.
//!
//! It is a Bloom filter blocked to one 64-bit word per key (three bits of
//! one word, about 1 % false positives at its capacity): a lookup touches
//! one cache line. It may say "maybe" for a key the map no longer holds
//! (keys removed are not cleared); it never says "no" for a key the map
//! holds. The buffer keeps that invariant: a key put into the map is
//! added here, and a change that brings keys into the map in bulk either
//! builds the filter from the whole map or resets it to "no filter" (every
//! key maybe), to be rebuilt once enough keys have been put since.

/// Bits per key at capacity.
const BITS_PER_KEY: usize = 16;
/// Keys put into a map without a filter before one is built: smaller maps
/// are a descent of one or two nodes, not worth a filter.
pub(crate) const MIN_KEYS: usize = 64;

#[derive(Clone, Debug)]
pub(crate) struct KeyFilter {
    /// Empty: no filter, every key may be present.
    words: Vec<u64>,
    /// Keys that may still be added before the filter must be rebuilt
    /// from the map (larger, or, without words, for the first time).
    room: usize,
}

impl Default for KeyFilter {
    fn default() -> Self {
        KeyFilter {
            words: Vec::new(),
            room: MIN_KEYS,
        }
    }
}

/// The word and the three bits of `key`: one crc32c (hardware), its high
/// bits choosing the word (multiply-shift), its low 18 bits the bits.
fn place(key: &[u8], words: usize) -> (usize, u64) {
    let h = crc32c::crc32c(key);
    let word = ((u64::from(h) * words as u64) >> 32) as usize;
    let bits = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63));
    (word, bits)
}

impl KeyFilter {
    /// A filter of `keys` (the whole map) with room for as many again.
    pub fn build<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> KeyFilter {
        let n = keys.len();
        if n < MIN_KEYS {
            return KeyFilter {
                words: Vec::new(),
                room: MIN_KEYS - n,
            };
        }
        let capacity = 2 * n;
        let mut words = vec![0u64; (capacity * BITS_PER_KEY).div_ceil(64)];
        let len = words.len();
        for k in keys {
            let (w, bits) = place(k, len);
            words[w] |= bits;
        }
        KeyFilter {
            words,
            room: capacity - n,
        }
    }

    /// Might the map hold `key`?
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        if self.words.is_empty() {
            return true;
        }
        let (w, bits) = place(key, self.words.len());
        self.words[w] & bits == bits
    }

    /// Notes `key` put into the map. False when the filter is full (or
    /// there is none yet and enough keys were put): the caller rebuilds
    /// it from the whole map with [`KeyFilter::build`]. Until then it says
    /// "maybe" for every key, so the invariant holds either way.
    #[must_use]
    pub fn add(&mut self, key: &[u8]) -> bool {
        if self.room == 0 {
            self.words.clear();
            return false;
        }
        self.room -= 1;
        if !self.words.is_empty() {
            let (w, bits) = place(key, self.words.len());
            self.words[w] |= bits;
        }
        true
    }

    /// Forgets every key: no filter until enough keys are put again.
    pub fn reset(&mut self) {
        *self = KeyFilter::default();
    }

    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.words.len() * 8
    }

    #[cfg(test)]
    pub fn is_built(&self) -> bool {
        !self.words.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Vec<u8> {
        format!("/table/f{i:08}").into_bytes()
    }

    /// Built from keys, the filter says "maybe" for each of them, and
    /// "no" for most others.
    #[test]
    fn a_built_filter_holds_its_keys_and_few_others() {
        let keys: Vec<Vec<u8>> = (0..10_000).map(key).collect();
        let f = KeyFilter::build(keys.iter().map(Vec::as_slice));
        assert!(keys.iter().all(|k| f.may_contain(k)));
        let false_hits = (10_000..110_000)
            .filter(|&i| f.may_contain(&key(i)))
            .count();
        // At half its capacity: well under 1 % (about 0.2 % here).
        assert!(false_hits < 1_000, "{false_hits} of 100,000");
    }

    /// Keys added one by one stay present, through the rebuild a full
    /// filter asks for; before the first build every key is "maybe".
    #[test]
    fn added_keys_stay_present_across_rebuilds() {
        let mut f = KeyFilter::default();
        let mut map: Vec<Vec<u8>> = Vec::new();
        let mut rebuilds = 0;
        for i in 0..5_000 {
            let k = key(i * 7);
            map.push(k.clone());
            if !f.add(&k) {
                f = KeyFilter::build(map.iter().map(Vec::as_slice));
                rebuilds += 1;
            }
            assert!(map.iter().all(|k| f.may_contain(k)), "after key {i}");
        }
        // The first build at MIN_KEYS, then each at twice the last size.
        assert!((6..=8).contains(&rebuilds), "{rebuilds} rebuilds");
        assert!(f.is_built());
        f.reset();
        assert!(!f.is_built());
        assert!(f.may_contain(b"anything"));
    }
}
