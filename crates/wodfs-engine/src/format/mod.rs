//! On-disk encodings. Every decoder takes untrusted bytes and returns an
//! error (never panics) on anything malformed; the byte layouts are in
//! `docs/format.md`.

pub(crate) mod bytes;
pub(crate) mod dict;
pub(crate) mod entry_index;
pub(crate) mod frozen;
pub(crate) mod node;
pub(crate) mod partition;
pub(crate) mod raw_bytes;
pub(crate) mod segments;
pub(crate) mod superblock;
pub(crate) mod table;

/// The format version this build writes and reads. Bump on any layout
/// change and log it in `docs/format.md`.
pub const FORMAT_VERSION: u32 = 4;

/// crc32c of `data`.
pub(crate) fn checksum(data: &[u8]) -> u32 {
    crate::crc::crc32c(data)
}
