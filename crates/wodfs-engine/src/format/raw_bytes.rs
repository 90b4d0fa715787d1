//! The bytes a frozen basement is searched in: its own, or a slice of the
//! buffer its whole node was read into.

use std::ops::Deref;
use std::sync::Arc;

use wodfs_device::OwnedRead;

/// A frozen basement's encoded bytes.
///
/// A leaf read whole for a reader (a scan, a file's read-ahead) keeps its
/// uncompressed basements as slices of the one buffer the device read the
/// node into ([`RawBytes::Shared`]): copying each out of it was a sixth of
/// all CPU time of a cold 4 GiB sequential read. The buffer lives as long
/// as any slice of it, so a slice must not outlive its node's other
/// basements for long: the writer turns them into bytes of their own
/// ([`RawBytes::unshare`]) before it changes the node, so that a basement
/// it replaces does not stay in memory, uncounted, behind its siblings.
#[derive(Clone, Debug)]
pub(crate) enum RawBytes {
    Own(Box<[u8]>),
    Shared {
        read: Arc<OwnedRead>,
        start: usize,
        len: usize,
    },
}

impl RawBytes {
    /// `read.bytes()[start..start + len]`, sharing `read`.
    pub fn shared(read: &Arc<OwnedRead>, start: usize, len: usize) -> RawBytes {
        assert!(start + len <= read.len(), "slice past the read's end");
        RawBytes::Shared {
            read: Arc::clone(read),
            start,
            len,
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, RawBytes::Shared { .. })
    }

    /// Gives a shared slice bytes of its own (one copy).
    pub fn unshare(&mut self) {
        if self.is_shared() {
            let own: Box<[u8]> = Box::from(&**self);
            *self = RawBytes::Own(own);
        }
    }
}

impl Deref for RawBytes {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            RawBytes::Own(b) => b,
            RawBytes::Shared { read, start, len } => &read.bytes()[*start..*start + *len],
        }
    }
}

impl From<Vec<u8>> for RawBytes {
    fn from(v: Vec<u8>) -> RawBytes {
        RawBytes::Own(v.into_boxed_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_slice_reads_its_bytes_and_unshares_into_a_copy() {
        let read = Arc::new(OwnedRead::from_vec(vec![1, 2, 3, 4, 5, 6]));
        let mut a = RawBytes::shared(&read, 1, 3);
        let b = RawBytes::shared(&read, 4, 2);
        assert_eq!(&*a, &[2, 3, 4]);
        assert_eq!(&*b, &[5, 6]);
        assert!(a.is_shared());
        assert_eq!(Arc::strong_count(&read), 3);
        a.unshare();
        assert!(!a.is_shared());
        assert_eq!(&*a, &[2, 3, 4]);
        assert_eq!(Arc::strong_count(&read), 2, "the copy let go of the read");
        drop(b);
        assert_eq!(Arc::strong_count(&read), 1);
        assert_eq!(&*RawBytes::from(vec![9u8]), &[9]);
    }
}
