//! Keys of file-system-wide records (format version, inode counter, …).

use super::Space;
use crate::error::SchemaError;

/// The key of a file-system-wide record, e.g. `sys_key(b"next_ino")`.
///
/// Names starting with NUL are reserved for the scratch prefixes of
/// [`super::exchange_moves`], so they and the empty name are refused.
pub fn sys_key(name: &[u8]) -> Result<Vec<u8>, SchemaError> {
    match name.first() {
        None => return Err(SchemaError::EmptyName),
        Some(0) => return Err(SchemaError::NulByte),
        Some(_) => {}
    }
    let mut key = Vec::with_capacity(1 + name.len());
    key.push(Space::Sys.tag());
    key.extend_from_slice(name);
    Ok(key)
}
