//! Direct writes (`O_DIRECT`) for [`crate::FileDevice::write_direct_at`]:
//! the log's flushes bypass the kernel's page cache of the image.
//!
//! Why: through the page cache, a log flush of a few hundred bytes writes
//! whole 4 KiB pages, usually two of them, and the next flush rewrites the
//! last one. Direct, a flush writes the 512-byte sectors it covers: fs_mark
//! (a 4 KiB file and an fsync at a time) wrote 8.8 KiB per file through
//! the page cache and 5.0 KiB direct. Node writes stay buffered: made
//! direct as well, they turned write-back into synchronous 1 MiB writes
//! and lost the page cache's read-back of fresh nodes, and sequential
//! writes ran at half the speed (session 4 measurements).
//!
//! Direct I/O needs offsets, lengths and buffer addresses aligned to the
//! file's direct-I/O unit. The log writes whole sectors, so only its
//! buffer's address is unaligned, and it goes through a per-thread
//! bounce buffer. A write that does not cover whole units reads the
//! partial units at either end first (read-modify-write); that is not
//! atomic against another write to the same unit, which the log never
//! issues (its flushes are serialized).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, PoisonError};

use crate::huge::HugeBuf;

/// Memory alignment a direct write's buffer is checked for: a page,
/// which satisfies every direct-I/O memory alignment Linux asks for (the
/// bounce buffers, [`HugeBuf`], start on a huge page).
const MEM_ALIGN: usize = 4096;

/// Largest bounce buffer a thread keeps; longer unaligned requests go
/// through it in pieces.
const BOUNCE_BYTES: usize = 1 << 20;

thread_local! {
    static BOUNCE: RefCell<Option<HugeBuf>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's bounce buffer.
fn with_bounce<R>(f: impl FnOnce(&mut [u8]) -> io::Result<R>) -> io::Result<R> {
    BOUNCE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let buf = match &mut *slot {
            Some(buf) => buf,
            empty => empty.insert(HugeBuf::new(BOUNCE_BYTES)?),
        };
        f(buf.as_mut_slice())
    })
}

/// The aligned units around `len` bytes at `offset`: where they start,
/// and how many bytes they span.
fn unit_span(offset: u64, len: usize, unit: u64) -> (u64, usize) {
    let lo = offset / unit * unit;
    let hi = (offset + len as u64).div_ceil(unit) * unit;
    (lo, (hi - lo) as usize)
}

/// A stream's node writes and vectored stream reads of at least this many
/// bytes (a whole node) bypass the page cache where the device does large
/// I/O direct (`FileDevice::direct_large_io`); shorter ones are partitions
/// and small nodes, which the page cache may still hold from their write
/// and gathers into larger device writes.
pub(crate) const DIRECT_IO_MIN: usize = 256 << 10;

/// Buffers of whole-node direct reads and writes kept for reuse: as many
/// as such reads are in flight at once (the engine's read-ahead threads
/// and a scan), so that one takes a buffer already mapped, in huge pages,
/// instead of faulting in and clearing new memory.
const LARGE_POOL: usize = 4;

/// Size of a pooled buffer, unless one read or write needs more (a node
/// larger than the default): a default 4 MiB node and the aligned units
/// around it. Longer vectored reads go in pieces of this size.
const LARGE_BUF_BYTES: usize = (4 << 20) + (64 << 10);

/// The pooled buffers (see [`LARGE_POOL`]), in memory advised to be
/// backed by huge pages ([`HugeBuf`]): a buffer allocated afresh for every
/// read would be memory the kernel has to find and clear each time, and a
/// buffer of scattered pages cuts each read or write into requests of at
/// most 512 KiB.
static LARGE_BUFS: Mutex<Vec<HugeBuf>> = Mutex::new(Vec::new());

/// A pooled buffer of at least `len` bytes; a new one, at least
/// [`LARGE_BUF_BYTES`] long, when the pool has none. Every pooled buffer
/// is at least that long: buffers of odd sizes in the pool made every
/// other read map and clear a new one (session 39: tokubench's creates,
/// whose flushes read nodes ahead, ran 1.24× longer).
fn take_large_buf(len: usize) -> io::Result<HugeBuf> {
    take_pooled(|b| b.len() >= len).map_or_else(|| HugeBuf::new(len.max(LARGE_BUF_BYTES)), Ok)
}

/// A buffer from the pool that `fits`, if there is one.
fn take_pooled(fits: impl Fn(&HugeBuf) -> bool) -> Option<HugeBuf> {
    let mut pool = LARGE_BUFS.lock().unwrap_or_else(PoisonError::into_inner);
    let i = pool.iter().position(fits)?;
    Some(pool.swap_remove(i))
}

/// Returns a buffer (at least [`LARGE_BUF_BYTES`] long) to the pool, or
/// frees it if the pool is full.
pub(crate) fn give_back_large_buf(buf: HugeBuf) {
    let mut pool = LARGE_BUFS.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.len() < LARGE_POOL {
        pool.push(buf);
    }
}

/// Reads `len` bytes at `offset` of a file opened with `O_DIRECT` (the
/// aligned units around them) into a pooled bounce buffer and hands them
/// to `f`.
///
/// Why direct: a whole node read through the page cache (a sequential
/// scan's read-ahead) fills pages the kernel allocates for it, copies them
/// out and keeps them, though the engine caches what it keeps itself.
pub(crate) fn read_with(
    file: &File,
    unit: u64,
    offset: u64,
    len: usize,
    f: &mut dyn FnMut(&[u8]),
) -> io::Result<()> {
    let (lo, span) = unit_span(offset, len, unit);
    let mut bounce = take_large_buf(span)?;
    let window = &mut bounce.as_mut_slice()[..span];
    let result = file.read_exact_at(window, lo).map(|()| {
        let skip = (offset - lo) as usize;
        f(&window[skip..skip + len]);
    });
    give_back_large_buf(bounce);
    result
}

/// Reads `len` bytes at `offset` of a file opened with `O_DIRECT` (the
/// aligned units around them) into a buffer of their own, which the
/// caller keeps: [`read_with`] without the copy out of a pooled buffer.
pub(crate) fn read_owned(
    file: &File,
    unit: u64,
    offset: u64,
    len: usize,
) -> io::Result<crate::OwnedRead> {
    let (lo, span) = unit_span(offset, len, unit);
    // Kept by a cached node, a buffer may be at most an eighth longer than
    // the read: a half-full leaf in a default-sized buffer would hold
    // twice the memory the cache counts for it. A read much smaller than
    // a pooled buffer (a small leaf) is copied out of one instead.
    let fits = |size: usize| size >= span && size - span <= span / 8;
    let mut buf = match take_pooled(|b| fits(b.len())) {
        Some(buf) => buf,
        None if fits(span.max(LARGE_BUF_BYTES)) => HugeBuf::new(span.max(LARGE_BUF_BYTES))?,
        None => {
            let mut copy = Vec::with_capacity(len);
            read_with(file, unit, offset, len, &mut |bytes| {
                copy.extend_from_slice(bytes)
            })?;
            return Ok(crate::OwnedRead::from_vec(copy));
        }
    };
    if let Err(e) = file.read_exact_at(&mut buf.as_mut_slice()[..span], lo) {
        give_back_large_buf(buf);
        return Err(e);
    }
    Ok(crate::OwnedRead::pooled(buf, (offset - lo) as usize, len))
}

/// Reads consecutive bytes from `offset` into `bufs`, one after another,
/// through [`read_with`] in pieces of at most [`LARGE_BUF_BYTES`].
pub(crate) fn read_vectored_at(
    file: &File,
    unit: u64,
    offset: u64,
    bufs: &mut [&mut [u8]],
) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let step = LARGE_BUF_BYTES - 2 * unit as usize;
    let (mut piece, mut piece_at, mut done) = (0, 0, 0);
    while done < total {
        let n = (total - done).min(step);
        read_with(file, unit, offset + done as u64, n, &mut |mut src| {
            while !src.is_empty() {
                let dst = &mut bufs[piece][piece_at..];
                let k = dst.len().min(src.len());
                dst[..k].copy_from_slice(&src[..k]);
                src = &src[k..];
                piece_at += k;
                if piece_at == bufs[piece].len() {
                    piece += 1;
                    piece_at = 0;
                }
            }
        })?;
        done += n;
    }
    Ok(())
}

/// The direct-I/O unit of an image opened with `O_DIRECT`, found by
/// trying aligned reads at offset 0: 512 bytes, then 4096. `None` when
/// neither works (a file system without direct I/O answers `EINVAL`) or
/// the image is smaller than a page; the caller then falls back to the
/// page cache.
pub(crate) fn probe_unit(file: &File, size_bytes: u64) -> Option<u64> {
    if size_bytes < MEM_ALIGN as u64 {
        return None;
    }
    let mut buf = HugeBuf::new(MEM_ALIGN).ok()?;
    for unit in [512usize, 4096] {
        if file
            .read_exact_at(&mut buf.as_mut_slice()[..unit], 0)
            .is_ok()
        {
            return Some(unit as u64);
        }
    }
    None
}

fn is_aligned(offset: u64, len: usize, ptr: *const u8, unit: u64) -> bool {
    offset.is_multiple_of(unit)
        && (len as u64).is_multiple_of(unit)
        && (ptr as usize).is_multiple_of(MEM_ALIGN)
}

/// Writes `buf` at `offset` to a file opened with `O_DIRECT`, the caller
/// owning the bytes up to `owned_to` (at least the end of `buf`): a
/// partial last sector that ends there or before is padded with zeros,
/// any other partial sector at either end is read first.
pub(crate) fn write_padded_at(
    file: &File,
    unit: u64,
    offset: u64,
    buf: &[u8],
    owned_to: u64,
) -> io::Result<()> {
    if is_aligned(offset, buf.len(), buf.as_ptr(), unit) {
        return file.write_all_at(buf, offset);
    }
    if buf.len() > BOUNCE_BYTES {
        // A whole node (a stream's): one write from a pooled buffer in
        // huge pages, which the device takes as 1 MiB requests in
        // parallel, instead of 1 MiB pieces one after another, each cut
        // into 512 KiB requests (see `huge.rs`).
        let mut whole = take_large_buf(unit_span(offset, buf.len(), unit).1)?;
        let result = write_through(file, unit, offset, buf, owned_to, whole.as_mut_slice());
        give_back_large_buf(whole);
        return result;
    }
    with_bounce(|bounce| write_through(file, unit, offset, buf, owned_to, bounce))
}

/// [`write_padded_at`] through `bounce` (aligned), in pieces of its size.
fn write_through(
    file: &File,
    unit: u64,
    offset: u64,
    buf: &[u8],
    owned_to: u64,
    bounce: &mut [u8],
) -> io::Result<()> {
    let u = unit as usize;
    // Whole units of it: a piece that fills it then ends on a unit.
    let usable = bounce.len() / u * u;
    let mut done = 0;
    while done < buf.len() {
        let pos = offset + done as u64;
        let lo = pos / unit * unit;
        let skip = (pos - lo) as usize;
        let n = (buf.len() - done).min(usable - skip);
        let end = pos + n as u64;
        let hi = end.div_ceil(unit) * unit;
        let len = (hi - lo) as usize;
        let window = &mut bounce[..len];
        if skip > 0 {
            file.read_exact_at(&mut window[..u], lo)?;
        }
        // The last sector, unless it is the first one and was just read.
        if end < hi && hi <= owned_to {
            window[skip + n..].fill(0);
        } else if end < hi && !(skip > 0 && len == u) {
            file.read_exact_at(&mut window[len - u..], hi - unit)?;
        }
        window[skip..skip + n].copy_from_slice(&buf[done..done + n]);
        file.write_all_at(window, lo)?;
        done += n;
    }
    Ok(())
}
