//! The index of a frozen partition: where each entry lies in the raw
//! bytes, and a compact copy of the keys' distinguishing bytes to search.
//!
//! A cold point query binary-searches one partition per level. Comparing
//! against the keys in place costs two cache misses a step (the span, then
//! the key's bytes somewhere in a 16 KiB partition), and the keys of one
//! partition mostly agree on a long prefix (a directory's entry prefix, a
//! file's data prefix), so every comparison also walks that prefix again:
//! the searches were a sixth of the request thread under TableFS's cold
//! queries (session 33). All keys of a sorted run share the prefix of its
//! first and last key; past it, eight bytes of each key ([`head`]) sit in
//! one dense array, eight entries a cache line. The search compares those
//! numbers and reads a key's bytes only where the heads tie.

use std::cmp::Ordering;

use crate::key_cmp::{head, key_cmp};

/// Where one entry's pieces lie in the raw bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub key_start: u32,
    pub key_end: u32,
    /// Basement: the value's start. Buffer: where the message list starts.
    pub rest_start: u32,
    /// Basement: the value's end. Buffer: where the message list ends.
    pub rest_end: u32,
}

/// The spans of a sorted run of distinct keys, searchable.
#[derive(Clone, Debug)]
pub(super) struct EntryIndex {
    spans: Vec<Span>,
    /// Per entry, [`head`] of its key past the first `shared` bytes.
    heads: Vec<u64>,
    /// Bytes every key starts with: the common prefix of the first and
    /// the last key (all keys between share it).
    shared: usize,
}

impl EntryIndex {
    /// Indexes `spans` of sorted keys in `raw`.
    pub fn new(spans: Vec<Span>, raw: &[u8]) -> Self {
        let key = |s: &Span| &raw[s.key_start as usize..s.key_end as usize];
        let shared = match (spans.first(), spans.last()) {
            (Some(a), Some(b)) => common_prefix(key(a), key(b)),
            _ => 0,
        };
        let heads = spans.iter().map(|s| head(&key(s)[shared..])).collect();
        EntryIndex {
            spans,
            heads,
            shared,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn span(&self, i: usize) -> Span {
        self.spans[i]
    }

    /// Drops the first `n` bytes of every key (all keys share them). The
    /// heads stay valid: they describe the bytes past the shared prefix,
    /// which only gets shorter.
    pub fn strip_keys(&mut self, n: usize) {
        debug_assert!(self.spans.is_empty() || n <= self.shared);
        for s in &mut self.spans {
            s.key_start += n as u32;
        }
        self.shared = self.shared.saturating_sub(n);
    }

    /// Heap bytes held.
    pub fn mem_bytes(&self) -> usize {
        self.spans.len() * (std::mem::size_of::<Span>() + std::mem::size_of::<u64>())
    }

    /// The first entry whose key is `>= key`.
    pub fn lower_bound(&self, raw: &[u8], key: &[u8]) -> usize {
        match self.probe(raw, key) {
            Err(i) => i,
            Ok(rest) => self.search(raw, &rest, 0, self.len()),
        }
    }

    /// [`EntryIndex::lower_bound`] for a key known to lie at or after entry
    /// `from`: a galloping search from there, a few comparisons when keys
    /// are asked in ascending order close to each other.
    pub fn lower_bound_from(&self, raw: &[u8], key: &[u8], from: usize) -> usize {
        let rest = match self.probe(raw, key) {
            Err(i) => return i.max(from.min(self.len())),
            Ok(rest) => rest,
        };
        let n = self.len();
        let (mut lo, mut step) = (from.min(n), 1);
        while lo + step <= n && self.less(raw, lo + step - 1, &rest) {
            lo += step;
            step *= 2;
        }
        self.search(raw, &rest, lo, (lo + step).min(n))
    }

    /// Compares `key` with the shared prefix: `Err(i)` when that decides
    /// the answer (`0` below every key, `len` above), else what is left of
    /// the key to search with.
    fn probe<'k>(&self, raw: &[u8], key: &'k [u8]) -> Result<Rest<'k>, usize> {
        let Some(first) = self.spans.first() else {
            return Err(0);
        };
        let start = first.key_start as usize;
        let shared = &raw[start..start + self.shared];
        let m = key.len().min(self.shared);
        match key_cmp(&key[..m], &shared[..m]) {
            Ordering::Less => Err(0),
            Ordering::Greater => Err(self.len()),
            // A key that ends inside the shared prefix sorts before all.
            Ordering::Equal if m < self.shared => Err(0),
            Ordering::Equal => Ok(Rest {
                head: head(&key[m..]),
                bytes: &key[m..],
            }),
        }
    }

    /// Whether entry `i`'s key sorts before the searched one.
    #[inline]
    fn less(&self, raw: &[u8], i: usize, rest: &Rest<'_>) -> bool {
        let h = self.heads[i];
        if h != rest.head {
            // Unequal heads order the keys (zero padding keeps the order).
            return h < rest.head;
        }
        let s = self.spans[i];
        key_cmp(
            &raw[s.key_start as usize + self.shared..s.key_end as usize],
            rest.bytes,
        )
        .is_lt()
    }

    /// Binary search in `[lo, hi)`, where the answer is known to lie.
    fn search(&self, raw: &[u8], rest: &Rest<'_>, mut lo: usize, mut hi: usize) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.less(raw, mid, rest) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// The searched key past the shared prefix.
struct Rest<'k> {
    head: u64,
    bytes: &'k [u8],
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lays keys out as the partitions do (key, then some other bytes).
    fn laid_out(keys: &[Vec<u8>]) -> (Vec<u8>, Vec<Span>) {
        let (mut raw, mut spans) = (vec![7u8; 3], Vec::new());
        for k in keys {
            let start = raw.len();
            raw.extend_from_slice(k);
            let end = raw.len();
            raw.extend_from_slice(&[0xAB, 0xCD]);
            spans.push(Span {
                key_start: start as u32,
                key_end: end as u32,
                rest_start: end as u32,
                rest_end: raw.len() as u32,
            });
        }
        (raw, spans)
    }

    fn reference(keys: &[Vec<u8>], key: &[u8]) -> usize {
        keys.partition_point(|k| k.as_slice() < key)
    }

    /// Keys over a tiny alphabet with a long common start, so heads tie,
    /// keys end inside the shared prefix and keys are prefixes of others.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        (0usize..3, prop::collection::vec(0u8..3, 0..14)).prop_map(|(p, tail)| {
            let mut k = b"/dir/sub".to_vec();
            k.truncate(5 + p);
            k.extend(tail);
            k
        })
    }

    proptest! {
        #[test]
        fn searches_agree_with_a_plain_binary_search(
            set in prop::collection::btree_set(key(), 0..40),
            probes in prop::collection::vec(key(), 1..30),
            strip in 0usize..6,
            from in 0usize..45,
        ) {
            let keys: Vec<Vec<u8>> = set.into_iter().collect();
            let (raw, spans) = laid_out(&keys);
            let mut index = EntryIndex::new(spans, &raw);
            for p in &probes {
                let want = reference(&keys, p);
                prop_assert_eq!(index.lower_bound(&raw, p), want);
                let from = from.min(want);
                prop_assert_eq!(index.lower_bound_from(&raw, p, from), want);
            }
            // Stripping a prefix all keys share keeps the searches right.
            let n = strip.min(index.shared);
            if keys.len() > 1 {
                index.strip_keys(n);
                let stripped: Vec<Vec<u8>> = keys.iter().map(|k| k[n..].to_vec()).collect();
                for p in &probes {
                    let p = &p[n.min(p.len())..];
                    prop_assert_eq!(index.lower_bound(&raw, p), reference(&stripped, p));
                }
            }
        }
    }

    #[test]
    fn an_empty_index_answers_zero() {
        let index = EntryIndex::new(Vec::new(), &[]);
        assert_eq!(index.lower_bound(&[], b"x"), 0);
        assert_eq!(index.lower_bound_from(&[], b"x", 3), 0);
    }

    #[test]
    fn one_key_is_its_own_shared_prefix() {
        let keys = vec![b"only".to_vec()];
        let (raw, spans) = laid_out(&keys);
        let index = EntryIndex::new(spans, &raw);
        assert_eq!(index.lower_bound(&raw, b"onl"), 0);
        assert_eq!(index.lower_bound(&raw, b"only"), 0);
        assert_eq!(index.lower_bound(&raw, b"only\0"), 1);
        assert_eq!(index.lower_bound(&raw, b"p"), 1);
    }
}
