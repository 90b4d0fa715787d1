//! Byte-string comparison for the write path's searches.
//!
//! `<[u8] as Ord>::cmp` calls glibc's `memcmp` for every comparison. The
//! searches of the write path (a buffer's B-tree, a node's pivots) compare
//! short keys a dozen times or more per message: `memcmp` was a fifth of
//! the random-insert profile (engine-compare). [`key_cmp`] orders exactly
//! as `<[u8] as Ord>::cmp` does, eight bytes at a time, inline.
//!
//! In a map with many keys the cost is mostly the cache miss of reaching
//! each compared key's bytes on the heap. [`MapKey`] keeps its first eight
//! bytes beside the pointer, in the map's node, so most comparisons of
//! keys that differ early never leave it.

use std::cmp::Ordering;

/// Lexicographic order of byte strings (a proper prefix sorts first), the
/// same as `a.cmp(b)`.
#[inline]
pub(crate) fn key_cmp(a: &[u8], b: &[u8]) -> Ordering {
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let x = u64::from_be_bytes(x.try_into().expect("eight bytes"));
        let y = u64::from_be_bytes(y.try_into().expect("eight bytes"));
        if x != y {
            return x.cmp(&y);
        }
    }
    // Whole words agree up to the shorter string's last one; what is left
    // of each is less than eight bytes past that point.
    let done = a.len().min(b.len()) / 8 * 8;
    for (x, y) in a[done..].iter().zip(&b[done..]) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

/// A key for the write path's ordered maps (a message buffer's): its
/// bytes, and their first eight, zero-padded, as a big-endian number. Two
/// keys whose heads differ are ordered by them (zero padding keeps the
/// order: `a < b` implies `head(a) <= head(b)`); only equal heads compare
/// the bytes. Ordered exactly as its bytes, so lookups by `&[u8]` find it
/// through `Borrow`.
#[derive(Clone, Debug)]
pub(crate) struct MapKey {
    head: u64,
    bytes: Vec<u8>,
}

impl MapKey {
    pub fn new(bytes: Vec<u8>) -> Self {
        MapKey {
            head: head(&bytes),
            bytes,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.bytes
    }

    /// Without its first `n` bytes, shortened in place (no allocation).
    pub fn strip_prefix(mut self, n: usize) -> Self {
        self.bytes.drain(..n);
        self.head = head(&self.bytes);
        self
    }
}

/// The first eight bytes of a key, zero-padded, as a big-endian number:
/// keys with unequal heads are ordered by them (`a < b` implies
/// `head(a) <= head(b)`).
pub(crate) fn head(bytes: &[u8]) -> u64 {
    let mut h = [0u8; 8];
    let n = bytes.len().min(8);
    h[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(h)
}

/// The order of two keys given with their [`head`]s: by the heads, and
/// only when those are equal by the bytes (most comparisons of keys that
/// differ early never reach the bytes on the heap).
#[inline]
pub(crate) fn headed_cmp(a_head: u64, a: &[u8], b_head: u64, b: &[u8]) -> Ordering {
    match a_head.cmp(&b_head) {
        Ordering::Equal => key_cmp(a, b),
        unequal => unequal,
    }
}

/// Which of two sorted runs' next keys comes first when merging them:
/// `Less` for `a`'s, `Greater` for `b`'s, `Equal` for the same key; a run
/// with none left (`None`) comes last. `None` when both are done.
#[inline]
pub(crate) fn merge_order(a: Option<&[u8]>, b: Option<&[u8]>) -> Option<Ordering> {
    match (a, b) {
        (None, None) => None,
        (Some(a), Some(b)) => Some(key_cmp(a, b)),
        (Some(_), None) => Some(Ordering::Less),
        (None, Some(_)) => Some(Ordering::Greater),
    }
}

impl Ord for MapKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        headed_cmp(self.head, &self.bytes, other.head, &other.bytes)
    }
}

impl PartialOrd for MapKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for MapKey {
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.bytes == other.bytes
    }
}

impl Eq for MapKey {}

impl std::borrow::Borrow<[u8]> for MapKey {
    fn borrow(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::{key_cmp, MapKey};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn orders_as_slices_do(
            a in proptest::collection::vec(0u8..4, 0..40),
            b in proptest::collection::vec(0u8..4, 0..40),
        ) {
            prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
            let mut c = a.clone();
            c.extend_from_slice(&b);
            prop_assert_eq!(key_cmp(&a, &c), a.cmp(&c));
            prop_assert_eq!(key_cmp(&c, &a), c.cmp(&a));
            let (ka, kb, kc) = (MapKey::new(a.clone()), MapKey::new(b.clone()), MapKey::new(c.clone()));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka.cmp(&kc), a.cmp(&c));
            prop_assert_eq!(kc.cmp(&ka), c.cmp(&a));
            prop_assert_eq!(ka == kb, a == b);
            let n = a.len().min(3);
            prop_assert_eq!(ka.clone().strip_prefix(n).cmp(&MapKey::new(b.clone())), a[n..].cmp(&b));
        }
    }

    #[test]
    fn edges() {
        let cases: [(&[u8], &[u8]); 7] = [
            (b"a", b"a\0"),
            (b"", b""),
            (b"", b"a"),
            (b"abcdefgh", b"abcdefgh"),
            (b"abcdefgh", b"abcdefghi"),
            (b"abcdefgz", b"abcdefgha"),
            (
                &[0xff; 9],
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01],
            ),
        ];
        for (a, b) in cases {
            assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
            assert_eq!(key_cmp(b, a), b.cmp(a), "{b:?} {a:?}");
            let (ka, kb) = (MapKey::new(a.to_vec()), MapKey::new(b.to_vec()));
            assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} {b:?}");
        }
    }
}
