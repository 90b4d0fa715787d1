//! Key frames (lifting): bounds of a node and the prefix they share.

/// Absolute bounds of a node: `[lo, hi)`, `hi = None` for +∞.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub lo: Vec<u8>,
    pub hi: Option<Vec<u8>>,
}

impl Bounds {
    pub fn all() -> Self {
        Bounds {
            lo: Vec::new(),
            hi: None,
        }
    }

    /// The prefix every key in the bounds shares: the common prefix of the
    /// two bounds (nothing if unbounded above).
    pub fn frame(&self) -> Vec<u8> {
        match &self.hi {
            Some(h) => self.lo[..lcp(&self.lo, h)].to_vec(),
            None => Vec::new(),
        }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        k >= self.lo.as_slice() && self.hi.as_ref().is_none_or(|h| k < h.as_slice())
    }
}

/// Length of the common prefix.
pub(crate) fn lcp(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub(crate) fn concat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// Re-expresses key `k`, relative to frame `old`, relative to frame `new`.
/// The caller guarantees `old + k` starts with `new`.
pub(crate) fn rebase(k: &[u8], old: &[u8], new: &[u8]) -> Vec<u8> {
    if new.len() >= old.len() {
        let strip = new.len() - old.len();
        debug_assert_eq!(&k[..strip], &new[old.len()..]);
        k[strip..].to_vec()
    } else {
        concat(&old[new.len()..], k)
    }
}

/// The shortest key `s` with `left < s <= right` (a short pivot keeps lifts
/// long and nodes small).
pub(crate) fn separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    debug_assert!(left < right);
    let n = lcp(left, right);
    right[..(n + 1).min(right.len())].to_vec()
}

/// The smallest key greater than every key with prefix `p`, if one exists.
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_separators() {
        let b = Bounds {
            lo: b"/a/b/c".to_vec(),
            hi: Some(b"/a/b/x".to_vec()),
        };
        assert_eq!(b.frame(), b"/a/b/".to_vec());
        assert_eq!(separator(b"/a/b/cat", b"/a/b/dog"), b"/a/b/d".to_vec());
        assert_eq!(separator(b"ab", b"abc"), b"abc".to_vec());
        assert_eq!(rebase(b"cat", b"/a/b/", b"/a/"), b"b/cat".to_vec());
        assert_eq!(rebase(b"b/cat", b"/a/", b"/a/b/"), b"cat".to_vec());
        assert_eq!(prefix_successor(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff"), None);
    }
}
