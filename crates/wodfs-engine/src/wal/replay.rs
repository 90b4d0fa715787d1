//! Reading the log back at recovery: records from the checkpoint's LSN on,
//! while each one is whole, in place and chained to the one before.
//!
//! Records are handed to a visitor one at a time and not kept: recovery
//! reads the log twice (bindings first, then batches; see `Tree::open`),
//! so the memory it needs is a window and one record, whatever the log's
//! size. Holding every record, raw and decoded, took up to 1.5 times the
//! log, which kept the default log small.

use super::record::{chain, FRAME_HEADER_BYTES};
use crate::error::Result;
use crate::tree::Env;

/// Why the log ended where it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEnd {
    /// Nothing at the next position belongs to this lap of the log: the
    /// normal end.
    Clean,
    /// A record sits at the next position (its LSN matches) but its length
    /// or checksum is wrong: a write torn by a crash, or corruption. It and
    /// anything after it were not replayed.
    Damaged {
        /// The record's LSN.
        lsn: u64,
        /// Its device address.
        addr: u64,
    },
    /// A batch logged with unbound inserts whose binding record never
    /// became durable (its sync did not complete): replay stopped before it.
    Unbound {
        /// The batch's LSN.
        lsn: u64,
    },
}

/// What a scan found: where the log ends, and how it got there.
#[derive(Debug)]
pub(crate) struct Scan {
    pub end: LogEnd,
    /// Records visited.
    pub records: u64,
    /// Where the scan stopped: after the last valid record, or where the
    /// visitor asked it to stop.
    pub tail: u64,
    pub chain: u32,
    /// Device bytes of the sector holding `tail`, up to `tail`.
    pub head: Vec<u8>,
}

/// Bytes of the log region read at a time by [`scan`].
const WINDOW_BYTES: u64 = 1 << 20;

/// The log region, read a window at a time as the scan reaches it. Reading
/// the whole region up front cost every open its full size (64 MiB by
/// default) even after a clean close, when the log ends at its first
/// record.
struct Window<'a> {
    env: Env<'a>,
    offset: u64,
    bytes: u64,
    /// Region-relative position of `buf`'s first byte.
    start: u64,
    buf: Vec<u8>,
}

impl Window<'_> {
    /// `n` bytes from log position `lsn` on, wrapping around the region.
    fn bytes_at(&mut self, lsn: u64, n: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        let mut p = lsn;
        while out.len() < n {
            let i = p % self.bytes;
            let held = self.start..self.start + self.buf.len() as u64;
            if !held.contains(&i) {
                // Whole windows, so reads stay aligned as the region is.
                self.start = i / WINDOW_BYTES * WINDOW_BYTES;
                let len = WINDOW_BYTES.min(self.bytes - self.start);
                self.buf.resize(len as usize, 0);
                self.env.read(self.offset + self.start, &mut self.buf)?;
            }
            let j = (i - self.start) as usize;
            let take = (n - out.len()).min(self.buf.len() - j);
            out.extend_from_slice(&self.buf[j..j + take]);
            p += take as u64;
        }
        Ok(out)
    }
}

/// What to do after a record: go on to the next, or stop before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    Stop,
}

/// Reads the valid records from `start` (whose predecessor's chain value
/// is `start_chain`) and hands each to `visit` with its LSN. Stops at the
/// first record that is torn, damaged, stale or absent (that is the end
/// of the log), at `upto` if given (a second pass stops where the first
/// ended), or when `visit` says so.
pub(crate) fn scan(
    env: Env<'_>,
    region_offset: u64,
    region_bytes: u64,
    (start, start_chain): (u64, u32),
    upto: Option<u64>,
    visit: &mut dyn FnMut(u64, Vec<u8>) -> Result<Next>,
) -> Result<Scan> {
    let mut region = Window {
        env,
        offset: region_offset,
        bytes: region_bytes,
        start: 0,
        buf: Vec::new(),
    };
    let mut records = 0;
    let mut lsn = start;
    let mut prev = start_chain;
    let mut end = LogEnd::Clean;
    let damaged = |lsn: u64| LogEnd::Damaged {
        lsn,
        addr: region_offset + lsn % region_bytes,
    };
    loop {
        if lsn - start + FRAME_HEADER_BYTES > region_bytes || upto.is_some_and(|u| lsn >= u) {
            break;
        }
        let h = region.bytes_at(lsn, FRAME_HEADER_BYTES as usize)?;
        let rec_lsn = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
        let len = u64::from(u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")));
        let stored_chain = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if rec_lsn != lsn {
            break;
        }
        if len == 0 || lsn - start + FRAME_HEADER_BYTES + len > region_bytes {
            end = damaged(lsn);
            break;
        }
        let payload = region.bytes_at(lsn + FRAME_HEADER_BYTES, len as usize)?;
        let c = chain(prev, lsn, &payload);
        if c != stored_chain {
            end = damaged(lsn);
            break;
        }
        records += 1;
        let next = visit(lsn, payload)?;
        prev = c;
        lsn += FRAME_HEADER_BYTES + len;
        if next == Next::Stop {
            break;
        }
    }
    let sector = wodfs_device::SECTOR_BYTES;
    let head_start = lsn / sector * sector;
    let head = region.bytes_at(head_start, (lsn - head_start) as usize)?;
    Ok(Scan {
        end,
        records,
        tail: lsn,
        chain: prev,
        head,
    })
}
