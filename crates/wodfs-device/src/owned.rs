//! Bytes read into a buffer the reader keeps ([`crate::Device::read_owned`]).

use crate::huge::HugeBuf;

/// Bytes read from a device into a buffer that now belongs to the reader.
///
/// For a whole node read ahead: its partitions are kept as slices of this
/// one buffer instead of being copied out of a buffer the device reuses
/// (that copy, into freshly allocated memory, was the largest single cost
/// of a cold sequential read on this 2-CPU machine). The bytes need not
/// start at the buffer's first byte: a direct read lands at an aligned
/// address and reads the whole units around them.
#[derive(Debug)]
pub struct OwnedRead {
    storage: Storage,
    start: usize,
    len: usize,
}

#[derive(Debug)]
enum Storage {
    Heap(Vec<u8>),
    /// A direct read's buffer, given back to the pool when dropped.
    Pooled(Option<HugeBuf>),
}

impl OwnedRead {
    /// All of `buf`.
    pub fn from_vec(buf: Vec<u8>) -> OwnedRead {
        let len = buf.len();
        OwnedRead {
            storage: Storage::Heap(buf),
            start: 0,
            len,
        }
    }

    /// `buf[start..start + len]` of a pooled direct-read buffer.
    pub(crate) fn pooled(buf: HugeBuf, start: usize, len: usize) -> OwnedRead {
        assert!(start + len <= buf.len(), "window past the buffer's end");
        OwnedRead {
            storage: Storage::Pooled(Some(buf)),
            start,
            len,
        }
    }

    /// The bytes read.
    pub fn bytes(&self) -> &[u8] {
        let all = match &self.storage {
            Storage::Heap(v) => v.as_slice(),
            Storage::Pooled(b) => b.as_ref().expect("kept until dropped").as_slice(),
        };
        &all[self.start..self.start + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for OwnedRead {
    fn drop(&mut self) {
        if let Storage::Pooled(b) = &mut self.storage {
            if let Some(b) = b.take() {
                crate::direct::give_back_large_buf(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_shows_only_its_bytes() {
        let mut buf = HugeBuf::new(5).unwrap();
        buf.as_mut_slice().copy_from_slice(&[1, 2, 3, 4, 5]);
        let r = OwnedRead::pooled(buf, 1, 3);
        assert_eq!(r.bytes(), &[2, 3, 4]);
        assert_eq!(r.len(), 3);
        let whole = OwnedRead::from_vec(vec![7, 8]);
        assert_eq!(whole.bytes(), &[7, 8]);
    }
}
