//! File contents: read, write, truncate, fallocate, lseek, copy.
//!
//! Block `b` of a file holds bytes `[4096 b, 4096 (b + 1))`; an absent
//! block is a hole and a short block reads as zero-padded. Writes never
//! read a block: a partial-block write is a blind patch, a whole aligned
//! block an insert, and a write covering two or more whole blocks sends one
//! range delete for them first, so the tree prunes old leaves instead of
//! reading them. Reads clip at the file size.

use wodfs_engine::Op;

use crate::attr::{Attr, Kind, Timespec};
use crate::error::{err, FsError, FsResult};
use crate::fs::{update_attr, Fs, Guard};
use crate::loc::Loc;
use crate::privs::KillPriv;

/// Block size of file data.
pub const BLOCK: u64 = 4096;

/// Reads of at most this many blocks are point queries, longer ones a
/// range scan (which reads whole leaves: right for streams, ruinous for a
/// 10 KiB read of a cold file).
const POINT_READ_BLOCKS: u64 = 4;

/// How far past a sequential read the engine reads ahead: four leaves of
/// the default 4 MiB, so that the device has several to read (it reads
/// faster with more requests in flight) while the reader works through
/// the one just read.
const READ_AHEAD_BLOCKS: u64 = (16 << 20) / BLOCK;

/// What a file's entry in a batch of several files' bytes costs besides
/// its bytes ([`Fs::write_held_together`]): block keys and the attribute
/// record's patches.
const HELD_OVERHEAD_BYTES: usize = 256;

/// Largest file size (signed 64-bit `off_t`).
pub const FILE_BYTES_MAX: u64 = i64::MAX as u64;

/// The end of `len` bytes at `offset`, if a file can hold them (`EFBIG`
/// otherwise).
pub fn file_end(offset: u64, len: u64) -> Option<u64> {
    offset.checked_add(len).filter(|&end| end <= FILE_BYTES_MAX)
}

/// Bytes to write into a file, as [`Fs::write_then_set`] takes them (and
/// [`Fs::rename_carrying`], for bytes a caller held back from the file it
/// renames): `data` at `offset`, clearing privileges as `kill_priv` says,
/// after which the file's attributes are `attr` if given. With no bytes,
/// `attr` alone is written: setattrs a caller answered before the writes
/// it expected came.
#[derive(Debug, Clone, Copy)]
pub struct HeldBytes<'a> {
    /// Where the bytes go in the file.
    pub offset: u64,
    /// The bytes.
    pub data: &'a [u8],
    /// Whether writing them clears set-user-ID and set-group-ID.
    pub kill_priv: KillPriv,
    /// The file's attributes after the bytes, if the caller answered
    /// setattrs from them.
    pub attr: Option<&'a Attr>,
}

impl<'a> HeldBytes<'a> {
    /// `data` at `offset`, with no attributes given.
    pub fn new(offset: u64, data: &'a [u8], kill_priv: KillPriv) -> HeldBytes<'a> {
        HeldBytes {
            offset,
            data,
            kill_priv,
            attr: None,
        }
    }

    /// Where the bytes end, if a file can hold them.
    pub fn end(&self) -> Option<u64> {
        file_end(self.offset, self.data.len() as u64)
    }
}

/// What a call that writes held bytes along with a change of names
/// ([`Fs::rename_carrying`], [`Fs::make_carrying`]) did: the write and the
/// change succeed or fail apart, as they would one after the other.
#[derive(Debug)]
pub struct Carried<T> {
    /// Whether the held bytes were written.
    pub written: FsResult<()>,
    /// The change's own outcome.
    pub done: FsResult<T>,
}

/// `fallocate` mode bits understood here.
pub mod falloc {
    /// Do not change the file size.
    pub const KEEP_SIZE: i32 = 0x01;
    /// Deallocate the range (needs `KEEP_SIZE`).
    pub const PUNCH_HOLE: i32 = 0x02;
    /// Zero the range.
    pub const ZERO_RANGE: i32 = 0x10;
}

/// `lseek` whence values this file system answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// `SEEK_DATA`: next offset holding data.
    Data,
    /// `SEEK_HOLE`: next offset in a hole (the size counts as one).
    Hole,
}

fn file_attr(fs: &Fs, loc: &Loc) -> FsResult<Attr> {
    let attr = fs.getattr(loc)?;
    match attr.kind {
        Kind::File => Ok(attr),
        Kind::Dir => err(libc::EISDIR),
        _ => err(libc::EINVAL),
    }
}

/// Ops that write `data` at `offset` of the file at `loc`, whose size is
/// `size`. Whole blocks that may hold old data are cleared with one range
/// delete first (so the tree prunes old leaves instead of reading them);
/// blocks past the old end cannot, so appends send none.
pub(crate) fn write_ops(loc: &Loc, offset: u64, data: &[u8], size: u64, ops: &mut Vec<Op>) {
    let end = offset + data.len() as u64;
    let first_full = offset.div_ceil(BLOCK);
    let end_full = (end / BLOCK).min(size.div_ceil(BLOCK));
    if end_full >= first_full + 2 {
        ops.push(Op::DeleteRange {
            lo: loc.data_key(first_full),
            hi: loc.data_key(end_full),
        });
    }
    let mut pos = offset;
    while pos < end {
        let block = pos / BLOCK;
        let in_block = (pos % BLOCK) as usize;
        let n = ((BLOCK as usize) - in_block).min((end - pos) as usize);
        let bytes = &data[(pos - offset) as usize..(pos - offset) as usize + n];
        if n == BLOCK as usize {
            ops.push(Op::Insert {
                key: loc.data_key(block),
                value: bytes.to_vec(),
            });
        } else {
            ops.push(Op::Patch {
                key: loc.data_key(block),
                offset: in_block as u32,
                data: bytes.to_vec(),
            });
        }
        pos += n as u64;
    }
}

/// Ops that zero `[start, end)` of the file at `loc`: a range delete of
/// the whole blocks and zero patches of the partial ones.
fn zero_ops(loc: &Loc, start: u64, end: u64, ops: &mut Vec<Op>) {
    if start >= end {
        return;
    }
    let first_full = start.div_ceil(BLOCK);
    let end_full = end / BLOCK;
    if end_full > first_full {
        ops.push(Op::DeleteRange {
            lo: loc.data_key(first_full),
            hi: loc.data_key(end_full),
        });
        if start < first_full * BLOCK {
            patch_zero(loc, start, first_full * BLOCK, ops);
        }
        if end > end_full * BLOCK {
            patch_zero(loc, end_full * BLOCK, end, ops);
        }
    } else {
        patch_zero(loc, start, end, ops);
    }
}

fn patch_zero(loc: &Loc, start: u64, end: u64, ops: &mut Vec<Op>) {
    let mut pos = start;
    while pos < end {
        let block = pos / BLOCK;
        let n = (BLOCK - pos % BLOCK).min(end - pos);
        ops.push(Op::Patch {
            key: loc.data_key(block),
            offset: (pos % BLOCK) as u32,
            data: vec![0; n as usize],
        });
        pos += n;
    }
}

/// Ops that change the size of the file at `loc` from `old` to `new`:
/// shrinking deletes the blocks past the end with one range delete and
/// cuts the boundary block; growing needs nothing (see the module
/// invariant in `fs.rs`).
pub(crate) fn resize_ops(loc: &Loc, old: u64, new: u64, ops: &mut Vec<Op>) {
    if new >= old {
        return;
    }
    let keep = new.div_ceil(BLOCK);
    ops.push(Op::DeleteRange {
        lo: loc.data_key(keep),
        hi: loc.blocks().end,
    });
    let tail = new % BLOCK;
    if tail != 0 {
        ops.push(Op::Truncate {
            key: loc.data_key(new / BLOCK),
            len: tail as u32,
        });
    }
}

impl Fs {
    /// Reads up to `len` bytes at `offset` (short at the end of file).
    pub fn read(&self, loc: &Loc, offset: u64, len: usize) -> FsResult<Vec<u8>> {
        let mut out = Vec::new();
        self.read_into(loc, offset, len, &mut out)?;
        Ok(out)
    }

    /// [`Fs::read`] into `out` (cleared first), for a caller that reuses
    /// one buffer for every read: a fresh 1 MiB buffer per request is
    /// memory the kernel must fault in and zero each time, and that the
    /// FUSE reply's copy then reads from cold.
    pub fn read_into(&self, loc: &Loc, offset: u64, len: usize, out: &mut Vec<u8>) -> FsResult<()> {
        out.clear();
        let attr = file_attr(self, loc)?;
        if offset >= attr.size || len == 0 {
            return Ok(());
        }
        let end = attr.size.min(offset.saturating_add(len as u64));
        // Filled in block order; holes and short blocks read as zeros.
        out.reserve((end - offset) as usize);
        let first = offset / BLOCK;
        let last = (end - 1) / BLOCK;
        if last - first < POINT_READ_BLOCKS {
            // A few blocks: point queries read one partition per level
            // each. A range scan would read and decode the whole leaf
            // (megabytes) for them, which random small reads (small files
            // in Postmark or TableFS, databases) pay on every cold access.
            for block in first..=last {
                if let Some(value) = self.tree.get(&loc.data_key(block))? {
                    append_block(out, offset, end, block, &value);
                }
            }
            out.resize((end - offset) as usize, 0);
            return self.read_done(loc, &attr);
        }
        let lo = loc.data_key(first);
        let hi = loc.data_key(last + 1);
        let hi = if last + 1 == 0 { loc.blocks().end } else { hi };
        // A sequential reader will want the blocks after these next: have
        // the engine read their leaves while this reply is built and sent.
        let sequential = self.read_streams.follows(&lo, &hi) || first == 0;
        let file_blocks = attr.size.div_ceil(BLOCK);
        if sequential && last + 1 < file_blocks {
            let ahead_end = file_blocks.min(last + 1 + READ_AHEAD_BLOCKS);
            self.tree.read_ahead(&hi, &loc.data_key(ahead_end));
        }
        // Blocks are copied straight from the cached leaves into the reply.
        self.tree.visit_range(&lo, Some(&hi), |key, value| {
            append_block(out, offset, end, Loc::block_of(key), value);
            true
        })?;
        out.resize((end - offset) as usize, 0);
        self.read_done(loc, &attr)
    }

    fn read_done(&self, loc: &Loc, attr: &Attr) -> FsResult<()> {
        if self.opts.relatime && (self.opts.strictatime || needs_atime(attr)) {
            self.touch_atime(loc)?;
        }
        Ok(())
    }

    /// Notes the new atime (`lazy_atime`); the notes are written together
    /// when due.
    fn touch_atime(&self, loc: &Loc) -> FsResult<()> {
        let g = self.lock();
        // With a note held, `old` shows its atime, and the note keeps the
        // stored record it was taken against.
        let old = self.getattr(loc)?;
        if (self.opts.strictatime || needs_atime(&old))
            && self.atimes.note(loc, &old, Timespec::now())
        {
            g.write_atimes()?;
        }
        Ok(())
    }

    /// Writes `data` at `offset`; `kill_priv` says what the writer clears
    /// of set-user-ID and set-group-ID. Returns the new attributes. A
    /// write larger than one log record is committed in several batches
    /// (POSIX promises no atomicity for it).
    pub fn write(
        &self,
        loc: &Loc,
        offset: u64,
        data: &[u8],
        kill_priv: KillPriv,
    ) -> FsResult<Attr> {
        self.write_then_set(loc, HeldBytes::new(offset, data, kill_priv))
    }

    /// [`Fs::write`] of `bytes`, after which the file's attributes are
    /// `bytes.attr`, if given, instead of what the write alone makes them:
    /// that is what the caller computed for the setattr calls around the
    /// write (the FUSE adapter answers those of a file whose writes it
    /// holds itself, see [`SetAttr::apply_to`] and [`Attr::written`]), and
    /// it is written in the write's last batch, or alone if `data` is
    /// empty.
    ///
    /// [`SetAttr::apply_to`]: crate::SetAttr::apply_to
    pub fn write_then_set(&self, loc: &Loc, bytes: HeldBytes<'_>) -> FsResult<Attr> {
        let Some(end) = bytes.end() else {
            return err(libc::EFBIG);
        };
        debug_assert!(bytes.attr.is_none_or(|a| a.size >= end));
        let chunk = self.write_chunk_bytes();
        if bytes.data.len() <= chunk {
            return self.write_batch(loc, bytes);
        }
        let mut last = None;
        let pieces = bytes.data.len().div_ceil(chunk);
        for (i, piece) in bytes.data.chunks(chunk).enumerate() {
            let at = bytes.offset + (i * chunk) as u64;
            let then = if i + 1 == pieces { bytes.attr } else { None };
            let held = HeldBytes {
                attr: then,
                ..HeldBytes::new(at, piece, bytes.kill_priv)
            };
            last = Some(self.write_batch(loc, held)?);
        }
        last.map_or_else(|| self.getattr(loc), Ok)
    }

    /// Writes several files' held bytes, each as [`Fs::write_then_set`]
    /// writes it, in as few batches as hold them: many small files' runs,
    /// handed over together, make one batch (one lock, one log record, the
    /// noted access times written once) instead of one each. Bytes too
    /// many for a batch are written alone, in pieces. `failed(i, e)` hears
    /// of every entry not written. Returns the number of batches handed to
    /// the engine.
    pub fn write_held_together(
        &self,
        held: &[(&Loc, HeldBytes<'_>)],
        mut failed: impl FnMut(usize, &FsError),
    ) -> u64 {
        let chunk = self.write_chunk_bytes();
        let mut batches = 0;
        let mut group = Vec::new();
        let mut group_bytes = 0;
        for (i, (loc, bytes)) in held.iter().enumerate() {
            if bytes.end().is_none() {
                failed(i, &FsError::Posix(libc::EFBIG));
                continue;
            }
            // Keys and attribute patches count too: a run of setattrs
            // alone holds no bytes.
            let weight = bytes.data.len() + HELD_OVERHEAD_BYTES;
            if bytes.data.len() > chunk {
                batches += bytes.data.len().div_ceil(chunk) as u64;
                if let Err(e) = self.write_then_set(loc, *bytes) {
                    failed(i, &e);
                }
                continue;
            }
            if group_bytes + weight > chunk {
                batches += self.write_group(held, &group, &mut failed);
                group.clear();
                group_bytes = 0;
            }
            group.push(i);
            group_bytes += weight;
        }
        batches + self.write_group(held, &group, &mut failed)
    }

    /// The entries `group` of `held` (together one batch's worth) written
    /// as one batch; returns 1 if a batch was handed to the engine, else 0.
    fn write_group(
        &self,
        held: &[(&Loc, HeldBytes<'_>)],
        group: &[usize],
        failed: &mut impl FnMut(usize, &FsError),
    ) -> u64 {
        if group.is_empty() {
            return 0;
        }
        self.back_pressure.pace_writer();
        let g = self.lock();
        let mut ops = Vec::new();
        let mut in_batch = Vec::with_capacity(group.len());
        for &i in group {
            let (loc, bytes) = held[i];
            match self.held_ops(&g, loc, bytes, &mut ops) {
                Ok(_) => in_batch.push(i),
                Err(e) => failed(i, &e),
            }
        }
        if ops.is_empty() {
            return 0;
        }
        if let Err(e) = g.write_owned(ops) {
            for i in in_batch {
                failed(i, &e);
            }
        }
        1
    }

    /// `held` (one batch's worth) written into the file at `loc`.
    fn write_batch(&self, loc: &Loc, held: HeldBytes<'_>) -> FsResult<Attr> {
        self.back_pressure.pace_writer();
        let g = self.lock();
        let mut ops = Vec::new();
        let attr = self.held_ops(&g, loc, held, &mut ops)?;
        if !ops.is_empty() {
            g.write_owned(ops)?;
        }
        Ok(attr)
    }

    /// Ops that write `held` (one batch's worth) into the file at `loc`,
    /// and its attributes after them. The caller holds the namespace lock.
    pub(crate) fn held_ops(
        &self,
        _g: &Guard<'_>,
        loc: &Loc,
        held: HeldBytes<'_>,
        ops: &mut Vec<Op>,
    ) -> FsResult<Attr> {
        let old = file_attr(self, loc)?;
        if held.data.is_empty() && held.attr.is_none() {
            return Ok(old);
        }
        write_ops(loc, held.offset, held.data, old.size, ops);
        let attr = match held.attr {
            Some(set) => set.clone(),
            None => old.written(
                held.offset,
                held.data.len() as u64,
                held.kill_priv,
                Timespec::now(),
            ),
        };
        update_attr(loc, &old, &attr, ops);
        Ok(attr)
    }

    /// `fallocate(2)`: mode 0 (extend the size), `PUNCH_HOLE|KEEP_SIZE`
    /// and `ZERO_RANGE` (optionally with `KEEP_SIZE`). Any other mode is
    /// `EOPNOTSUPP`: never a pretended success. An allocating call (mode 0
    /// or `KEEP_SIZE`) whose bytes past the end of file exceed the free
    /// space fails with `ENOSPC`, as posix_fallocate must; the space is
    /// checked, not held (there are no reservations), and holes inside the
    /// file are not counted.
    pub fn fallocate(&self, loc: &Loc, offset: u64, len: u64, mode: i32) -> FsResult<Attr> {
        self.fallocate_as(loc, offset, len, mode, KillPriv::Keep)
    }

    /// [`Fs::fallocate`] by a caller that may not keep set-user-ID and
    /// set-group-ID: `kill_priv` clears them as a write does (an
    /// unprivileged fallocate modifies the file; xfstests generic/683-685).
    pub fn fallocate_as(
        &self,
        loc: &Loc,
        offset: u64,
        len: u64,
        mode: i32,
        kill_priv: KillPriv,
    ) -> FsResult<Attr> {
        use falloc::*;
        if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE) != 0 {
            return err(libc::EOPNOTSUPP);
        }
        if mode & PUNCH_HOLE != 0 && (mode & KEEP_SIZE == 0 || mode & ZERO_RANGE != 0) {
            return err(libc::EOPNOTSUPP);
        }
        if len == 0 {
            return err(libc::EINVAL);
        }
        let Some(end) = file_end(offset, len) else {
            return err(libc::EFBIG);
        };
        let g = self.lock();
        let old = file_attr(self, loc)?;
        let mut attr = old.clone();
        if mode & (PUNCH_HOLE | ZERO_RANGE) == 0
            && end.saturating_sub(attr.size) > self.tree.space().free_bytes
        {
            return err(libc::ENOSPC);
        }
        let mut ops = Vec::new();
        if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            zero_ops(loc, offset, end.min(attr.size), &mut ops);
        }
        let now = Timespec::now();
        if mode & KEEP_SIZE == 0 && end > attr.size {
            attr.size = end;
        }
        if mode & (PUNCH_HOLE | ZERO_RANGE) != 0 {
            attr.mtime = now;
        }
        attr.ctime = now;
        attr.perm = kill_priv.apply(attr.perm, attr.gid);
        update_attr(loc, &old, &attr, &mut ops);
        g.write(&ops)?;
        Ok(attr)
    }

    /// `lseek` with `SEEK_DATA` / `SEEK_HOLE`; `ENXIO` at or past the end.
    pub fn seek(&self, loc: &Loc, offset: u64, whence: Seek) -> FsResult<u64> {
        let attr = file_attr(self, loc)?;
        if offset >= attr.size {
            return err(libc::ENXIO);
        }
        let first = offset / BLOCK;
        let lo = loc.data_key(first);
        let hi = loc.blocks().end;
        // Keys only: the blocks are looked at in the cached leaves, not
        // copied out (a range iterator copied every block of the file, 254
        // µs a seek in a cold `grep -r`, which asks for the first hole of
        // every file larger than its read buffer).
        let mut expect = first;
        let mut data = None;
        self.tree.visit_range(&lo, Some(&hi), |key, _| {
            let block = Loc::block_of(key);
            if block * BLOCK >= attr.size {
                return false;
            }
            match whence {
                Seek::Data => {
                    data = Some(block);
                    false
                }
                Seek::Hole if block != expect => false,
                Seek::Hole => {
                    expect = block + 1;
                    true
                }
            }
        })?;
        match (whence, data) {
            (Seek::Data, Some(block)) => Ok(offset.max(block * BLOCK)),
            (Seek::Data, None) => err(libc::ENXIO),
            (Seek::Hole, _) => Ok(offset.max(expect * BLOCK).min(attr.size)),
        }
    }

    /// Copies `len` bytes from `src` at `src_off` to `dst` at `dst_off`
    /// (`copy_file_range`; a plain copy until clones exist), clearing
    /// what `kill_priv` says of `dst`'s set-user-ID and set-group-ID, as
    /// a write does. Returns the bytes copied.
    pub fn copy_range(
        &self,
        src: &Loc,
        src_off: u64,
        dst: &Loc,
        dst_off: u64,
        len: u64,
        kill_priv: KillPriv,
    ) -> FsResult<u64> {
        const CHUNK: u64 = 1 << 20;
        let mut done = 0;
        while done < len {
            let n = CHUNK.min(len - done) as usize;
            let bytes = self.read(src, src_off + done, n)?;
            if bytes.is_empty() {
                break;
            }
            self.write(dst, dst_off + done, &bytes, kill_priv)?;
            done += bytes.len() as u64;
            if bytes.len() < n {
                break;
            }
        }
        Ok(done)
    }
}

/// Appends the part of block `block` (stored bytes `value`; a short block
/// reads as zero-padded) that falls in `[offset, end)` to `out`, which
/// holds that range from `offset` up to what earlier blocks filled: the
/// gap before this block (a hole, or the zeros of a short block) is
/// zeros. Blocks come in increasing order.
fn append_block(out: &mut Vec<u8>, offset: u64, end: u64, block: u64, value: &[u8]) {
    let block_start = block * BLOCK;
    let from = offset.max(block_start);
    let to = end.min(block_start + value.len() as u64);
    if from < to {
        let src = &value[(from - block_start) as usize..(to - block_start) as usize];
        let at = (from - offset) as usize;
        debug_assert!(out.len() <= at, "blocks out of order");
        out.resize(at, 0);
        out.extend_from_slice(src);
    }
}

fn needs_atime(attr: &Attr) -> bool {
    const DAY_SECS: i64 = 24 * 3600;
    attr.atime <= attr.mtime
        || attr.atime <= attr.ctime
        || Timespec::now().sec - attr.atime.sec > DAY_SECS
}
