//! The prefix moves that rename, exchange or hard-link a path.
//!
//! The engine offers "range move": every key starting with `from` gets
//! `to` in its place, the rest of the key unchanged. A path's own keys
//! (`T E(P) 00 …`) and its descendants' keys (`T D(P) 01 …`) have different
//! prefixes, because children sort before grandchildren and so the subtree
//! is split around the siblings. A rename is therefore two moves per path
//! space; for a file or an empty directory the second moves nothing.
//!
//! Moves of one operation must be applied in order, in one atomic batch.

use super::path_key::{descendants_prefix, entry_prefix};
use super::{PathSpace, Space};
use crate::error::SchemaError;
use crate::path::FsPath;

/// One range move: replace the leading `from` of every key with `to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrefixMove {
    /// Prefix of the keys that move.
    pub from: Vec<u8>,
    /// Prefix they get instead.
    pub to: Vec<u8>,
}

/// The two moves that rename `old` to `new` in `space`: its own keys, then
/// its descendants' keys.
///
/// Every key with either `from` prefix belongs to `old` or a descendant of
/// it, and every such key has one of them. The `from` prefixes are disjoint
/// from the `to` prefixes (neither is a prefix of the other) unless
/// `old == new`, in which case the moves are identities and the file system
/// should skip the rename. The destination must be empty: replacing an
/// existing `new` means deleting its keys first, in the same batch.
///
/// Fails if either path is the root, or if one path contains the other
/// (POSIX `EINVAL` / `ENOTEMPTY`). Descendants that would grow past the path
/// limit are the caller's check: [`crate::path::check_renamed_descendant`].
pub fn rename_moves(
    space: PathSpace,
    old: &FsPath,
    new: &FsPath,
) -> Result<[PrefixMove; 2], SchemaError> {
    if old.is_root() || new.is_root() {
        return Err(SchemaError::RootNotNamed);
    }
    if old.is_ancestor_of(new) || new.is_ancestor_of(old) {
        return Err(SchemaError::RenameOverlap);
    }
    Ok([
        PrefixMove {
            from: entry_prefix(space, old),
            to: entry_prefix(space, new),
        },
        PrefixMove {
            from: descendants_prefix(space, old),
            to: descendants_prefix(space, new),
        },
    ])
}

/// The six moves that rename `old` to `new` across every path space.
pub fn rename_moves_all(old: &FsPath, new: &FsPath) -> Result<Vec<PrefixMove>, SchemaError> {
    let mut moves = Vec::with_capacity(2 * PathSpace::ALL.len());
    for space in PathSpace::ALL {
        moves.extend(rename_moves(space, old, new)?);
    }
    Ok(moves)
}

/// The three moves that rename a non-directory `old` to `new`: its own
/// keys in every path space. Nothing but a directory has descendants, so
/// the descendant moves of [`rename_moves_all`] would each look through an
/// empty range (a copy-based range move scans before it knows).
pub fn file_rename_moves(old: &FsPath, new: &FsPath) -> Result<Vec<PrefixMove>, SchemaError> {
    let mut moves = Vec::with_capacity(PathSpace::ALL.len());
    for space in PathSpace::ALL {
        let [own, _descendants] = rename_moves(space, old, new)?;
        moves.push(own);
    }
    Ok(moves)
}

/// Scratch prefix `00 00 tag part` that holds one side of an exchange
/// while the other side moves; `part` is 0 for own keys, 1 for descendants.
/// Sys names never start with NUL, so nothing else lives there.
fn scratch_prefix(space: PathSpace, part: u8) -> Vec<u8> {
    vec![Space::Sys.tag(), 0x00, space.space().tag(), part]
}

/// The moves, in order, that swap the keys of `a` and `b` in every path
/// space (`RENAME_EXCHANGE`): `a` to a scratch prefix, `b` to `a`, scratch
/// to `b`. Same preconditions as [`rename_moves`]; for `a == b` the result
/// is an identity and the file system should skip it.
pub fn exchange_moves(a: &FsPath, b: &FsPath) -> Result<Vec<PrefixMove>, SchemaError> {
    let mut moves = Vec::with_capacity(6 * PathSpace::ALL.len());
    for space in PathSpace::ALL {
        let a_to_b = rename_moves(space, a, b)?;
        let scratch = [scratch_prefix(space, 0), scratch_prefix(space, 1)];
        for (part, step) in a_to_b.iter().enumerate() {
            moves.push(PrefixMove {
                from: step.from.clone(),
                to: scratch[part].clone(),
            });
        }
        for step in &a_to_b {
            moves.push(PrefixMove {
                from: step.to.clone(),
                to: step.from.clone(),
            });
        }
        for (part, step) in a_to_b.into_iter().enumerate() {
            moves.push(PrefixMove {
                from: scratch[part].clone(),
                to: step.to,
            });
        }
    }
    Ok(moves)
}

/// The moves that take a file's xattrs and blocks out of the path spaces
/// into the inode spaces under `ino`, for when it gets a second name. Keys
/// keep their suffix (xattr name, big-endian block), so a prefix move is
/// exact. The metadata key stays (it then points at the inode), and the
/// inode's attributes are written by the caller.
pub fn hardlink_moves(path: &FsPath, ino: u64) -> [PrefixMove; 2] {
    let inode_prefix = |space: Space| {
        let mut prefix = vec![space.tag()];
        prefix.extend_from_slice(&ino.to_be_bytes());
        prefix
    };
    [
        PrefixMove {
            from: entry_prefix(PathSpace::Xattr, path),
            to: inode_prefix(Space::InodeXattr),
        },
        PrefixMove {
            from: entry_prefix(PathSpace::Data, path),
            to: inode_prefix(Space::InodeData),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::super::{data_key, meta_key};
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    fn moved(moves: &[PrefixMove], key: &[u8]) -> Option<Vec<u8>> {
        moves.iter().find(|m| key.starts_with(&m.from)).map(|m| {
            let mut out = m.to.clone();
            out.extend_from_slice(&key[m.from.len()..]);
            out
        })
    }

    #[test]
    fn moving_a_directory_moves_exactly_its_subtree() {
        let moves = rename_moves_all(&p("/a/b"), &p("/z")).unwrap();
        assert_eq!(
            moved(&moves, &meta_key(&p("/a/b"))),
            Some(meta_key(&p("/z")))
        );
        assert_eq!(
            moved(&moves, &meta_key(&p("/a/b/c/d"))),
            Some(meta_key(&p("/z/c/d")))
        );
        assert_eq!(
            moved(&moves, &data_key(&p("/a/b/c"), 9)),
            Some(data_key(&p("/z/c"), 9))
        );
        for other in ["/a/bc", "/a/b\x01", "/a", "/a/a", "/b", "/a/bc/d"] {
            assert_eq!(moved(&moves, &meta_key(&p(other))), None, "{other}");
            assert_eq!(moved(&moves, &data_key(&p(other), 0)), None, "{other}");
        }
    }

    #[test]
    fn a_file_rename_moves_its_own_keys_in_every_space() {
        let moves = file_rename_moves(&p("/a/f"), &p("/z")).unwrap();
        assert_eq!(moves.len(), 3);
        assert_eq!(
            moved(&moves, &meta_key(&p("/a/f"))),
            Some(meta_key(&p("/z")))
        );
        assert_eq!(
            moved(&moves, &data_key(&p("/a/f"), 3)),
            Some(data_key(&p("/z"), 3))
        );
        let all = rename_moves_all(&p("/a/f"), &p("/z")).unwrap();
        assert!(moves.iter().all(|m| all.contains(m)));
    }

    #[test]
    fn overlapping_renames_are_refused() {
        assert_eq!(
            rename_moves(PathSpace::Meta, &p("/a"), &p("/a/b")),
            Err(SchemaError::RenameOverlap)
        );
        assert_eq!(
            rename_moves(PathSpace::Meta, &p("/a/b"), &p("/a")),
            Err(SchemaError::RenameOverlap)
        );
        assert_eq!(
            rename_moves(PathSpace::Data, &FsPath::root(), &p("/a")),
            Err(SchemaError::RootNotNamed)
        );
    }
}
