//! # wodfs-fuse: the FUSE adapter
//!
//! Serves a [`wodfs_fs::Fs`] through the kernel's FUSE interface with
//! fuser 0.18 (pinned; only this crate knows FUSE). The kernel speaks
//! inode numbers, the core speaks paths: an in-memory [`table::InodeTable`]
//! maps each inode the kernel holds to its parent and name.
//!
//! Mount-wide choices (see `README.md` of this crate for measurements and
//! `docs/fuse.md` for every request the kernel is asked to spare):
//! * INIT flags: readdirplus (auto), parallel dirops, handle_killpriv_v2
//!   (we clear set-user-ID/set-group-ID on write, fallocate,
//!   copy_file_range, chown and truncate, as Linux 6.2+ does, and tell the
//!   kernel when a request that replies without attributes did so),
//!   cache_symlinks. The
//!   writeback cache is off unless asked for (`-o writeback`): with it, a
//!   small write into a cold page makes the kernel read the page first,
//!   which defeats blind writes (measurements in `README.md`).
//! * Long TTLs (a day) for entries, negative entries and attributes: only
//!   this daemon changes the file system.
//! * Open files keep their page cache across opens (`FOPEN_KEEP_CACHE`)
//!   and send no FLUSH on close (`FOPEN_NOFLUSH`); GETXATTR of an inode
//!   created through this mount and never given an xattr is answered from
//!   the inode table; the readahead window is raised to 2 MiB
//!   ([`readahead`]), and READs of 256 KiB or more go to a second thread
//!   when it is idle (`read_worker.rs`): a window's two 1 MiB READs are
//!   answered at once.
//! * While requests keep coming, the request thread polls `/dev/fuse`
//!   instead of sleeping on it ([`poll`], [`polled`]; `-o poll=US`): on
//!   this guest a sleeping CPU halts, and waking it cost more than most
//!   requests take.
//! * `allow_other` + `default_permissions`: the kernel checks permissions.
//! * Every request handler runs under `catch_unwind`: a panic answers EIO
//!   for that request and is logged; the mount survives.
//! * Durability: `fsync` and `fsyncdir` flush the engine's write-ahead log
//!   (group commit) before answering; the `WODFS_IOC_SYNC` ioctl
//!   (`wodfs sync`), a signal and unmount write a checkpoint. The engine's
//!   background thread flushes the log every second and checkpoints every
//!   minute. Written bytes the coalescer holds (`pending.rs`) are handed
//!   to the engine within two such intervals ([`run_ageing`]).
//!   `sync(1)` and `syncfs(2)` never reach a FUSE daemon, so the loss
//!   window after a crash is three log-flush intervals plus whatever the
//!   kernel still holds in its page cache (with the writeback cache: dirty
//!   pages not yet written back, up to the kernel's dirty expiry, 30 s).
//! * A lazy unmount (`umount -l`) detaches the mount at once; the daemon
//!   keeps serving open files until the last one closes, then the kernel
//!   ends the session and the daemon checkpoints and exits.
//! * SIGTERM, SIGINT and SIGHUP unmount cleanly (checkpoint first); if the
//!   mount is busy it is detached lazily, and the daemon stays until the
//!   last user lets go, then checkpoints and exits.

#![warn(missing_docs)]

mod adapter;
mod convert;
pub mod init_flags;
mod notify;
pub mod pending;
pub mod poll;
pub mod polled;
mod read_worker;
pub mod readahead;
pub mod run_ageing;
mod serve;
pub mod table;

pub use adapter::{AdapterOptions, RequestCounters, WodFuse};
pub use serve::{serve, MountOptions};

/// `_IO('W', 1)`: checkpoint the whole file system. Accepted on any file
/// or directory of the mount (`wodfs sync DIR` sends it to the root).
pub const WODFS_IOC_SYNC: u32 = ((b'W' as u32) << 8) | 1;
