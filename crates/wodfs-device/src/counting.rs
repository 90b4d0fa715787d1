//! [`CountingDevice`]: counts the requests and bytes that pass through, so
//! tests can assert I/O amounts instead of timings.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Device;

/// A snapshot of a [`CountingDevice`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct IoCounts {
    /// Read requests.
    pub reads: u64,
    /// Bytes asked for by read requests.
    pub read_bytes: u64,
    /// Of the read requests, those made with [`Device::read_random_at`].
    pub random_reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes passed to write requests.
    pub write_bytes: u64,
    /// Of those, the bytes of [`Device::write_stream_at`] requests.
    pub stream_write_bytes: u64,
    /// Sync requests.
    pub syncs: u64,
}

impl IoCounts {
    /// The requests made between `earlier` and this snapshot, so a test can
    /// measure one operation. Saturates at zero if the counters were reset
    /// in between.
    pub fn since(&self, earlier: &IoCounts) -> IoCounts {
        IoCounts {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            random_reads: self.random_reads.saturating_sub(earlier.random_reads),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            stream_write_bytes: self
                .stream_write_bytes
                .saturating_sub(earlier.stream_write_bytes),
            syncs: self.syncs.saturating_sub(earlier.syncs),
        }
    }
}

/// Wraps any device and counts every request passed on to it, whether or
/// not the inner device then fails it.
#[derive(Debug)]
pub struct CountingDevice<D: Device> {
    inner: D,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    random_reads: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    stream_write_bytes: AtomicU64,
    syncs: AtomicU64,
}

impl<D: Device> CountingDevice<D> {
    /// Starts counting requests to `inner` from zero.
    pub fn new(inner: D) -> Self {
        Self {
            inner,
            reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            random_reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            stream_write_bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// The counters now. Each field is read on its own, so a snapshot taken
    /// while other threads do I/O need not be consistent across fields.
    pub fn counts(&self) -> IoCounts {
        IoCounts {
            reads: self.reads.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            random_reads: self.random_reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            stream_write_bytes: self.stream_write_bytes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
        }
    }

    /// Sets every counter back to zero.
    pub fn reset(&self) {
        for counter in [
            &self.reads,
            &self.read_bytes,
            &self.random_reads,
            &self.writes,
            &self.write_bytes,
            &self.stream_write_bytes,
            &self.syncs,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The wrapped device, for example to crash a wrapped fault device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn count_read(&self, len: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    fn count_write(&self, len: usize) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Stops counting and gives the wrapped device back.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

impl<D: Device> Device for CountingDevice<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.count_read(buf.len());
        self.inner.read_at(offset, buf)
    }

    fn read_random_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.count_read(buf.len());
        self.random_reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_random_at(offset, buf)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.count_write(buf.len());
        self.inner.write_at(offset, buf)
    }

    fn sync(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.count_write(buf.len());
        self.inner.write_direct_at(offset, buf)
    }

    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.count_write(buf.len());
        self.stream_write_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.write_stream_at(offset, buf)
    }

    fn write_padded_at(
        &self,
        offset: u64,
        buf: &[u8],
        pad_to: u64,
        stream: bool,
    ) -> io::Result<()> {
        // The caller's bytes: the padding is the device's business.
        self.count_write(buf.len());
        if stream {
            self.stream_write_bytes
                .fetch_add(buf.len() as u64, Ordering::Relaxed);
        }
        self.inner.write_padded_at(offset, buf, pad_to, stream)
    }

    fn read_vectored_at(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        random: bool,
    ) -> io::Result<()> {
        self.count_read(bufs.iter().map(|b| b.len()).sum());
        if random {
            self.random_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read_vectored_at(offset, bufs, random)
    }

    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        // Counted as random: it reads no window past its bytes either.
        self.count_read(len);
        self.random_reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_with(offset, len, f)
    }

    fn read_owned(&self, offset: u64, len: usize) -> io::Result<crate::OwnedRead> {
        // Counted as `read_with` is: one random read.
        self.count_read(len);
        self.random_reads.fetch_add(1, Ordering::Relaxed);
        self.inner.read_owned(offset, len)
    }

    fn annotate(&self, phase: &'static str) {
        self.inner.annotate(phase);
    }
}
