//! Block devices for wodfs: the one I/O trait the engine reaches storage
//! through, and its implementations.
//!
//! * [`FileDevice`]: an image file or a block device, positional I/O
//!   (direct I/O for the log's writes where the file supports it),
//!   `fdatasync` for [`Device::sync`].
//! * [`MemDevice`]: an in-memory image, for unit tests and for images
//!   rebuilt after a simulated crash.
//! * [`FaultDevice`]: an in-memory image with a power-loss model (unsynced
//!   writes dropped, torn at sector granularity or reordered) and injected
//!   faults (EIO, ENOSPC, bit flips), deterministic from one seed.
//! * [`CountingDevice`]: a wrapper that counts requests and bytes, so tests
//!   can assert I/O counts instead of timings.
//!
//! The contract every implementation keeps: a `write_at` that returned `Ok`
//! is visible to later reads at once, but survives a power cut only after a
//! later `sync` returned `Ok`. Writes between two syncs may reach the media
//! in any order, and each may be torn at a [`SECTOR_BYTES`] boundary.

use std::io;
use std::sync::Arc;

mod counting;
mod direct;
mod fault;
mod file;
mod huge;
mod mem;
mod owned;
mod residency;

pub use counting::{CountingDevice, IoCounts};
pub use fault::{FaultConfig, FaultDevice, FaultKind, PowerCut};
pub use file::FileDevice;
pub use mem::MemDevice;
pub use owned::OwnedRead;

/// The unit in which a write can be torn by a power cut.
pub const SECTOR_BYTES: u64 = 512;

/// Positional, thread-safe block I/O.
///
/// Offsets and lengths are in bytes; callers keep requests inside
/// `0..size_bytes()`. Implementations return `io::ErrorKind::UnexpectedEof`
/// (or an `InvalidInput` error) for a request past the end instead of
/// panicking.
pub trait Device: Send + Sync + std::fmt::Debug {
    /// Reads exactly `buf.len()` bytes starting at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// [`Device::read_at`] for a read that continues no earlier one (a
    /// point query's partition somewhere in the image). A device that
    /// reads ahead into a cache ([`FileDevice`]: the page cache) reads
    /// exactly these bytes, not a read-ahead window around them: for
    /// random reads that window is device time and cache memory spent on
    /// bytes nobody asked for. Same contract as `read_at`.
    fn read_random_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_at(offset, buf)
    }

    /// Writes all of `buf` at `offset`. Visible to reads at once, durable
    /// only after the next successful [`Device::sync`].
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;

    /// Makes every write that returned before this call durable.
    fn sync(&self) -> io::Result<()>;

    /// The device's capacity in bytes.
    fn size_bytes(&self) -> u64;

    /// [`Device::write_at`] for a caller that syncs right after and does
    /// not read the bytes back soon (the log). A device with a cache it
    /// can bypass does ([`FileDevice`]: direct I/O), so the write costs the
    /// sectors it covers instead of whole cached pages; writes of whole
    /// 512-byte sectors need no read-modify-write. Same contract as
    /// `write_at`.
    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)
    }

    /// [`Device::write_at`] of a node a sequential stream filled: it is
    /// read back, if at all, by a stream, whose reads a device may take
    /// past its cache ([`Device::read_with`]), so caching it buys nothing.
    /// [`FileDevice`] writes it direct where it does large I/O direct (on a
    /// block device); other nodes stay in the page cache, which holds them
    /// for a reload after the engine evicts them. Same contract as
    /// `write_at`.
    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)
    }

    /// [`Device::write_at`], or [`Device::write_stream_at`] if `stream`,
    /// of bytes that start a region the caller owns up to the next
    /// multiple of `pad_to` (a power of two, at least [`SECTOR_BYTES`])
    /// past their end: the device may write zeros there, and what those
    /// bytes hold afterwards is unspecified. A write that ends inside a
    /// sector or a cached page otherwise reads that sector or page first
    /// to keep its other bytes: a device read in the middle of a
    /// write-back, queued behind the writes before it. This default writes
    /// the whole padding, so that a caller padding over bytes it does not
    /// own breaks the images of tests; [`FileDevice`] pads where that
    /// spares a read. Same contract as `write_at` otherwise.
    fn write_padded_at(
        &self,
        offset: u64,
        buf: &[u8],
        pad_to: u64,
        stream: bool,
    ) -> io::Result<()> {
        let padded = padded_end(offset, buf.len(), pad_to, self.size_bytes());
        let mut whole = Vec::with_capacity((padded - offset) as usize);
        whole.extend_from_slice(buf);
        whole.resize((padded - offset) as usize, 0);
        if stream {
            self.write_stream_at(offset, &whole)
        } else {
            self.write_at(offset, &whole)
        }
    }

    /// Reads consecutive bytes from `offset` into several buffers, one
    /// after another, as one read (a random one if `random`, see
    /// [`Device::read_random_at`]): a node's partitions each land in a
    /// buffer of their own instead of being copied out of one. This
    /// default reads into one buffer and copies; [`FileDevice`] reads
    /// straight into the pieces (`preadv`). Same contract as `read_at`.
    fn read_vectored_at(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        random: bool,
    ) -> io::Result<()> {
        let total = bufs.iter().map(|b| b.len()).sum();
        let mut all = vec![0u8; total];
        if random {
            self.read_random_at(offset, &mut all)?;
        } else {
            self.read_at(offset, &mut all)?;
        }
        let mut at = 0;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&all[at..at + b.len()]);
            at += b.len();
        }
        Ok(())
    }

    /// Reads `len` bytes at `offset` and hands them to `f` in a buffer the
    /// device owns and reuses: for a large read whose caller copies out
    /// what it keeps (a whole node read ahead, decoded into partitions).
    /// Like [`Device::read_random_at`], it reads exactly these bytes, no
    /// read-ahead window past them. [`FileDevice`] reads them past the page
    /// cache (direct I/O) where it can, into a pooled buffer; this default
    /// reads into a fresh buffer. Same contract as `read_at`.
    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        let mut buf = vec![0u8; len];
        self.read_random_at(offset, &mut buf)?;
        f(&buf);
        Ok(())
    }

    /// Reads `len` bytes at `offset` into a buffer the caller keeps: for a
    /// large read whose caller keeps the bytes (a whole node read ahead,
    /// whose partitions stay slices of it) rather than copying out what it
    /// keeps, as from [`Device::read_with`]. Reads exactly these bytes,
    /// like `read_with`. [`FileDevice`] reads them past the page cache
    /// (direct I/O) where `read_with` would, straight into the returned
    /// buffer; this default copies out of `read_with`. Same contract as
    /// `read_at`.
    fn read_owned(&self, offset: u64, len: usize) -> io::Result<OwnedRead> {
        let mut buf = Vec::with_capacity(len);
        self.read_with(offset, len, &mut |bytes| buf.extend_from_slice(bytes))?;
        Ok(OwnedRead::from_vec(buf))
    }

    /// Names the phase of work the caller is in (for example
    /// `"checkpoint.superblock"`). Real devices ignore it; the fault device
    /// records the phase that was current when a simulated power cut landed,
    /// so crash tests can assert they covered every phase.
    fn annotate(&self, _phase: &'static str) {}
}

impl<D: Device + ?Sized> Device for Arc<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn read_random_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_random_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, buf)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_direct_at(offset, buf)
    }
    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_stream_at(offset, buf)
    }
    fn write_padded_at(
        &self,
        offset: u64,
        buf: &[u8],
        pad_to: u64,
        stream: bool,
    ) -> io::Result<()> {
        (**self).write_padded_at(offset, buf, pad_to, stream)
    }
    fn read_vectored_at(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        random: bool,
    ) -> io::Result<()> {
        (**self).read_vectored_at(offset, bufs, random)
    }
    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        (**self).read_with(offset, len, f)
    }
    fn read_owned(&self, offset: u64, len: usize) -> io::Result<OwnedRead> {
        (**self).read_owned(offset, len)
    }
    fn annotate(&self, phase: &'static str) {
        (**self).annotate(phase)
    }
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn read_random_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_random_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, buf)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_direct_at(offset, buf)
    }
    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_stream_at(offset, buf)
    }
    fn write_padded_at(
        &self,
        offset: u64,
        buf: &[u8],
        pad_to: u64,
        stream: bool,
    ) -> io::Result<()> {
        (**self).write_padded_at(offset, buf, pad_to, stream)
    }
    fn read_vectored_at(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        random: bool,
    ) -> io::Result<()> {
        (**self).read_vectored_at(offset, bufs, random)
    }
    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        (**self).read_with(offset, len, f)
    }
    fn read_owned(&self, offset: u64, len: usize) -> io::Result<OwnedRead> {
        (**self).read_owned(offset, len)
    }
    fn annotate(&self, phase: &'static str) {
        (**self).annotate(phase)
    }
}

/// Where a [`Device::write_padded_at`] of `len` bytes at `offset` may
/// write to on a device of `size` bytes: the next multiple of `pad_to`
/// past the bytes, but not past the device's end.
pub(crate) fn padded_end(offset: u64, len: usize, pad_to: u64, size: u64) -> u64 {
    let end = offset + len as u64;
    end.next_multiple_of(pad_to).min(size).max(end)
}

/// Checks that `[offset, offset + len)` lies inside a device of `size` bytes.
pub fn check_range(offset: u64, len: usize, size: u64) -> io::Result<()> {
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("I/O at {offset}+{len} is past the end of a {size}-byte device"),
        )),
    }
}
