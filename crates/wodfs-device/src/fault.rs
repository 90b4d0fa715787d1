//! [`FaultDevice`]: an in-memory device that simulates power loss and
//! injected faults, deterministically from one seed.
//!
//! # Fault model
//!
//! The crash oracle of the durability tests relies on exactly these rules.
//!
//! * **State.** The device holds `durable` bytes (what surely survives a
//!   power cut), `current` bytes (what reads see) and the *epoch*: every
//!   write that returned `Ok` since the last successful sync, in issue order.
//!   `current` is always `durable` with the epoch's writes applied in order.
//! * **Reads** see every write that returned `Ok`, synced or not.
//! * **A successful sync** applies the epoch to `durable` in issue order
//!   and empties it. A write that returned before a sync that returned `Ok`
//!   is never lost, torn or reordered afterwards.
//! * **A power cut** (scheduled by write count, or [`FaultDevice::cut_power`])
//!   makes the write that triggers it, and every later read, write and sync,
//!   fail with [`PowerCut`] and change nothing.
//! * **The crash image** ([`FaultDevice::crash_image`]) is what a restarted
//!   machine reads: `durable`, then the epoch's writes in a seeded random
//!   order, each one applied whole, dropped, or torn. Because of the
//!   shuffle, two overlapping writes of one epoch may land in either order,
//!   so a location written twice may come back with the older data.
//! * **Tearing** happens only at [`SECTOR_BYTES`](crate::SECTOR_BYTES)
//!   boundaries: a torn write lands as a random subset of its sector pieces,
//!   where the partial first and last sectors of an unaligned write are
//!   pieces too. A sector piece is atomic: it lands whole or not at all.
//! * **Injected errors** ([`FaultKind`]) fail one request and change
//!   nothing: a failed write is not in `current` nor in the epoch, a failed
//!   read leaves the buffer untouched, and a failed sync makes nothing
//!   durable and leaves the epoch pending (a later successful sync still
//!   makes it durable). Real kernels can be harsher after a failed
//!   `fsync` and drop the dirty pages; the engine must not write on after
//!   one, so this model does not simulate that.
//! * **Bit flips** ([`FaultDevice::flip_bit`]) model media corruption: the
//!   bit reads flipped now and in every crash image, whatever happens to the
//!   epoch's writes that cover it.
//! * **What cannot happen:** misdirected writes (data always lands at the
//!   offset it was written to), corruption other than explicit bit flips,
//!   torn sectors, spontaneous errors other than the armed ones, and loss of
//!   anything made durable by a successful sync.

use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::{Mutex, MutexGuard, PoisonError};

mod config;
mod crash;
mod rng;

pub use config::{FaultConfig, FaultKind, PowerCut};

use crash::{PendingWrite, Weights};
use rng::SplitMix64;

use crate::{check_range, Device};

/// Separates the random-bit-flip stream from the crash-image stream, so
/// flipping bits does not change how the same history crashes.
const FLIP_STREAM: u64 = 0x6A09_E667_F3BC_C908;

/// An in-memory device that loses unsynced writes, tears and reorders them
/// on a simulated power cut, and injects I/O errors and bit flips, all
/// reproducible from [`FaultConfig::seed`]. See the module documentation
/// for the exact model.
pub struct FaultDevice {
    size_bytes: u64,
    state: Mutex<State>,
}

struct State {
    config: FaultConfig,
    durable: Vec<u8>,
    current: Vec<u8>,
    epoch: Vec<PendingWrite>,
    reads_issued: u64,
    writes_issued: u64,
    syncs_issued: u64,
    power_cut_at_write: Option<u64>,
    read_fault: Option<(u64, FaultKind)>,
    write_fault: Option<(u64, FaultKind)>,
    sync_fault: Option<(u64, FaultKind)>,
    powered: bool,
    phase: Option<&'static str>,
    phase_at_power_cut: Option<&'static str>,
    flip_rng: SplitMix64,
}

impl State {
    fn cut_power(&mut self) {
        if self.powered {
            self.powered = false;
            self.phase_at_power_cut = self.phase;
        }
    }

    fn check_power(&self) -> io::Result<()> {
        if self.powered {
            Ok(())
        } else {
            Err(PowerCut.to_io_error())
        }
    }
}

/// Whether the request numbered `index` is the one a fault was armed for.
fn armed(fault: Option<(u64, FaultKind)>, index: u64) -> Option<FaultKind> {
    fault.and_then(|(at, kind)| (at == index).then_some(kind))
}

impl FaultDevice {
    /// A zero-filled device of `size_bytes`, all of it durable.
    pub fn new(size_bytes: u64, config: FaultConfig) -> Self {
        let len = usize::try_from(size_bytes).expect("device size must fit in memory");
        Self::from_image(vec![0; len], config)
    }

    /// A device whose durable contents are `image`, for example a crash
    /// image of an earlier run, so a test can restart on it.
    pub fn from_image(image: Vec<u8>, config: FaultConfig) -> Self {
        assert!(
            config.crash_weight_applied > 0
                || config.crash_weight_dropped > 0
                || config.crash_weight_torn > 0,
            "at least one crash weight must be non-zero"
        );
        let state = State {
            config,
            current: image.clone(),
            durable: image,
            epoch: Vec::new(),
            reads_issued: 0,
            writes_issued: 0,
            syncs_issued: 0,
            power_cut_at_write: config.power_cut_after_writes,
            read_fault: config.fail_read_at,
            write_fault: config.fail_write_at,
            sync_fault: config.fail_sync_at,
            powered: true,
            phase: None,
            phase_at_power_cut: None,
            flip_rng: SplitMix64::new(config.seed ^ FLIP_STREAM),
        };
        Self {
            size_bytes: state.current.len() as u64,
            state: Mutex::new(state),
        }
    }

    // A panic in another test thread cannot leave the state half-updated in
    // a way that matters here, so a poisoned lock is simply taken over.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cuts power now: every later request fails with [`PowerCut`].
    /// Cutting power again changes nothing.
    pub fn cut_power(&self) {
        self.lock().cut_power();
    }

    /// Whether power has been cut, by schedule or by [`FaultDevice::cut_power`].
    pub fn power_is_cut(&self) -> bool {
        !self.lock().powered
    }

    /// The phase last passed to [`Device::annotate`] before power was cut,
    /// so crash tests can check they landed a cut in every phase. `None`
    /// while power is on or if no phase was named before the cut.
    pub fn phase_at_power_cut(&self) -> Option<&'static str> {
        self.lock().phase_at_power_cut
    }

    /// The bytes a machine restarted after a power cut now would read,
    /// crashed with [`FaultConfig::seed`]. Calling it again without new
    /// requests returns the same image.
    pub fn crash_image(&self) -> Vec<u8> {
        let seed = self.lock().config.seed;
        self.crash_image_seeded(seed)
    }

    /// Like [`FaultDevice::crash_image`] with another seed, so one recorded
    /// history can be crashed many ways.
    pub fn crash_image_seeded(&self, seed: u64) -> Vec<u8> {
        let state = self.lock();
        let weights = Weights {
            applied: state.config.crash_weight_applied,
            dropped: state.config.crash_weight_dropped,
            torn: state.config.crash_weight_torn,
        };
        crash::crash_image(&state.durable, &state.epoch, weights, seed)
    }

    /// Schedules a power cut on the write that comes after `after_n_more`
    /// more writes (zero: the next write), replacing any scheduled cut.
    pub fn arm_power_cut(&self, after_n_more: u64) {
        let mut state = self.lock();
        state.power_cut_at_write = Some(state.writes_issued + after_n_more + 1);
    }

    /// Makes the read that comes after `after_n_more` more reads fail with
    /// `kind`, replacing any armed read fault.
    pub fn arm_read_fault(&self, after_n_more: u64, kind: FaultKind) {
        let mut state = self.lock();
        state.read_fault = Some((state.reads_issued + after_n_more + 1, kind));
    }

    /// Makes the write that comes after `after_n_more` more writes fail with
    /// `kind`, replacing any armed write fault.
    pub fn arm_write_fault(&self, after_n_more: u64, kind: FaultKind) {
        let mut state = self.lock();
        state.write_fault = Some((state.writes_issued + after_n_more + 1, kind));
    }

    /// Makes the sync that comes after `after_n_more` more syncs fail with
    /// `kind`, replacing any armed sync fault.
    pub fn arm_sync_fault(&self, after_n_more: u64, kind: FaultKind) {
        let mut state = self.lock();
        state.sync_fault = Some((state.syncs_issued + after_n_more + 1, kind));
    }

    /// Cancels every armed error and any scheduled power cut that has not
    /// happened yet.
    pub fn disarm_faults(&self) {
        let mut state = self.lock();
        state.power_cut_at_write = None;
        state.read_fault = None;
        state.write_fault = None;
        state.sync_fault = None;
    }

    /// Flips bit `bit` (0 is the least significant) of the byte at `offset`
    /// on the media: reads and every crash image see it flipped.
    ///
    /// # Panics
    ///
    /// If `offset` is past the end or `bit` is not below 8.
    pub fn flip_bit(&self, offset: u64, bit: u8) {
        assert!(offset < self.size_bytes, "flip at {offset} is past the end");
        assert!(bit < 8, "a byte has no bit {bit}");
        let mask = 1u8 << bit;
        let mut state = self.lock();
        let at = offset as usize;
        state.durable[at] ^= mask;
        state.current[at] ^= mask;
        // Flipping the pending copies too keeps `current` equal to the epoch
        // replayed over `durable`, and keeps the flip whatever a crash does.
        for write in &mut state.epoch {
            if let Some(relative) = offset.checked_sub(write.offset) {
                if let Some(byte) = write.data.get_mut(relative as usize) {
                    *byte ^= mask;
                }
            }
        }
    }

    /// Flips one seeded random bit inside `range` and returns where, as
    /// `(offset, bit)`.
    ///
    /// # Panics
    ///
    /// If `range` is empty or reaches past the end of the device.
    pub fn flip_random_bit_in(&self, range: Range<u64>) -> (u64, u8) {
        assert!(!range.is_empty(), "cannot flip a bit in an empty range");
        assert!(
            range.end <= self.size_bytes,
            "range {range:?} is past the end"
        );
        let (offset, bit) = {
            let mut state = self.lock();
            let offset = range.start + state.flip_rng.below(range.end - range.start);
            (offset, state.flip_rng.below(8) as u8)
        };
        self.flip_bit(offset, bit);
        (offset, bit)
    }

    /// Reads issued while the device had power, failed ones included.
    pub fn reads_issued(&self) -> u64 {
        self.lock().reads_issued
    }

    /// Writes issued while the device had power, failed ones included; the
    /// count that write fault and power-cut indices refer to.
    pub fn writes_issued(&self) -> u64 {
        self.lock().writes_issued
    }

    /// Syncs issued while the device had power, failed ones included.
    pub fn syncs_issued(&self) -> u64 {
        self.lock().syncs_issued
    }

    /// Writes a power cut could still lose: those since the last
    /// successful sync.
    pub fn writes_in_epoch(&self) -> u64 {
        self.lock().epoch.len() as u64
    }
}

impl Device for FaultDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut state = self.lock();
        state.check_power()?;
        check_range(offset, buf.len(), self.size_bytes)?;
        state.reads_issued += 1;
        if let Some(kind) = armed(state.read_fault, state.reads_issued) {
            return Err(kind.to_io_error());
        }
        let start = offset as usize;
        buf.copy_from_slice(&state.current[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        state.check_power()?;
        check_range(offset, buf.len(), self.size_bytes)?;
        state.writes_issued += 1;
        if state.power_cut_at_write == Some(state.writes_issued) {
            state.cut_power();
            return Err(PowerCut.to_io_error());
        }
        if let Some(kind) = armed(state.write_fault, state.writes_issued) {
            return Err(kind.to_io_error());
        }
        let start = offset as usize;
        state.current[start..start + buf.len()].copy_from_slice(buf);
        state.epoch.push(PendingWrite {
            offset,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut state = self.lock();
        state.check_power()?;
        state.syncs_issued += 1;
        if let Some(kind) = armed(state.sync_fault, state.syncs_issued) {
            return Err(kind.to_io_error());
        }
        let State { durable, epoch, .. } = &mut *state;
        for write in epoch.drain(..) {
            let start = write.offset as usize;
            durable[start..start + write.data.len()].copy_from_slice(&write.data);
        }
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn annotate(&self, phase: &'static str) {
        let mut state = self.lock();
        if state.powered {
            state.phase = Some(phase);
        }
    }
}

impl fmt::Debug for FaultDevice {
    // The images can be gigabytes, so only the bookkeeping is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("FaultDevice")
            .field("size_bytes", &self.size_bytes)
            .field("config", &state.config)
            .field("powered", &state.powered)
            .field("reads_issued", &state.reads_issued)
            .field("writes_issued", &state.writes_issued)
            .field("syncs_issued", &state.syncs_issued)
            .field("writes_in_epoch", &state.epoch.len())
            .field("phase", &state.phase)
            .finish_non_exhaustive()
    }
}
