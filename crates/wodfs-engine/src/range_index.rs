//! The interval index of range deletes inside one buffer.
//!
//! Ranges are kept **disjoint**: when a newer range delete arrives, the
//! parts of older ones it overlaps are cut away, because everything older
//! than the new delete in that span is dead anyway. A key is then covered by
//! at most one range, found with one ordered-map lookup (the last range that
//! starts at or before the key) instead of a scan of a list.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::msg::Msn;

/// One range delete `[lo, hi)`; `lo` is the map key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RangeDel {
    pub hi: Vec<u8>,
    pub msn: Msn,
}

/// Disjoint half-open ranges, ordered by their start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RangeIndex {
    map: BTreeMap<Vec<u8>, RangeDel>,
}

impl RangeIndex {
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &RangeDel)> {
        self.map.iter()
    }

    /// The range covering `key`, if any.
    pub fn covering(&self, key: &[u8]) -> Option<(&[u8], &RangeDel)> {
        let (lo, r) = self
            .map
            .range::<[u8], _>((Unbounded, Included(key)))
            .next_back()?;
        (key < r.hi.as_slice()).then_some((lo.as_slice(), r))
    }

    /// Ranges that intersect `[lo, hi)` (`hi = None`: unbounded).
    pub fn overlapping<'a>(
        &'a self,
        lo: &'a [u8],
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a RangeDel)> + 'a {
        // The range starting before `lo` may reach into it.
        let before = self
            .map
            .range::<[u8], _>((Unbounded, Excluded(lo)))
            .next_back()
            .filter(move |(_, r)| r.hi.as_slice() > lo);
        let inside = self
            .map
            .range::<[u8], _>((Included(lo), Unbounded))
            .take_while(move |(l, _)| hi.is_none_or(|h| l.as_slice() < h));
        before.into_iter().chain(inside)
    }

    /// True if the union of the ranges covers all of `[lo, hi)`.
    pub fn covers(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        let Some(hi) = hi else { return false };
        let mut reached: &[u8] = lo;
        for (l, r) in self.overlapping(lo, Some(hi)) {
            if l.as_slice() > reached {
                return false;
            }
            if r.hi.as_slice() > reached {
                reached = r.hi.as_slice();
            }
            if reached >= hi {
                return true;
            }
        }
        reached >= hi
    }

    /// Adds `[lo, hi)`, newer than every range already here, cutting the
    /// older ranges it overlaps. Returns the bytes of range bounds removed
    /// minus those added, for accounting (negative: grew).
    pub fn insert(&mut self, lo: Vec<u8>, hi: Vec<u8>, msn: Msn) -> isize {
        debug_assert!(lo < hi);
        let mut delta: isize = 0;
        // A range that starts before `lo` and reaches into it is cut at `lo`;
        // if it also reaches past `hi`, its tail survives as a new range.
        let before = self
            .map
            .range::<[u8], _>((Unbounded, Excluded(lo.as_slice())))
            .next_back()
            .map(|(l, r)| (l.clone(), r.clone()));
        if let Some((blo, br)) = before {
            if br.hi > lo {
                if br.hi > hi {
                    delta -= entry_bytes(&hi, &br.hi) as isize;
                    self.map.insert(
                        hi.clone(),
                        RangeDel {
                            hi: br.hi.clone(),
                            msn: br.msn,
                        },
                    );
                }
                delta += br.hi.len() as isize - lo.len() as isize;
                self.map.insert(
                    blo,
                    RangeDel {
                        hi: lo.clone(),
                        msn: br.msn,
                    },
                );
            }
        }
        // Ranges starting inside [lo, hi) are removed; a tail past `hi` survives.
        let inside: Vec<Vec<u8>> = self
            .map
            .range::<[u8], _>((Included(lo.as_slice()), Excluded(hi.as_slice())))
            .map(|(l, _)| l.clone())
            .collect();
        for l in inside {
            let r = self.map.remove(&l).expect("key just listed");
            delta += entry_bytes(&l, &r.hi) as isize;
            if r.hi > hi {
                delta -= entry_bytes(&hi, &r.hi) as isize;
                self.map.insert(hi.clone(), r);
            }
        }
        delta -= entry_bytes(&lo, &hi) as isize;
        self.map.insert(lo, RangeDel { hi, msn });
        delta
    }

    pub fn into_iter_owned(self) -> impl Iterator<Item = (Vec<u8>, RangeDel)> {
        self.map.into_iter()
    }

    pub fn bytes(&self) -> usize {
        self.map.iter().map(|(l, r)| entry_bytes(l, &r.hi)).sum()
    }

    pub fn max_msn(&self) -> Msn {
        self.map.values().map(|r| r.msn).max().unwrap_or(0)
    }

    /// Rewrites every bound with `f` (used when a node's frame prefix changes).
    pub fn map_keys(&mut self, mut f: impl FnMut(&[u8]) -> Vec<u8>) {
        let old = std::mem::take(&mut self.map);
        for (l, r) in old {
            self.map.insert(
                f(&l),
                RangeDel {
                    hi: f(&r.hi),
                    msn: r.msn,
                },
            );
        }
    }
}

/// Accounting size of one range entry.
pub(crate) fn entry_bytes(lo: &[u8], hi: &[u8]) -> usize {
    lo.len() + hi.len() + 8 + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn newer_range_cuts_older_ones_and_keeps_them_disjoint() {
        let mut ix = RangeIndex::default();
        ix.insert(k("b"), k("m"), 1);
        ix.insert(k("d"), k("f"), 2);
        let got: Vec<_> = ix
            .iter()
            .map(|(l, r)| (l.clone(), r.hi.clone(), r.msn))
            .collect();
        assert_eq!(
            got,
            vec![
                (k("b"), k("d"), 1),
                (k("d"), k("f"), 2),
                (k("f"), k("m"), 1)
            ]
        );
        assert_eq!(ix.covering(b"e").unwrap().1.msn, 2);
        assert_eq!(ix.covering(b"g").unwrap().1.msn, 1);
        assert!(ix.covering(b"m").is_none());
        assert!(ix.covers(b"c", Some(b"k")));
        assert!(!ix.covers(b"a", Some(b"c")));
        ix.insert(k("a"), k("z"), 3);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.bytes(), entry_bytes(b"a", b"z"));
    }

    #[test]
    fn accounting_delta_matches_recount() {
        let mut ix = RangeIndex::default();
        let mut total: isize = 0;
        let ops = [
            ("c", "k", 1),
            ("a", "d", 2),
            ("j", "q", 3),
            ("e", "f", 4),
            ("b", "z", 5),
        ];
        for (lo, hi, msn) in ops {
            total -= ix.insert(k(lo), k(hi), msn);
            assert_eq!(total as usize, ix.bytes());
        }
    }
}
