//! [`MemDevice`]: a device image held in memory.

use std::fmt;
use std::io;
use std::sync::{PoisonError, RwLock};

use crate::{check_range, Device};

/// An in-memory image for unit tests, and for restarting on an image that a
/// simulated crash produced. Every write is durable at once, so
/// [`Device::sync`] does nothing.
pub struct MemDevice {
    size_bytes: u64,
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled image of `size_bytes`.
    pub fn new(size_bytes: u64) -> Self {
        let len = usize::try_from(size_bytes).expect("device size must fit in memory");
        Self::from_bytes(vec![0; len])
    }

    /// An image with exactly these contents.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self {
            size_bytes: bytes.len() as u64,
            bytes: RwLock::new(bytes),
        }
    }

    /// A copy of the whole image, to save it or to compare it.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A panicking writer cannot leave the bytes in a state worse than a
        // torn write, which callers must handle anyway, so poison is ignored.
        self.bytes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Device for MemDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        let bytes = self.bytes.read().unwrap_or_else(PoisonError::into_inner);
        let start = offset as usize;
        buf.copy_from_slice(&bytes[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        let mut bytes = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        let start = offset as usize;
        bytes[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
}

impl fmt::Debug for MemDevice {
    // The image can be large, so only its size is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemDevice")
            .field("size_bytes", &self.size_bytes)
            .finish_non_exhaustive()
    }
}
