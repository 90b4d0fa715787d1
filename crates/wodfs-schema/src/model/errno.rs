//! Errno-like errors returned by the namespace model.
//!
//! The model stands for a POSIX file system, so its errors are the errno
//! values Linux returns for the same request. The discriminants are the
//! Linux (generic/x86-64) numbers, so an exerciser can compare them with
//! `std::io::Error::raw_os_error` of the real call.

use std::fmt;

use crate::error::SchemaError;

/// A Linux errno value.
// Upper-case names match errno(3), so test failures read like strace.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum Errno {
    /// Operation not permitted (hard link to a directory, `user.` xattr on
    /// a symlink).
    EPERM = 1,
    /// No such file or directory.
    ENOENT = 2,
    /// Xattr value too large.
    E2BIG = 7,
    /// The root cannot be renamed or removed.
    EBUSY = 16,
    /// File exists.
    EEXIST = 17,
    /// A path component, or a rename's other side, is not a directory.
    ENOTDIR = 20,
    /// Is a directory.
    EISDIR = 21,
    /// Invalid argument (rename of a directory into its own subtree,
    /// `readlink` of a non-symlink, malformed model path).
    EINVAL = 22,
    /// File would grow past the largest offset.
    EFBIG = 27,
    /// Xattr name empty or too long.
    ERANGE = 34,
    /// Name or path too long.
    ENAMETOOLONG = 36,
    /// Directory not empty.
    ENOTEMPTY = 39,
    /// A symlink was met where the model would have to follow it.
    ELOOP = 40,
    /// No such xattr.
    ENODATA = 61,
}

impl Errno {
    /// The numeric errno.
    pub fn code(self) -> i32 {
        self as i32
    }
}

impl From<SchemaError> for Errno {
    fn from(error: SchemaError) -> Errno {
        match error {
            SchemaError::NameTooLong { .. } | SchemaError::PathTooLong { .. } => {
                Errno::ENAMETOOLONG
            }
            SchemaError::XattrNameInvalid | SchemaError::XattrNameTooLong { .. } => Errno::ERANGE,
            SchemaError::RootNotNamed => Errno::EBUSY,
            SchemaError::NotAbsolute
            | SchemaError::EmptyName
            | SchemaError::DotName
            | SchemaError::SlashInName
            | SchemaError::NulByte
            | SchemaError::RenameOverlap
            | SchemaError::NotInSubtree => Errno::EINVAL,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} ({})", self.code())
    }
}

impl std::error::Error for Errno {}
