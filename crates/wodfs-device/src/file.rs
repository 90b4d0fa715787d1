//! [`FileDevice`]: an image file or a block device, reached with
//! positional I/O so threads never share a file cursor.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

use crate::{check_range, Device};

/// A device backed by a regular file or a block device, opened read-write.
///
/// [`Device::sync`] is `fdatasync`: it makes written data durable without
/// flushing metadata such as timestamps that the image does not need.
///
/// The open file holds an exclusive advisory lock (`flock`) for as long as
/// the device lives: two processes writing one image would destroy it (a
/// daemon still writing its last checkpoint after an unmount, a `mkfs` or a
/// second mount), so the second opener gets a clear error instead.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    size_bytes: u64,
}

impl FileDevice {
    /// Opens an existing image file or block device. The size comes from
    /// seeking to the end, because block devices report a zero length in
    /// their metadata.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        lock_exclusive(&file, path)?;
        let size_bytes = file.seek(SeekFrom::End(0))?;
        Ok(Self { file, size_bytes })
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
        Ok(Self { file, size_bytes })
    }
}

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

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.file.write_all_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
}
