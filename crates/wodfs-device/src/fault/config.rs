//! The knobs of the fault device and the errors it injects.

use std::fmt;
use std::io;

/// What a [`FaultDevice`](crate::FaultDevice) does, fixed at construction.
///
/// Every request index is 1-based and counts requests of one type (reads,
/// writes or syncs) issued while the device had power, failed ones
/// included; requests rejected as out of range are not counted.
/// `FaultConfig { seed, ..FaultConfig::default() }` gives a
/// device that never fails on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultConfig {
    /// Seeds every random choice: crash images and random bit flips.
    pub seed: u64,
    /// The write that cuts power: it and every later request fail with
    /// [`PowerCut`] and change nothing.
    pub power_cut_after_writes: Option<u64>,
    /// The write that fails with the given error and changes nothing.
    pub fail_write_at: Option<(u64, FaultKind)>,
    /// The read that fails with the given error and leaves the buffer alone.
    pub fail_read_at: Option<(u64, FaultKind)>,
    /// The sync that fails with the given error and makes nothing durable.
    pub fail_sync_at: Option<(u64, FaultKind)>,
    /// Relative odds that an unsynced write lands whole in a crash image.
    pub crash_weight_applied: u32,
    /// Relative odds that an unsynced write is lost from a crash image.
    pub crash_weight_dropped: u32,
    /// Relative odds that an unsynced write is torn in a crash image.
    pub crash_weight_torn: u32,
}

impl FaultConfig {
    /// A device with this seed, no scheduled faults and even crash odds.
    pub fn with_seed(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }
}

impl Default for FaultConfig {
    /// Seed zero, no scheduled faults, and applied, dropped and torn equally
    /// likely for each unsynced write.
    fn default() -> Self {
        Self {
            seed: 0,
            power_cut_after_writes: None,
            fail_write_at: None,
            fail_read_at: None,
            fail_sync_at: None,
            crash_weight_applied: 1,
            crash_weight_dropped: 1,
            crash_weight_torn: 1,
        }
    }
}

/// An error the fault device can inject into one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// A media or transport error (`EIO`).
    Eio,
    /// The backing store is full (`ENOSPC`), as a thin-provisioned volume or
    /// an image on a full host file system reports it.
    Enospc,
}

impl FaultKind {
    /// The errno this fault stands for.
    pub fn raw_os_error(self) -> i32 {
        match self {
            FaultKind::Eio => libc::EIO,
            FaultKind::Enospc => libc::ENOSPC,
        }
    }

    /// The error a real device would return, so callers exercise the same
    /// errno mapping they use in production.
    pub fn to_io_error(self) -> io::Error {
        io::Error::from_raw_os_error(self.raw_os_error())
    }
}

/// The cause inside the `io::Error` every request returns once a simulated
/// power cut has happened; tests recognise it with [`PowerCut::is_cause_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PowerCut;

impl PowerCut {
    /// Wraps the marker as the `io::Error` (of kind `Other`) requests return.
    pub fn to_io_error(self) -> io::Error {
        io::Error::other(self)
    }

    /// Tells a simulated power cut apart from every other I/O error.
    pub fn is_cause_of(error: &io::Error) -> bool {
        error
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<PowerCut>().is_some())
    }
}

impl fmt::Display for PowerCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("simulated power cut: the device has lost power")
    }
}

impl std::error::Error for PowerCut {}

#[cfg(test)]
mod tests {
    use super::{FaultKind, PowerCut};
    use std::io;

    #[test]
    fn power_cut_is_recognised_and_other_errors_are_not() {
        let cut = PowerCut.to_io_error();
        assert_eq!(cut.kind(), io::ErrorKind::Other);
        assert!(PowerCut::is_cause_of(&cut));
        assert!(!PowerCut::is_cause_of(&FaultKind::Eio.to_io_error()));
        assert!(!PowerCut::is_cause_of(&io::Error::other("something else")));
    }

    #[test]
    fn fault_kinds_map_to_their_errno() {
        assert_eq!(FaultKind::Eio.to_io_error().raw_os_error(), Some(libc::EIO));
        let enospc = FaultKind::Enospc.to_io_error();
        assert_eq!(enospc.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(enospc.kind(), io::ErrorKind::StorageFull);
    }
}
