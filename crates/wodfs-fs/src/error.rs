//! The file system's error type and its mapping to errno.
//!
//! Every failure of a file-system operation is an [`FsError`]; the FUSE
//! adapter and the tools turn it into an errno through [`FsError::errno`],
//! the only place where engine and schema errors meet POSIX numbers.

use wodfs_schema::model::Errno as ModelErrno;
use wodfs_schema::SchemaError;

/// Result of a file-system operation.
pub type FsResult<T> = Result<T, FsError>;

/// Why a file-system operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A POSIX condition (no such file, not empty, …), as its errno.
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Posix(i32),
    /// The engine failed (I/O, corruption, no space, poisoned store).
    #[error("engine: {0}")]
    Engine(#[from] wodfs_engine::Error),
    /// A stored record could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The image holds an engine tree but no wodfs file system.
    #[error("not a wodfs file system: {0}")]
    NotFs(String),
}

impl FsError {
    /// The errno this error is reported as.
    pub fn errno(&self) -> i32 {
        use wodfs_engine::Error as E;
        match self {
            FsError::Posix(code) => *code,
            FsError::Engine(E::NoSpace { .. }) => libc::ENOSPC,
            FsError::Engine(E::KeyTooLarge { .. }) => libc::ENAMETOOLONG,
            FsError::Engine(E::ValueTooLarge { .. }) => libc::E2BIG,
            FsError::Engine(E::Poisoned(_)) => libc::EROFS,
            FsError::Engine(_) | FsError::Corrupt(_) | FsError::NotFs(_) => libc::EIO,
        }
    }
}

impl From<SchemaError> for FsError {
    fn from(e: SchemaError) -> Self {
        FsError::Posix(ModelErrno::from(e).code())
    }
}

/// Shorthand for a POSIX error.
pub(crate) fn err<T>(code: i32) -> FsResult<T> {
    Err(FsError::Posix(code))
}
