//! Errors of the schema layer.
//!
//! [`SchemaError`] rejects caller input (paths, names, rename requests);
//! [`KeyError`] rejects key bytes read back from disk, which are untrusted.
//! Neither maps to errno here: the file-system layer does that in one place
//! (the model's [`crate::model::Errno`] shows the intended mapping).

use std::fmt;

/// A path, name or request that the schema cannot encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaError {
    /// The path does not start with `/`.
    NotAbsolute,
    /// A name (or a path component) is empty, e.g. `//` or a trailing `/`.
    EmptyName,
    /// A name is `.` or `..`; the schema stores only resolved paths.
    DotName,
    /// A name contains `/`.
    SlashInName,
    /// A name or path contains a NUL byte.
    NulByte,
    /// A name is longer than [`crate::NAME_BYTES_MAX`] (ENAMETOOLONG).
    NameTooLong {
        /// Length of the offending name in bytes.
        name_bytes: usize,
    },
    /// A path is longer than [`crate::PATH_BYTES_MAX`] (ENAMETOOLONG).
    PathTooLong {
        /// Length of the offending POSIX path in bytes.
        path_bytes: usize,
    },
    /// An xattr name is empty or contains NUL.
    XattrNameInvalid,
    /// An xattr name is longer than [`crate::key_codec::XATTR_NAME_BYTES_MAX`].
    XattrNameTooLong {
        /// Length of the offending xattr name in bytes.
        name_bytes: usize,
    },
    /// The root has no name and no parent entry, so it cannot be renamed.
    RootNotNamed,
    /// One rename path lies inside the other, so the moved key ranges would
    /// overlap the destination ranges.
    RenameOverlap,
    /// A path was rebased onto a prefix it does not start with.
    NotInSubtree,
}

impl SchemaError {
    /// True for the errors a POSIX system reports as `ENAMETOOLONG`.
    pub fn is_name_too_long(&self) -> bool {
        matches!(
            self,
            SchemaError::NameTooLong { .. } | SchemaError::PathTooLong { .. }
        )
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::NotAbsolute => write!(f, "path is not absolute"),
            SchemaError::EmptyName => write!(f, "empty name or path component"),
            SchemaError::DotName => write!(f, "name is `.` or `..`"),
            SchemaError::SlashInName => write!(f, "name contains `/`"),
            SchemaError::NulByte => write!(f, "name or path contains NUL"),
            SchemaError::NameTooLong { name_bytes } => {
                write!(f, "name of {name_bytes} bytes is too long")
            }
            SchemaError::PathTooLong { path_bytes } => {
                write!(f, "path of {path_bytes} bytes is too long")
            }
            SchemaError::XattrNameInvalid => write!(f, "xattr name is empty or contains NUL"),
            SchemaError::XattrNameTooLong { name_bytes } => {
                write!(f, "xattr name of {name_bytes} bytes is too long")
            }
            SchemaError::RootNotNamed => write!(f, "the root directory has no name"),
            SchemaError::RenameOverlap => {
                write!(f, "rename source and destination contain each other")
            }
            SchemaError::NotInSubtree => write!(f, "path is not inside the given subtree"),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Why a key read back from the tree is not a well-formed wodfs key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyErrorKind {
    /// The key has no bytes at all.
    Empty,
    /// The leading tag byte names no key space.
    UnknownTag(u8),
    /// The key ends inside the path or its suffix.
    Truncated,
    /// A separator (`0x01`) or terminator (`0x00`) was expected here.
    ExpectedSeparator,
    /// An escape byte (`0x02`) is not followed by `0x02` or `0x03`.
    BadEscape,
    /// A decoded name, xattr name or path breaks the naming rules.
    InvalidName(SchemaError),
    /// The suffix after the path has the wrong length or content.
    BadSuffix,
}

/// A malformed key, with the byte offset where decoding gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyError {
    /// Offset into the key (including the tag byte) of the problem.
    pub offset: usize,
    /// What is wrong there.
    pub kind: KeyErrorKind,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed key at byte {}: ", self.offset)?;
        match self.kind {
            KeyErrorKind::Empty => write!(f, "empty key"),
            KeyErrorKind::UnknownTag(tag) => write!(f, "unknown tag {tag:#04x}"),
            KeyErrorKind::Truncated => write!(f, "key ends early"),
            KeyErrorKind::ExpectedSeparator => write!(f, "expected a separator"),
            KeyErrorKind::BadEscape => write!(f, "bad escape sequence"),
            KeyErrorKind::InvalidName(e) => write!(f, "{e}"),
            KeyErrorKind::BadSuffix => write!(f, "bad suffix after the path"),
        }
    }
}

impl std::error::Error for KeyError {}
