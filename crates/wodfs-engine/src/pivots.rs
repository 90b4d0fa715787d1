//! A node's pivots, searchable in one dense array.
//!
//! Every point query and every message routed down the tree searches a
//! node's pivots for the partition of its key: up to a leaf's 255, each its
//! own heap allocation, so each step of a binary search over the keys was
//! a cache miss (a sixth of a cached point query under TableFS's queries,
//! in-process). Beside the keys sit their [`head`]s, in key order: the
//! search runs over those numbers and reads a key's bytes only among pivots
//! whose heads tie with the searched key's.
//!
//! The keys are read through `Deref` (a slice); every change goes through
//! a method here, which keeps the heads in step.

use std::ops::Deref;

use crate::key_cmp::{head, key_cmp};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pivots {
    keys: Vec<Vec<u8>>,
    /// `head(keys[i])` for each `i`: non-decreasing, as the keys ascend.
    heads: Vec<u64>,
}

impl Deref for Pivots {
    type Target = [Vec<u8>];

    fn deref(&self) -> &[Vec<u8>] {
        &self.keys
    }
}

impl From<Vec<Vec<u8>>> for Pivots {
    fn from(keys: Vec<Vec<u8>>) -> Self {
        let heads = keys.iter().map(|k| head(k)).collect();
        Pivots { keys, heads }
    }
}

impl FromIterator<Vec<u8>> for Pivots {
    fn from_iter<I: IntoIterator<Item = Vec<u8>>>(keys: I) -> Self {
        Pivots::from(keys.into_iter().collect::<Vec<_>>())
    }
}

impl Pivots {
    pub fn into_keys(self) -> Vec<Vec<u8>> {
        self.keys
    }

    /// How many pivots are `<= rel`: the index of the partition holding
    /// `rel`. Heads below `rel`'s belong to smaller keys and heads above
    /// to larger ones (`a < b` implies `head(a) <= head(b)`); only keys
    /// with an equal head are compared whole.
    pub fn count_le(&self, rel: &[u8]) -> usize {
        let h = head(rel);
        let below = self.heads.partition_point(|&x| x < h);
        let tied = self.heads[below..].partition_point(|&x| x == h);
        below + self.keys[below..below + tied].partition_point(|p| key_cmp(p, rel).is_le())
    }

    pub fn push(&mut self, key: Vec<u8>) {
        self.heads.push(head(&key));
        self.keys.push(key);
    }

    pub fn insert(&mut self, at: usize, key: Vec<u8>) {
        self.heads.insert(at, head(&key));
        self.keys.insert(at, key);
    }

    pub fn remove(&mut self, at: usize) -> Vec<u8> {
        self.heads.remove(at);
        self.keys.remove(at)
    }

    /// Moves every pivot of `other` to the end.
    pub fn append(&mut self, other: &mut Pivots) {
        self.heads.append(&mut other.heads);
        self.keys.append(&mut other.keys);
    }

    /// Adds `keys` at the end, in their order.
    pub fn extend(&mut self, keys: Vec<Vec<u8>>) {
        let end = self.keys.len();
        self.insert_all(end, keys);
    }

    /// Inserts `keys` before pivot `at`, in their order.
    pub fn insert_all(&mut self, at: usize, keys: Vec<Vec<u8>>) {
        self.heads.splice(at..at, keys.iter().map(|k| head(k)));
        self.keys.splice(at..at, keys);
    }

    /// Rewrites every pivot with `f`, which must keep their order (a
    /// shared prefix dropped).
    pub fn rewrite(&mut self, mut f: impl FnMut(&mut Vec<u8>)) {
        for (k, h) in self.keys.iter_mut().zip(&mut self.heads) {
            f(k);
            *h = head(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(p: &Pivots) -> Vec<Vec<u8>> {
        p.to_vec()
    }

    /// `count_le` agrees with a search of the keys themselves, for keys
    /// that tie in their first eight bytes, are prefixes of each other or
    /// end in zero bytes (which the heads' padding cannot tell apart).
    #[test]
    fn count_le_agrees_with_a_search_of_the_keys() {
        let mut all: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\0".to_vec(),
            b"a".to_vec(),
            b"a\0".to_vec(),
            b"a\0\0".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefghi".to_vec(),
            b"abcdefghij".to_vec(),
            b"abcdefgi".to_vec(),
            b"b".to_vec(),
            vec![0xff; 9],
        ];
        all.sort();
        // Every subset of the candidates as pivots (2^11 sets without the
        // empty key, which is never a pivot), every candidate searched.
        let candidates = &all[1..];
        for mask in 0u32..(1 << candidates.len()) {
            let chosen: Vec<Vec<u8>> = candidates
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, k)| k.clone())
                .collect();
            let p = Pivots::from(chosen.clone());
            for key in &all {
                let want = chosen.partition_point(|c| c.as_slice() <= key.as_slice());
                assert_eq!(p.count_le(key), want, "pivots {chosen:?}, key {key:?}");
            }
        }
    }

    /// Every change keeps the heads those of the keys.
    #[test]
    fn changes_keep_the_heads_in_step() {
        let check = |p: &Pivots| assert_eq!(p, &Pivots::from(keys(p)));
        let mut p = Pivots::from(vec![b"b".to_vec(), b"d".to_vec()]);
        p.push(b"f".to_vec());
        check(&p);
        p.insert(0, b"a".to_vec());
        check(&p);
        p.insert_all(2, vec![b"c".to_vec(), b"c2".to_vec()]);
        check(&p);
        p.extend(vec![b"g".to_vec()]);
        check(&p);
        assert_eq!(p.remove(1), b"b".to_vec());
        check(&p);
        let mut q = Pivots::from(vec![b"x".to_vec(), b"y".to_vec()]);
        p.append(&mut q);
        check(&p);
        assert!(q.is_empty());
        p.rewrite(|k| k.insert(0, b'p'));
        check(&p);
        assert_eq!(p.count_le(b"pc"), 2);
        assert_eq!(keys(&p)[0], b"pa".to_vec());
    }
}
