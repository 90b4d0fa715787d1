//! # wodfs-fs: the file system over the Bε-tree, without FUSE
//!
//! POSIX operations on the full-path schema of `wodfs-schema`, stored in a
//! `wodfs-engine` tree. Operations name objects by path ([`FsPath`]) for
//! namespace changes and by [`Loc`] (path or inode number) for contents and
//! attributes, so the FUSE adapter, tools and tests share one core.
//!
//! * Every multi-key operation is one atomic engine batch: unlink is a
//!   delete of the metadata key plus one range delete for all blocks and
//!   one for all xattrs; rename is a handful of range moves.
//! * Writes are blind: patches and inserts, never a read of a block.
//! * Errors are [`FsError`]; [`FsError::errno`] is the one errno mapping.
//!
//! ```
//! use wodfs_device::MemDevice;
//! use wodfs_engine::Config;
//! use wodfs_fs::{Fs, KillPriv, Kind, NewNode};
//! use wodfs_schema::FsPath;
//!
//! let cfg = Config { node_bytes: 64 << 10, partition_bytes: 8 << 10,
//!     cache_bytes: 4 << 20, log_bytes: 1 << 20, ..Config::default() };
//! let fs = Fs::mkfs(Box::new(MemDevice::new(64 << 20)), cfg, 0, 0)?;
//! let root = FsPath::root();
//! fs.make(&root, b"hello", NewNode::new(Kind::File, 0o644))?;
//! let (_, loc) = fs.lookup(&root, b"hello")?;
//! fs.write(&loc, 0, b"hi there", KillPriv::Keep)?;
//! assert_eq!(fs.read(&loc, 3, 100)?, b"there");
//! # Ok::<(), wodfs_fs::FsError>(())
//! ```

#![warn(missing_docs)]

mod attr;
mod attr_cache;
mod back_pressure;
mod error;
mod fs;
mod fsck;
mod lazy_atime;
mod loc;
mod ops;
mod privs;
mod read_streams;

pub use attr::{Attr, Kind, Timespec, ATTR_VERSION, FLAG_LINKED};
pub use back_pressure::BackPressureWorker;
pub use error::{FsError, FsResult};
pub use fs::{Fs, FsOptions, ROOT_INO};
pub use fsck::FsckReport;
pub use loc::Loc;
pub use ops::data::{falloc, file_end, Carried, HeldBytes, Seek, BLOCK, FILE_BYTES_MAX};
pub use ops::dir::DirEntry;
pub use ops::namespace::NewNode;
pub use ops::rename::{RenameMode, Renamed};
pub use ops::setattr::{SetAttr, SetTime};
pub use ops::statfs::StatFs;
pub use ops::xattr::{XattrSet, XATTR_VALUE_BYTES_MAX};
pub use ops::Removed;
pub use privs::KillPriv;
pub use wodfs_schema::FsPath;
