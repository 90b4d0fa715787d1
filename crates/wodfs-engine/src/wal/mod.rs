//! The write-ahead log: a logical redo log in a preallocated, circular
//! region of the device.
//!
//! An LSN is a byte position in an endless log; the record at LSN `l` lives
//! at `region_offset + l mod region_bytes` (a record may wrap). Appends
//! happen under the tree's write lock, so log order is apply order. `sync`
//! makes everything appended so far durable; syncs that wait at the same
//! time share one device flush (group commit). A checkpoint records the
//! tail LSN at which it froze the tree; once its superblock is durable the
//! log before that LSN is reclaimed. Space is never reused while a byte
//! there is still needed: by the last durable checkpoint's replay, or
//! because it is still waiting in the buffer to be written.
//!
//! A full buffer is written out without a device sync ([`Log::write_out`]):
//! it needs its memory back, not durability, and on some devices every
//! sync stalls all other writes (an untar of the Linux tree synced 151
//! times, 44 once full buffers were only written). The next sync makes
//! those bytes durable with the rest.
//!
//! Flushes write whole sectors: from the start of the sector that holds
//! the first unwritten byte (its already durable bytes are rewritten with
//! their own values, so a torn flush cannot damage them) to the end of the
//! sector that holds the last, zero-padded, through the device's direct
//! path: an image file then writes exactly those sectors, with no
//! read-modify-write and no whole 4 KiB pages; the next flush
//! rewrites the padded sector with the records that follow. Appends keep
//! the padded end clear of the sector where live log space begins.

pub(crate) mod packing;
pub(crate) mod record;
pub(crate) mod replay;

use std::borrow::Cow;

use parking_lot::{Condvar, Mutex};
use wodfs_device::SECTOR_BYTES;

use crate::error::{Error, Result};
use crate::tree::Env;

/// Appended bytes that trigger a write-out ([`Log::write_out`]) without
/// waiting for a sync; at most 1/64 of the region
/// ([`Log::write_out_bytes`]).
pub(crate) const LOG_BUFFER_BYTES: u64 = 4 << 20;

#[derive(Debug)]
pub(crate) struct Log {
    region_offset: u64,
    region_bytes: u64,
    inner: Mutex<Inner>,
    flushed: Condvar,
}

#[derive(Debug)]
struct Inner {
    /// Where the next record goes.
    tail: u64,
    /// Chain value after the last record.
    chain: u32,
    /// Bytes from `buf_lsn` (sector-aligned) to `tail` not yet known to be
    /// on the device, plus the durable head of their first sector.
    buf: Vec<u8>,
    buf_lsn: u64,
    /// Everything before this is durable (in the log or a checkpoint).
    durable: u64,
    /// LSNs of binding records not yet durable, oldest first: a write-out
    /// stops before the first (see [`Log::append_bindings`]).
    unsynced_bindings: std::collections::VecDeque<u64>,
    /// Everything before this is on the device, durable or not, or no
    /// longer needed (at least `durable`): written by a sync or a
    /// write-out, or covered by a checkpoint.
    written: u64,
    flushing: bool,
    /// Bytes this log has written to the device (write amplification).
    bytes_written: u64,
    /// This log's syncs (one device sync each) and write-outs since open.
    syncs: u64,
    write_outs: u64,
    /// The last durable checkpoint's LSN: replay starts here.
    reclaimed: u64,
    error: Option<String>,
    /// The LZ4 stream batches are packed into (`packing`).
    packer: packing::Packer,
    /// Bytes the records appended since the packer's last restart (the
    /// last checkpoint's position) would take unpacked.
    unpacked_since_restart: u64,
}

impl Inner {
    /// How far a write-out may write: to the tail, or to the first binding
    /// record not yet durable.
    fn write_out_end(&self) -> u64 {
        self.unsynced_bindings
            .front()
            .map_or(self.tail, |&b| b.min(self.tail))
    }

    /// Bytes of the region in use (from the oldest byte still needed).
    fn used(&self) -> u64 {
        self.tail - self.reclaimed.min(self.buf_lsn)
    }
}

fn floor_sector(lsn: u64) -> u64 {
    lsn / SECTOR_BYTES * SECTOR_BYTES
}

fn ceil_sector(lsn: u64) -> u64 {
    lsn.div_ceil(SECTOR_BYTES) * SECTOR_BYTES
}

impl Log {
    /// A log whose durable contents end at `tail` with chain `chain`;
    /// `head` holds the bytes from `floor_sector(tail)` to `tail` as they
    /// are on the device; replay starts at `reclaimed`.
    pub fn new(
        region_offset: u64,
        region_bytes: u64,
        reclaimed: u64,
        tail: u64,
        chain: u32,
        head: Vec<u8>,
    ) -> Self {
        debug_assert_eq!(head.len() as u64, tail - floor_sector(tail));
        Log {
            region_offset,
            region_bytes,
            inner: Mutex::new(Inner {
                tail,
                chain,
                buf: head,
                buf_lsn: floor_sector(tail),
                durable: tail,
                written: tail,
                unsynced_bindings: Default::default(),
                flushing: false,
                bytes_written: 0,
                syncs: 0,
                write_outs: 0,
                reclaimed,
                error: None,
                packer: packing::Packer::new(),
                unpacked_since_restart: 0,
            }),
            flushed: Condvar::new(),
        }
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// The largest record payload accepted: a quarter of the region, so a
    /// checkpoint can always make room for it.
    pub fn max_payload_bytes(&self) -> u64 {
        self.region_bytes / 4 - record::FRAME_HEADER_BYTES
    }

    /// (tail LSN, chain) now.
    pub fn position(&self) -> (u64, u32) {
        let g = self.inner.lock();
        (g.tail, g.chain)
    }

    /// Bytes of the region in use (from the oldest byte still needed).
    pub fn used_bytes(&self) -> u64 {
        self.inner.lock().used()
    }

    /// Bytes written to the device by this log since open.
    pub fn bytes_written(&self) -> u64 {
        self.inner.lock().bytes_written
    }

    /// Device syncs and write-outs ([`Log::write_out`]) since open.
    pub fn syncs_and_write_outs(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.syncs, g.write_outs)
    }

    /// Unwritten bytes at which the buffer is written out: at most 1/64
    /// of the region, so that a small log (the crash tests' 32 KiB) is
    /// written out between syncs too, and its crash tests cut power
    /// around write-outs.
    pub fn write_out_bytes(&self) -> u64 {
        LOG_BUFFER_BYTES.min(self.region_bytes / 64)
    }

    /// Bytes appended and still only in the buffer.
    pub fn unwritten_bytes(&self) -> u64 {
        let g = self.inner.lock();
        g.tail - g.written
    }

    /// Appends a binding record; `false` if the region has no room for
    /// it now (a checkpoint must reclaim space first). It reaches the
    /// device only through a sync ([`Log::sync_to`]), never a write-out:
    /// the nodes it names must be durable before it is, and only a sync
    /// orders the two (its caller syncs the device between them).
    pub fn append_bindings(&self, payload: &[u8]) -> Result<bool> {
        self.append_with(payload.len(), true, |_| Cow::Borrowed(payload))
    }

    /// Appends a batch (`record::encode_batch`'s payload), packed into the
    /// log's LZ4 stream unless a sample says it will not compress; `false`
    /// if the region has no room for it at its largest (see
    /// [`packing::packed_bound`]).
    pub fn append_batch(&self, plain: &[u8]) -> Result<bool> {
        // Room is checked before packing: a packed batch is in the stream.
        self.append_with(plain.len(), false, |packer| packer.pack(plain))
    }

    /// Appends the payload `logged` gives for `plain_len` bytes (counted
    /// unpacked), if the region has room for it at its largest; a
    /// `binding` record is listed as not yet durable.
    fn append_with<'a>(
        &self,
        plain_len: usize,
        binding: bool,
        logged: impl FnOnce(&mut packing::Packer) -> Cow<'a, [u8]>,
    ) -> Result<bool> {
        let mut g = self.inner.lock();
        if let Some(e) = &g.error {
            return Err(Error::Poisoned(e.clone()));
        }
        if !self.has_room(&g, packing::packed_bound(plain_len) as u64) {
            return Ok(false);
        }
        let payload = logged(&mut g.packer);
        g.unpacked_since_restart += record::FRAME_HEADER_BYTES + plain_len as u64;
        if binding {
            let at = g.tail;
            g.unsynced_bindings.push_back(at);
        }
        Self::frame(&mut g, &payload);
        Ok(true)
    }

    /// The next batch starts a new LZ4 stream: called where a checkpoint
    /// takes its log position, under the tree's lock, so that recovery
    /// from that position needs nothing logged before it.
    pub fn restart_packing(&self) {
        let mut g = self.inner.lock();
        g.packer.restart();
        g.unpacked_since_restart = 0;
    }

    /// Bytes of the region in use, counting what was logged since the
    /// last checkpoint's position as it would be unpacked. Checkpoints are
    /// started by this measure, so they come as often as before the log
    /// was packed: the log's recovery work (the batches a replay applies)
    /// stays bounded by the region's size, and only the device bytes
    /// shrink. (Counting packed bytes made checkpoints ten times rarer in
    /// Postmark without cutting its node writes, and left a small full
    /// store too fragmented for a checkpoint; see ARCHITECTURE.md.)
    pub fn unpacked_bytes(&self) -> u64 {
        let g = self.inner.lock();
        g.used().max(g.unpacked_since_restart)
    }

    fn has_room(&self, g: &Inner, payload_len: u64) -> bool {
        let len = record::FRAME_HEADER_BYTES + payload_len;
        let floor = floor_sector(g.reclaimed.min(g.buf_lsn));
        ceil_sector(g.tail + len) - floor <= self.region_bytes
    }

    fn frame(g: &mut Inner, payload: &[u8]) {
        let len = record::FRAME_HEADER_BYTES + payload.len() as u64;
        let (prev, at) = (g.chain, g.tail);
        let chain = record::frame_into(&mut g.buf, prev, at, payload);
        g.tail += len;
        g.chain = chain;
    }

    /// Makes everything appended before `target` durable (and possibly
    /// more, up to `target` at most of what others asked, and whatever a
    /// write-out put on the device). Concurrent callers share one write
    /// and one device sync. Buffered bytes past `target` are not written:
    /// they may hold unbound records whose bindings are not appended yet
    /// (harmless if they were, see [`Log::write_out`], but not needed).
    pub fn sync_to(&self, env: Env<'_>, target: u64) -> Result<()> {
        let mut g = self.inner.lock();
        loop {
            if let Some(e) = &g.error {
                return Err(Error::Poisoned(e.clone()));
            }
            if g.durable >= target {
                return Ok(());
            }
            if g.flushing {
                self.flushed.wait(&mut g);
                continue;
            }
            g.flushing = true;
            let start = g.buf_lsn;
            let end = target.min(g.tail);
            // Bytes a write-out left on the device need only the sync.
            let bytes = if end > g.written {
                self.sectors(&g, end)
            } else {
                Vec::new()
            };
            let durable_to = end.max(g.written);
            drop(g);
            let r = if bytes.is_empty() {
                Ok(())
            } else {
                self.write_region(env, start, &bytes, "log.write")
            }
            .and_then(|()| Self::sync_device(env));
            g = self.inner.lock();
            g.flushing = false;
            match r {
                Ok(()) => {
                    g.syncs += 1;
                    Self::wrote(&mut g, bytes.len(), durable_to);
                    g.durable = g.durable.max(durable_to);
                    let durable = g.durable;
                    g.unsynced_bindings.retain(|&lsn| lsn >= durable);
                }
                Err(e) => return Err(self.fail(g, e)),
            }
            self.flushed.notify_all();
        }
    }

    /// Writes the buffered records to the device without a device sync,
    /// up to the first binding record not yet durable (see
    /// [`Log::append_bindings`]), and lets the buffer go but for its last
    /// sector: for a buffer that
    /// fills while nobody asks for durability ([`LOG_BUFFER_BYTES`]). The
    /// next sync makes the bytes durable; a crash before it may keep any
    /// of them or none, as with any write, torn at sectors (replay stops at
    /// the first record that is not whole). Unbound records are written
    /// too, maybe before their bindings are appended: recovery stops
    /// before an unbound batch whose binding is not in the log
    /// ([`replay::LogEnd::Unbound`]), and nothing after it had been
    /// acknowledged durable, since a sync binds every unbound insert
    /// before the position it makes durable.
    pub fn write_out(&self, env: Env<'_>) -> Result<()> {
        let mut g = self.inner.lock();
        loop {
            if let Some(e) = &g.error {
                return Err(Error::Poisoned(e.clone()));
            }
            if g.written >= g.write_out_end() {
                return Ok(());
            }
            if !g.flushing {
                break;
            }
            self.flushed.wait(&mut g);
        }
        g.flushing = true;
        let start = g.buf_lsn;
        let end = g.write_out_end();
        let bytes = self.sectors(&g, end);
        drop(g);
        let r = self.write_region(env, start, &bytes, "log.write_out");
        g = self.inner.lock();
        g.flushing = false;
        match r {
            Ok(()) => {
                g.write_outs += 1;
                Self::wrote(&mut g, bytes.len(), end);
            }
            Err(e) => return Err(self.fail(g, e)),
        }
        self.flushed.notify_all();
        Ok(())
    }

    /// The buffer from its start to `end`, zero-padded to whole sectors.
    fn sectors(&self, g: &Inner, end: u64) -> Vec<u8> {
        let start = g.buf_lsn;
        let mut bytes = Vec::with_capacity((ceil_sector(end) - start) as usize);
        bytes.extend_from_slice(&g.buf[..(end - start) as usize]);
        bytes.resize((ceil_sector(end) - start) as usize, 0);
        bytes
    }

    /// A write of `len` device bytes put everything before `end` on the
    /// device.
    fn wrote(g: &mut Inner, len: usize, end: u64) {
        g.bytes_written += len as u64;
        g.written = g.written.max(end);
        Self::let_go_before(g, end);
    }

    /// Drops buffered bytes before the sector holding `lsn`: they are on
    /// the device.
    fn let_go_before(g: &mut Inner, lsn: u64) {
        let keep_from = floor_sector(lsn);
        if keep_from > g.buf_lsn {
            let n = ((keep_from - g.buf_lsn) as usize).min(g.buf.len());
            g.buf.drain(..n);
            g.buf_lsn = keep_from;
        }
    }

    /// A failed write or sync poisons the log: the caller that hit the
    /// failure gets the device error; everyone after it gets `Poisoned`.
    fn fail(&self, mut g: parking_lot::MutexGuard<'_, Inner>, e: Error) -> Error {
        g.error = Some(e.to_string());
        self.flushed.notify_all();
        e
    }

    /// Writes `bytes` at LSN `start`; `phase` names it for the crash
    /// tests (`log.write` for a sync's write, `log.write_out`).
    fn write_region(
        &self,
        env: Env<'_>,
        start: u64,
        bytes: &[u8],
        phase: &'static str,
    ) -> Result<()> {
        // Writes of a sync into space a checkpoint reclaimed are a phase of
        // their own.
        env.dev
            .annotate(if start >= self.region_bytes && phase == "log.write" {
                "log.write.reused"
            } else {
                phase
            });
        let mut lsn = start;
        let mut rest = bytes;
        while !rest.is_empty() {
            let at = lsn % self.region_bytes;
            let n = rest.len().min((self.region_bytes - at) as usize);
            env.write_direct(self.region_offset + at, &rest[..n])?;
            rest = &rest[n..];
            lsn += n as u64;
        }
        Ok(())
    }

    fn sync_device(env: Env<'_>) -> Result<()> {
        env.dev.annotate("log.sync");
        env.sync()?;
        env.dev.annotate("log.synced");
        Ok(())
    }

    /// A checkpoint at `lsn` is durable: the log before it is no longer
    /// needed, nor are buffered bytes before it (the checkpoint has them).
    pub fn reclaim(&self, lsn: u64) {
        let mut g = self.inner.lock();
        g.reclaimed = g.reclaimed.max(lsn);
        g.durable = g.durable.max(lsn);
        g.written = g.written.max(lsn);
        g.unsynced_bindings.retain(|&b| b >= lsn);
        if !g.flushing {
            Self::let_go_before(&mut g, lsn);
        }
    }
}
