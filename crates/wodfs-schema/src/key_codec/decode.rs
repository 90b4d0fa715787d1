//! Decoding keys back to (space, path or inode, suffix), for `fsck`,
//! `readdir` and debugging tools.
//!
//! Keys read from disk are untrusted, so decoding checks everything and
//! returns [`KeyError`] rather than panicking. It is strict: every key it
//! accepts is exactly what [`DecodedKey::encode`] produces, so a key that
//! decodes is canonical and encode/decode round-trip both ways.

use super::escape::{escaped_len, unescape_name, SEPARATOR, TERMINATOR};
use super::path_key::entry_prefix;
use super::{validate_xattr_name, PathSpace, Space};
use crate::error::{KeyError, KeyErrorKind};
use crate::path::{validate_name, FsPath, PATH_BYTES_MAX};
use crate::SchemaError;

/// A key taken apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DecodedKey {
    /// A file-system-wide record.
    Sys {
        /// Record name.
        name: Vec<u8>,
    },
    /// Attributes of a path.
    Meta {
        /// The path.
        path: FsPath,
    },
    /// One xattr of a path.
    Xattr {
        /// The path.
        path: FsPath,
        /// The xattr name.
        name: Vec<u8>,
    },
    /// One block of the file at a path.
    Data {
        /// The path.
        path: FsPath,
        /// Block number.
        block: u64,
    },
    /// Attributes of a hard-linked inode.
    InodeMeta {
        /// Inode number.
        ino: u64,
    },
    /// One xattr of a hard-linked inode.
    InodeXattr {
        /// Inode number.
        ino: u64,
        /// The xattr name.
        name: Vec<u8>,
    },
    /// One block of a hard-linked inode.
    InodeData {
        /// Inode number.
        ino: u64,
        /// Block number.
        block: u64,
    },
}

impl DecodedKey {
    /// The key space this key lives in.
    pub fn space(&self) -> Space {
        match self {
            DecodedKey::Sys { .. } => Space::Sys,
            DecodedKey::Meta { .. } => Space::Meta,
            DecodedKey::Xattr { .. } => Space::Xattr,
            DecodedKey::Data { .. } => Space::Data,
            DecodedKey::InodeMeta { .. } => Space::InodeMeta,
            DecodedKey::InodeXattr { .. } => Space::InodeXattr,
            DecodedKey::InodeData { .. } => Space::InodeData,
        }
    }

    /// The path, for keys of the path-keyed spaces.
    pub fn path(&self) -> Option<&FsPath> {
        match self {
            DecodedKey::Meta { path }
            | DecodedKey::Xattr { path, .. }
            | DecodedKey::Data { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The key bytes. Names held here are trusted to be valid, as they are
    /// when they come from [`decode_key`].
    pub fn encode(&self) -> Vec<u8> {
        let mut key = match self {
            DecodedKey::Meta { path } => entry_prefix(PathSpace::Meta, path),
            DecodedKey::Xattr { path, .. } => entry_prefix(PathSpace::Xattr, path),
            DecodedKey::Data { path, .. } => entry_prefix(PathSpace::Data, path),
            DecodedKey::InodeMeta { ino }
            | DecodedKey::InodeXattr { ino, .. }
            | DecodedKey::InodeData { ino, .. } => {
                let mut key = vec![self.space().tag()];
                key.extend_from_slice(&ino.to_be_bytes());
                key
            }
            DecodedKey::Sys { .. } => vec![Space::Sys.tag()],
        };
        match self {
            DecodedKey::Sys { name }
            | DecodedKey::Xattr { name, .. }
            | DecodedKey::InodeXattr { name, .. } => key.extend_from_slice(name),
            DecodedKey::Data { block, .. } | DecodedKey::InodeData { block, .. } => {
                key.extend_from_slice(&block.to_be_bytes())
            }
            DecodedKey::Meta { .. } | DecodedKey::InodeMeta { .. } => {}
        }
        key
    }
}

fn error(offset: usize, kind: KeyErrorKind) -> KeyError {
    KeyError { offset, kind }
}

/// The name of the child whose metadata key is `key`, `key` being in
/// `children_range(PathSpace::Meta, dir)` whose start is `children`: the
/// key is `children`, the escaped name and a terminator. What a directory
/// listing needs of each key, without decoding the directory's path again
/// for every entry (`decode_key` of each listed key was 7 % of the request
/// thread under a cold `du`). As strict as [`decode_key`].
pub fn child_name(children: &[u8], key: &[u8]) -> Result<Vec<u8>, KeyError> {
    let Some(rest) = key.strip_prefix(children) else {
        return Err(error(0, KeyErrorKind::BadSuffix));
    };
    let at = children.len();
    let len = escaped_len(rest);
    match rest.get(len) {
        Some(&TERMINATOR) if len + 1 == rest.len() => {}
        Some(_) => return Err(error(at + len, KeyErrorKind::ExpectedSeparator)),
        None => return Err(error(at + len, KeyErrorKind::Truncated)),
    }
    let name = unescape_name(&rest[..len])
        .map_err(|offset| error(at + offset, KeyErrorKind::BadEscape))?;
    validate_name(&name).map_err(|e| error(at, KeyErrorKind::InvalidName(e)))?;
    Ok(name)
}

/// Decodes any wodfs key.
pub fn decode_key(key: &[u8]) -> Result<DecodedKey, KeyError> {
    let tag = *key.first().ok_or(error(0, KeyErrorKind::Empty))?;
    let space = Space::from_tag(tag).ok_or(error(0, KeyErrorKind::UnknownTag(tag)))?;
    match space {
        Space::Sys => {
            // Scratch keys (leading NUL) live only inside one atomic batch,
            // so finding one on disk means corruption.
            let name = &key[1..];
            match name.first() {
                None => Err(error(1, KeyErrorKind::InvalidName(SchemaError::EmptyName))),
                Some(0) => Err(error(1, KeyErrorKind::InvalidName(SchemaError::NulByte))),
                Some(_) => Ok(DecodedKey::Sys {
                    name: name.to_vec(),
                }),
            }
        }
        Space::Meta => {
            let (path, at) = decode_path(key, 1)?;
            expect_end(key, at)?;
            Ok(DecodedKey::Meta { path })
        }
        Space::Xattr => {
            let (path, at) = decode_path(key, 1)?;
            let name = decode_xattr_name(key, at)?;
            Ok(DecodedKey::Xattr { path, name })
        }
        Space::Data => {
            let (path, at) = decode_path(key, 1)?;
            let block = decode_u64(key, at)?;
            expect_end(key, at + 8)?;
            Ok(DecodedKey::Data { path, block })
        }
        Space::InodeMeta => {
            let ino = decode_u64(key, 1)?;
            expect_end(key, 9)?;
            Ok(DecodedKey::InodeMeta { ino })
        }
        Space::InodeXattr => {
            let ino = decode_u64(key, 1)?;
            let name = decode_xattr_name(key, 9)?;
            Ok(DecodedKey::InodeXattr { ino, name })
        }
        Space::InodeData => {
            let ino = decode_u64(key, 1)?;
            let block = decode_u64(key, 9)?;
            expect_end(key, 17)?;
            Ok(DecodedKey::InodeData { ino, block })
        }
    }
}

/// Decodes `E(P) 00` starting at `at`; returns the path and the offset just
/// past the terminator.
fn decode_path(key: &[u8], mut at: usize) -> Result<(FsPath, usize), KeyError> {
    let start = at;
    let mut posix = vec![b'/'];
    if key.get(at) == Some(&TERMINATOR) {
        return Ok((FsPath::root(), at + 1));
    }
    loop {
        match key.get(at) {
            Some(&SEPARATOR) => at += 1,
            Some(_) => return Err(error(at, KeyErrorKind::ExpectedSeparator)),
            None => return Err(error(at, KeyErrorKind::Truncated)),
        }
        let is_last = key.get(at) == Some(&SEPARATOR);
        if is_last {
            at += 1;
        }
        let len = escaped_len(&key[at..]);
        let name = unescape_name(&key[at..at + len])
            .map_err(|offset| error(at + offset, KeyErrorKind::BadEscape))?;
        validate_name(&name).map_err(|e| error(at, KeyErrorKind::InvalidName(e)))?;
        if posix.len() > 1 {
            posix.push(b'/');
        }
        posix.extend_from_slice(&name);
        if posix.len() > PATH_BYTES_MAX {
            let e = SchemaError::PathTooLong {
                path_bytes: posix.len(),
            };
            return Err(error(at, KeyErrorKind::InvalidName(e)));
        }
        at += len;
        if is_last {
            match key.get(at) {
                Some(&TERMINATOR) => break,
                Some(_) => return Err(error(at, KeyErrorKind::ExpectedSeparator)),
                None => return Err(error(at, KeyErrorKind::Truncated)),
            }
        }
    }
    let path = FsPath::parse(&posix).map_err(|e| error(start, KeyErrorKind::InvalidName(e)))?;
    Ok((path, at + 1))
}

fn decode_u64(key: &[u8], at: usize) -> Result<u64, KeyError> {
    let bytes = key
        .get(at..at + 8)
        .ok_or(error(key.len(), KeyErrorKind::Truncated))?;
    let mut be = [0u8; 8];
    be.copy_from_slice(bytes);
    Ok(u64::from_be_bytes(be))
}

fn decode_xattr_name(key: &[u8], at: usize) -> Result<Vec<u8>, KeyError> {
    let name = key.get(at..).unwrap_or_default();
    validate_xattr_name(name).map_err(|e| error(at, KeyErrorKind::InvalidName(e)))?;
    Ok(name.to_vec())
}

fn expect_end(key: &[u8], at: usize) -> Result<(), KeyError> {
    if key.len() != at {
        return Err(error(at, KeyErrorKind::BadSuffix));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{data_key, meta_key, xattr_key};
    use super::*;

    fn p(s: &[u8]) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    #[test]
    fn round_trips() {
        let path = p(b"/d\x01/\x02e/\xff");
        let keys = [
            meta_key(&path),
            meta_key(&FsPath::root()),
            data_key(&path, 77),
            xattr_key(&path, b"user.\x01").unwrap(),
        ];
        for key in keys {
            let decoded = decode_key(&key).unwrap();
            assert_eq!(decoded.encode(), key);
        }
    }

    #[test]
    fn malformed_keys_are_errors() {
        let cases: [(&[u8], KeyErrorKind); 9] = [
            (b"", KeyErrorKind::Empty),
            (b"\x7f", KeyErrorKind::UnknownTag(0x7f)),
            (b"\x10", KeyErrorKind::Truncated),
            (b"\x10\x01a", KeyErrorKind::Truncated),
            (b"\x10\x01a\x00", KeyErrorKind::ExpectedSeparator),
            (b"\x10\x01\x01a\x02\x05\x00", KeyErrorKind::BadEscape),
            (b"\x10\x00\x00", KeyErrorKind::BadSuffix),
            (b"\x12\x01\x01a\x00\x00", KeyErrorKind::Truncated),
            (
                b"\x11\x01\x01a\x00",
                KeyErrorKind::InvalidName(SchemaError::XattrNameInvalid),
            ),
        ];
        for (key, kind) in cases {
            assert_eq!(decode_key(key).map_err(|e| e.kind), Err(kind), "{key:?}");
        }
        let slash = decode_key(b"\x10\x01\x01a/b\x00").unwrap_err();
        assert_eq!(
            slash.kind,
            KeyErrorKind::InvalidName(SchemaError::SlashInName)
        );
        let dot = decode_key(b"\x10\x01..\x01\x01a\x00").unwrap_err();
        assert_eq!(dot.kind, KeyErrorKind::InvalidName(SchemaError::DotName));
    }
}
