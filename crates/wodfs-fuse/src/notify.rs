//! Notifications from the daemon to the kernel.
//!
//! The kernel caches attributes for the TTL (a day) and learns of changes
//! from replies. A request whose reply carries no attributes but which
//! changed the mode (a WRITE or FALLOCATE that cleared set-user-ID or
//! set-group-ID; the kernel refreshes only size and times after them)
//! must tell the kernel, or `stat` shows the old mode until the inode is
//! evicted (xfstests generic/355 and 683-685).

use std::fmt;
use std::sync::{Arc, OnceLock};

use fuser::{INodeNo, Notifier};

/// The session's notifier, shared with the adapter, which is built before
/// the session (and so before there is a notifier to give it).
#[derive(Clone, Default)]
pub struct KernelNotifier(Arc<OnceLock<Notifier>>);

impl KernelNotifier {
    /// Connects the session's notifier; later calls are ignored.
    pub fn connect(&self, notifier: Notifier) {
        let _ = self.0.set(notifier);
    }

    /// Drops the kernel's cached attributes of `ino` (not its pages). A
    /// failure is logged: the request itself succeeded, and an inode the
    /// kernel no longer holds (ENOENT) has nothing to drop.
    pub fn attributes_changed(&self, ino: u64) {
        let Some(notifier) = self.0.get() else {
            return;
        };
        if let Err(e) = notifier.inval_inode(INodeNo(ino), -1, 0) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::warn!("could not invalidate cached attributes of inode {ino}: {e}");
            }
        }
    }
}

impl fmt::Debug for KernelNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.0.get().is_some() {
            "connected"
        } else {
            "not connected"
        };
        write!(f, "KernelNotifier({state})")
    }
}
