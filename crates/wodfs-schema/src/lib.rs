//! The wodfs file-system schema: how a POSIX namespace becomes Bε-tree keys.
//!
//! This crate has no dependency on the engine. It holds:
//!
//! * [`path`]: validated absolute paths and the name/path length limits;
//! * [`key_codec`]: the byte encoding of every key the file system stores
//!   (metadata, xattrs and data, keyed by full path, plus a path-independent
//!   inode space for hard-linked files), the key ranges the file system
//!   queries and deletes, and the prefixes a rename moves;
//! * [`model`]: an in-memory POSIX namespace that tests compare the real
//!   file system against.
//!
//! Invariant the rest of the system builds on: every directory's contents
//! (all descendants) are one contiguous key range per key space, its direct
//! children come first in that range, and names may hold every byte except
//! `/` and NUL.

#![warn(missing_docs)]

pub mod error;
pub mod key_codec;
pub mod model;
pub mod path;

pub use error::{KeyError, KeyErrorKind, SchemaError};
pub use path::{FsPath, NAME_BYTES_MAX, PATH_BYTES_MAX};
