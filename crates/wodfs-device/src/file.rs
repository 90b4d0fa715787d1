//! [`FileDevice`]: an image file or a block device, reached with
//! positional I/O so threads never share a file cursor.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::{check_range, direct, padded_end, residency, Device};

/// A device backed by a regular file or a block device, opened read-write.
///
/// [`Device::sync`] is `fdatasync`: it makes written data durable without
/// flushing metadata such as timestamps that the image does not need.
///
/// Reads and [`Device::write_at`] go through the page cache, except a
/// stream's large ones on a block device ([`FileDevice::direct_large_io`]):
/// writes are gathered and written back asynchronously, nodes read back
/// soon after are found there, and the kernel reads ahead. [`Device::write_direct_at`]
/// (the log) goes through a second descriptor opened with `O_DIRECT`
/// where the file supports it (see [`FileDevice::direct_io_unit`]), so a
/// small sync writes the 512-byte sectors it covers rather than whole
/// 4 KiB pages. The kernel keeps the two coherent: a direct write first
/// writes back and then drops cached pages of its range.
///
/// [`Device::read_random_at`] reads through a third descriptor advised
/// `POSIX_FADV_RANDOM`: still the page cache (the same pages as every
/// other read), but the kernel reads exactly the pages asked for instead
/// of guessing a stream from the pages around them. The kernel's
/// read-ahead state belongs to the descriptor, so random reads on their
/// own descriptor also leave the stream detection of sequential reads on
/// the first one undisturbed.
///
/// The open file holds an exclusive advisory lock (`flock`) for as long as
/// the device lives: two processes writing one image would destroy it (a
/// daemon still writing its last checkpoint after an unmount, a `mkfs` or a
/// second mount), so the second opener gets a clear error instead.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    size_bytes: u64,
    /// The `O_DIRECT` descriptor and its unit, where the file has one.
    direct: Option<(File, u64)>,
    /// A read-only descriptor without read-ahead (see the type's docs).
    random: File,
    /// Whether large I/O takes the direct descriptor too; see
    /// [`FileDevice::direct_large_io`].
    direct_large_io: bool,
}

impl FileDevice {
    /// Opens an existing image file or block device. The size comes from
    /// seeking to the end, because block devices report a zero length in
    /// their metadata.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_as(path.as_ref(), true)
    }

    /// Opens an existing image without direct I/O: every write goes
    /// through the page cache.
    pub fn open_buffered(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_as(path.as_ref(), false)
    }

    fn open_as(path: &Path, want_direct: bool) -> io::Result<Self> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        lock_exclusive(&file, path)?;
        let size_bytes = file.seek(SeekFrom::End(0))?;
        let mut device = Self {
            direct_large_io: is_block_device(&file)?,
            file,
            size_bytes,
            direct: None,
            random: open_random(path)?,
        };
        if want_direct {
            device.open_direct(path);
        }
        Ok(device)
    }

    /// Opens the `O_DIRECT` descriptor if the file supports direct I/O
    /// (an aligned read succeeds); otherwise direct writes stay buffered.
    /// The lock is the first descriptor's: this process holds it either
    /// way.
    fn open_direct(&mut self, path: &Path) {
        let Ok(file) = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        else {
            return;
        };
        if let Some(unit) = direct::probe_unit(&file, self.size_bytes) {
            self.direct = Some((file, unit));
        }
    }

    /// The direct-I/O unit (offsets and lengths that are multiples of it
    /// need no read-modify-write), or `None` when I/O goes through the
    /// page cache.
    pub fn direct_io_unit(&self) -> Option<u64> {
        self.direct.as_ref().map(|(_, unit)| *unit)
    }

    /// Whether large I/O goes past the page cache: nodes of a sequential
    /// stream ([`Device::write_stream_at`]) and stream reads of at least
    /// [`direct::DIRECT_IO_MIN`] bytes (whole nodes), and whole-leaf reads
    /// through [`Device::read_with`] (reads only where the page cache
    /// holds hardly any of their range). On a block device only, where it was
    /// measured (sessions 14-15, a 4 GiB file written and read cold
    /// through the file system on a loop device):
    /// - reads: 1025-1100 MiB/s direct against 750 buffered, a third less
    ///   daemon CPU (no copy out of the page cache, no kernel read-ahead);
    /// - writes: the daemon's CPU fell from 8-10 s to 5-5.3 s; the copy
    ///   into the page cache was a third of it.
    ///
    /// Other node writes stay buffered: the page cache holds them for a
    /// reload after the engine evicts them. With every node of 256 KiB or
    /// more written direct, Postmark read 3,632 MiB from the device
    /// instead of 55-59.
    ///
    /// On an image file inside another file system, direct reads ran
    /// slower: engine-compare's full scan (its store on ext4) fell from
    /// 6.3 M to 4.1-4.5 M records/s at the same CPU time, so the cost is
    /// in the lower file system's direct path, not ours; there large I/O
    /// stays buffered unless [`FileDevice::set_direct_large_io`] says
    /// otherwise.
    pub fn direct_large_io(&self) -> bool {
        self.direct_large_io && self.direct.is_some()
    }

    /// Sets whether large I/O goes past the page cache, overriding the
    /// choice made at open (it still needs the direct descriptor).
    pub fn set_direct_large_io(&mut self, on: bool) {
        self.direct_large_io = on;
    }

    /// Creates (or truncates) a sparse, zero-filled image file of
    /// `size_bytes`. A block device cannot be resized, so for one this
    /// opens it, checks it holds at least `size_bytes`, and keeps its
    /// whole capacity as the device size.
    pub fn create(path: impl AsRef<Path>, size_bytes: u64) -> io::Result<Self> {
        let path = path.as_ref();
        let is_block_device = match std::fs::metadata(path) {
            Ok(metadata) => metadata.file_type().is_block_device(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => return Err(error),
        };
        if is_block_device {
            let device = Self::open(path)?;
            if device.size_bytes < size_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "block device {} holds {} bytes, fewer than the {size_bytes} asked for",
                        path.display(),
                        device.size_bytes
                    ),
                ));
            }
            return Ok(device);
        }
        // Lock before truncating: an image in use must not be wiped.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        lock_exclusive(&file, path)?;
        file.set_len(0)?;
        file.set_len(size_bytes)?;
        let mut device = Self {
            file,
            size_bytes,
            direct: None,
            random: open_random(path)?,
            direct_large_io: false,
        };
        device.open_direct(path);
        Ok(device)
    }
}

impl FileDevice {
    /// Whether a stream's node write of `len` bytes goes direct
    /// ([`FileDevice::direct_large_io`]).
    fn streams_direct(&self, len: usize) -> bool {
        self.direct_large_io && len >= direct::DIRECT_IO_MIN
    }

    /// Writes `buf` at `offset` through the direct descriptor where there
    /// is one, the caller owning the bytes up to `owned_to`
    /// ([`direct::write_padded_at`]); through the page cache otherwise.
    fn write_direct_owned(&self, offset: u64, buf: &[u8], owned_to: u64) -> io::Result<()> {
        match &self.direct {
            // The read-modify-write of a partial last unit must not read
            // past the end of the file.
            Some((file, unit))
                if (offset + buf.len() as u64).div_ceil(*unit) * unit <= self.size_bytes =>
            {
                direct::write_padded_at(file, *unit, offset, buf, owned_to)
            }
            _ => self.file.write_all_at(buf, offset),
        }
    }

    /// The direct descriptor and its unit, if a large read of `len` bytes
    /// at `offset` goes past the page cache: large I/O goes direct here
    /// ([`FileDevice::direct_large_io`]), the units around the bytes lie
    /// inside the device, and the page cache holds hardly any of them (or
    /// the kernel cannot say). What the cache holds, a read through it
    /// takes without reading the device: a cold `tar` of the kernel tree
    /// read 535 MiB from the device with every whole-leaf read direct, as
    /// those leaves' basements had just been cached by small files' point
    /// reads, against 474 MiB with every read through the cache.
    fn reads_direct(&self, offset: u64, len: usize) -> Option<(&File, u64)> {
        let (file, unit) = self.direct.as_ref()?;
        let end = (offset + len as u64).div_ceil(*unit) * unit;
        if !self.direct_large_io
            || end > self.size_bytes
            || residency::hardly_cached(&self.file, offset, len as u64) == Some(false)
        {
            return None;
        }
        Some((file, *unit))
    }
}

/// Whether `file` is a block device rather than a regular file.
fn is_block_device(file: &File) -> io::Result<bool> {
    Ok(file.metadata()?.file_type().is_block_device())
}

/// Opens `path` read-only for random reads. The advice is only a hint: a
/// kernel or file that ignores it reads ahead as before, so a failure to
/// give it is not an error.
fn open_random(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).open(path)?;
    let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
    Ok(file)
}

/// `preadv` until every buffer is full, at most `IOV_MAX` buffers per
/// call; an end of file before that is `UnexpectedEof`, as
/// `read_exact_at` reports it.
fn read_exact_vectored_at(file: &File, bufs: &mut [&mut [u8]], mut offset: u64) -> io::Result<()> {
    /// Linux's `IOV_MAX`.
    const IOV_MAX: usize = 1024;
    let mut slices: Vec<std::io::IoSliceMut<'_>> = bufs
        .iter_mut()
        .filter(|b| !b.is_empty())
        .map(|b| std::io::IoSliceMut::new(b))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let batch = rest.len().min(IOV_MAX);
        let n = match rustix::io::preadv(file, &mut rest[..batch], offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ))
            }
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        offset += n as u64;
        std::io::IoSliceMut::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// Writes all of `bufs`, one after another, from `offset` (`pwritev`).
fn write_all_vectored_at(file: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    let mut slices: Vec<std::io::IoSlice<'_>> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| std::io::IoSlice::new(b))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = match rustix::io::pwritev(file, rest, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        offset += n as u64;
        std::io::IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// Zeros to pad a write with: at most a block's worth is ever needed.
static ZEROS: [u8; 4096] = [0; 4096];

/// Takes the image's exclusive lock, or explains who holds it.
fn lock_exclusive(file: &File, path: &Path) -> io::Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "{} is in use by another process (a mounted or still-unmounting wodfs, or a running mkfs/fsck)",
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

impl Device for FileDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.file.read_exact_at(buf, offset)
    }
    fn read_random_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.random.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.file.write_all_at(buf, offset)
    }

    fn write_stream_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.streams_direct(buf.len()) {
            return self.write_direct_at(offset, buf);
        }
        self.write_at(offset, buf)
    }

    /// Writes that end inside a page or sector are padded with zeros to
    /// its end, as far as the caller owns: through the page cache a
    /// write that covers the page's last bytes needs no read of the page
    /// first, and direct, one that ends on a sector needs no read of that
    /// sector. In a 4 GiB sequential write on a loop device, the direct
    /// writes' tail reads were about 1,050 device reads queued behind the
    /// writes (session 46).
    fn write_padded_at(
        &self,
        offset: u64,
        buf: &[u8],
        pad_to: u64,
        stream: bool,
    ) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        let owned_to = padded_end(offset, buf.len(), pad_to, self.size_bytes);
        if stream && self.streams_direct(buf.len()) {
            return self.write_direct_owned(offset, buf, owned_to);
        }
        // The page cache's pages are 4 KiB: pad only where that completes
        // the last page, else the padding saves no read.
        let pad = (owned_to - offset) as usize - buf.len();
        if pad == 0 || pad > ZEROS.len() || !owned_to.is_multiple_of(4096) {
            return self.file.write_all_at(buf, offset);
        }
        write_all_vectored_at(&self.file, &[buf, &ZEROS[..pad]], offset)
    }

    fn read_vectored_at(
        &self,
        offset: u64,
        bufs: &mut [&mut [u8]],
        random: bool,
    ) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        check_range(offset, total, self.size_bytes)?;
        if !random && total >= direct::DIRECT_IO_MIN {
            if let Some((file, unit)) = self.reads_direct(offset, total) {
                return direct::read_vectored_at(file, unit, offset, bufs);
            }
        }
        let file = if random { &self.random } else { &self.file };
        read_exact_vectored_at(file, bufs, offset)
    }

    fn read_with(&self, offset: u64, len: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<()> {
        check_range(offset, len, self.size_bytes)?;
        if let Some((file, unit)) = self.reads_direct(offset, len) {
            return direct::read_with(file, unit, offset, len, f);
        }
        let mut buf = vec![0u8; len];
        self.random.read_exact_at(&mut buf, offset)?;
        f(&buf);
        Ok(())
    }

    fn read_owned(&self, offset: u64, len: usize) -> io::Result<crate::OwnedRead> {
        check_range(offset, len, self.size_bytes)?;
        if let Some((file, unit)) = self.reads_direct(offset, len) {
            return direct::read_owned(file, unit, offset, len);
        }
        let mut buf = vec![0u8; len];
        self.random.read_exact_at(&mut buf, offset)?;
        Ok(crate::OwnedRead::from_vec(buf))
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn write_direct_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.write_direct_owned(offset, buf, offset + buf.len() as u64)
    }
}
