//! Validated absolute paths and the length limits wodfs enforces.
//!
//! Keys are full paths, so a name or path must pass these rules before it is
//! encoded. Limits are measured on the POSIX form (`/a/b`), never on the
//! encoded key, so users meet the same numbers as on ext4. Because a rename
//! lengthens every descendant's key, wodfs (unlike ext4) must also refuse a
//! directory rename that would push a descendant past [`PATH_BYTES_MAX`]:
//! see [`check_renamed_descendant`].

use std::fmt;

use crate::error::SchemaError;

/// Longest name in bytes (Linux `NAME_MAX`).
pub const NAME_BYTES_MAX: usize = 255;

/// Longest absolute path in bytes, without a terminating NUL.
pub const PATH_BYTES_MAX: usize = 4096;

/// An absolute path: `/`, or `/` followed by valid names joined by `/`.
///
/// Invariants: no empty, `.` or `..` components, no NUL, every name at most
/// [`NAME_BYTES_MAX`] bytes and the whole at most [`PATH_BYTES_MAX`] bytes.
/// `Ord` is plain byte order of the POSIX form, which is *not* key order
/// (see [`crate::key_codec`]).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FsPath {
    bytes: Vec<u8>,
}

/// Checks that `name` can be one component of a path.
pub fn validate_name(name: &[u8]) -> Result<(), SchemaError> {
    if name.is_empty() {
        return Err(SchemaError::EmptyName);
    }
    if name.contains(&b'/') {
        return Err(SchemaError::SlashInName);
    }
    if name.contains(&0) {
        return Err(SchemaError::NulByte);
    }
    if name == b"." || name == b".." {
        return Err(SchemaError::DotName);
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(SchemaError::NameTooLong {
            name_bytes: name.len(),
        });
    }
    Ok(())
}

fn check_path_len(path_bytes: usize) -> Result<(), SchemaError> {
    if path_bytes > PATH_BYTES_MAX {
        return Err(SchemaError::PathTooLong { path_bytes });
    }
    Ok(())
}

impl FsPath {
    /// The root directory, `/`.
    pub fn root() -> FsPath {
        FsPath {
            bytes: b"/".to_vec(),
        }
    }

    /// Parses an absolute path. It is strict: `//`, a trailing `/`, `.` and
    /// `..` are rejected rather than normalized, because the file system
    /// only ever builds paths from the root and a name.
    pub fn parse(bytes: impl AsRef<[u8]>) -> Result<FsPath, SchemaError> {
        let bytes = bytes.as_ref();
        if bytes.first() != Some(&b'/') {
            return Err(SchemaError::NotAbsolute);
        }
        // Linux checks the whole length before walking, so do we.
        check_path_len(bytes.len())?;
        if bytes.len() > 1 {
            for name in bytes[1..].split(|&b| b == b'/') {
                validate_name(name)?;
            }
        }
        Ok(FsPath {
            bytes: bytes.to_vec(),
        })
    }

    /// Builds a path from names, validating each one; fails as joining
    /// them one by one would, without copying the path at every step (the
    /// FUSE adapter builds the path of a file for each request it gets:
    /// 3.8 % of the request thread in an untar, joining).
    pub fn from_names<N: AsRef<[u8]>>(
        names: impl IntoIterator<Item = N>,
    ) -> Result<FsPath, SchemaError> {
        let mut bytes = Vec::with_capacity(64);
        for name in names {
            let name = name.as_ref();
            validate_name(name)?;
            bytes.push(b'/');
            bytes.extend_from_slice(name);
            check_path_len(bytes.len())?;
        }
        if bytes.is_empty() {
            return Ok(FsPath::root());
        }
        Ok(FsPath { bytes })
    }

    /// The POSIX bytes, e.g. `b"/a/b"`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length of the POSIX form in bytes; this is what the limits measure.
    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// True for `/`.
    pub fn is_root(&self) -> bool {
        self.bytes.len() == 1
    }

    /// Number of components; 0 for the root.
    pub fn depth(&self) -> usize {
        self.names().count()
    }

    /// The components from the root down; empty for the root.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let rest: &[u8] = if self.is_root() {
            &[]
        } else {
            &self.bytes[1..]
        };
        rest.split(|&b| b == b'/').filter(|name| !name.is_empty())
    }

    /// The last component; `None` for the root.
    pub fn file_name(&self) -> Option<&[u8]> {
        if self.is_root() {
            return None;
        }
        let slash = self.last_slash();
        Some(&self.bytes[slash + 1..])
    }

    /// The parent directory; `None` for the root.
    pub fn parent(&self) -> Option<FsPath> {
        if self.is_root() {
            return None;
        }
        let slash = self.last_slash();
        if slash == 0 {
            return Some(FsPath::root());
        }
        Some(FsPath {
            bytes: self.bytes[..slash].to_vec(),
        })
    }

    /// `self/name`, checking the name and the resulting length.
    pub fn join(&self, name: &[u8]) -> Result<FsPath, SchemaError> {
        validate_name(name)?;
        let mut bytes = Vec::with_capacity(self.bytes.len() + 1 + name.len());
        if !self.is_root() {
            bytes.extend_from_slice(&self.bytes);
        }
        bytes.push(b'/');
        bytes.extend_from_slice(name);
        check_path_len(bytes.len())?;
        Ok(FsPath { bytes })
    }

    /// True if `other` lies strictly below `self` (`/a` is an ancestor of
    /// `/a/b` but not of `/ab` nor of `/a` itself).
    pub fn is_ancestor_of(&self, other: &FsPath) -> bool {
        if self.is_root() {
            return !other.is_root();
        }
        other.bytes.len() > self.bytes.len()
            && other.bytes.starts_with(&self.bytes)
            && other.bytes[self.bytes.len()] == b'/'
    }

    /// True if `other` is `self` or lies below it.
    pub fn contains(&self, other: &FsPath) -> bool {
        self == other || self.is_ancestor_of(other)
    }

    /// Replaces the leading `old` of `self` with `new`: what a rename of
    /// `old` to `new` does to this path. Fails if `self` is not inside `old`
    /// or the result is too long.
    pub fn rebase(&self, old: &FsPath, new: &FsPath) -> Result<FsPath, SchemaError> {
        if !old.contains(self) {
            return Err(SchemaError::NotInSubtree);
        }
        // `rest` is empty or starts with `/`, so it appends to any prefix.
        let rest: &[u8] = match (old.is_root(), self.is_root()) {
            (_, true) => &[],
            (true, false) => &self.bytes,
            (false, false) => &self.bytes[old.bytes.len()..],
        };
        let mut bytes = Vec::with_capacity(new.bytes.len() + rest.len());
        if rest.is_empty() || !new.is_root() {
            bytes.extend_from_slice(&new.bytes);
        }
        bytes.extend_from_slice(rest);
        check_path_len(bytes.len())?;
        Ok(FsPath { bytes })
    }

    fn last_slash(&self) -> usize {
        // Non-root paths always start with `/`, so a slash exists.
        self.bytes.iter().rposition(|&b| b == b'/').unwrap_or(0)
    }
}

impl AsRef<[u8]> for FsPath {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Display for FsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes.escape_ascii())
    }
}

impl fmt::Debug for FsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FsPath(\"{}\")", self.bytes.escape_ascii())
    }
}

/// Length of a descendant's path after renaming `old` to `new`, given its
/// length before. The descendant must lie inside `old`.
pub fn renamed_len(old: &FsPath, new: &FsPath, descendant_path_bytes: usize) -> usize {
    // The root cannot be renamed, so both prefixes are proper names and the
    // rest of the descendant's path (starting at its `/`) is kept verbatim.
    descendant_path_bytes.saturating_sub(old.len_bytes()) + new.len_bytes()
}

/// Checks that a descendant of `old` whose path is `descendant_path_bytes`
/// long still fits [`PATH_BYTES_MAX`] once `old` is renamed to `new`.
///
/// The file system calls this with the longest descendant path of the
/// directory being renamed; a failure is reported as `ENAMETOOLONG`.
pub fn check_renamed_descendant(
    old: &FsPath,
    new: &FsPath,
    descendant_path_bytes: usize,
) -> Result<(), SchemaError> {
    check_path_len(renamed_len(old, new, descendant_path_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    #[test]
    fn parse_rejects_non_canonical_paths() {
        assert_eq!(FsPath::parse("a/b"), Err(SchemaError::NotAbsolute));
        assert_eq!(FsPath::parse(""), Err(SchemaError::NotAbsolute));
        assert_eq!(FsPath::parse("/a//b"), Err(SchemaError::EmptyName));
        assert_eq!(FsPath::parse("/a/"), Err(SchemaError::EmptyName));
        assert_eq!(FsPath::parse("/a/./b"), Err(SchemaError::DotName));
        assert_eq!(FsPath::parse("/.."), Err(SchemaError::DotName));
        assert_eq!(FsPath::parse(b"/a\0"), Err(SchemaError::NulByte));
        assert!(FsPath::parse(b"/\x01\x02\xff/...").is_ok());
    }

    #[test]
    fn limits_are_inclusive() {
        let name = vec![b'n'; NAME_BYTES_MAX];
        assert!(FsPath::root().join(&name).is_ok());
        let long = vec![b'n'; NAME_BYTES_MAX + 1];
        assert_eq!(
            FsPath::root().join(&long),
            Err(SchemaError::NameTooLong { name_bytes: 256 })
        );
        let mut path = b"/".to_vec();
        while path.len() + 2 <= PATH_BYTES_MAX {
            path.extend_from_slice(b"x/");
        }
        path.push(b'y');
        assert_eq!(path.len(), PATH_BYTES_MAX);
        let fits = FsPath::parse(&path).unwrap();
        let err = fits.parent().unwrap().join(b"yz").unwrap_err();
        assert_eq!(
            err,
            SchemaError::PathTooLong {
                path_bytes: PATH_BYTES_MAX + 1
            }
        );
        assert!(err.is_name_too_long());
    }

    #[test]
    fn parent_name_and_ancestry() {
        assert_eq!(p("/a/b").parent(), Some(p("/a")));
        assert_eq!(p("/a").parent(), Some(FsPath::root()));
        assert_eq!(FsPath::root().parent(), None);
        assert_eq!(p("/a/bc").file_name(), Some(&b"bc"[..]));
        assert!(p("/a").is_ancestor_of(&p("/a/b")));
        assert!(!p("/a").is_ancestor_of(&p("/ab")));
        assert!(!p("/a").is_ancestor_of(&p("/a")));
        assert!(FsPath::root().is_ancestor_of(&p("/a")));
        assert_eq!(p("/a/b/c").depth(), 3);
        assert_eq!(FsPath::root().depth(), 0);
        let xy = p("/x/y");
        let names: Vec<&[u8]> = xy.names().collect();
        assert_eq!(names, vec![&b"x"[..], &b"y"[..]]);
        assert_eq!(FsPath::from_names(["x", "y"]).unwrap(), p("/x/y"));
    }

    proptest::proptest! {
        /// Building a path in one pass gives what joining its names one by
        /// one gives, errors included: names with a slash, a NUL, `.`, too
        /// long, and paths past the length limit.
        #[test]
        fn from_names_is_joining_one_by_one(
            names in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(
                        proptest::sample::select(vec![b'a', b'/', 0, b'.']), 0..4),
                    proptest::strategy::Strategy::prop_map(1usize..300, |n| vec![b'n'; n]),
                ],
                0..24,
            )
        ) {
            let joined = names
                .iter()
                .try_fold(FsPath::root(), |path, name| path.join(name));
            proptest::prop_assert_eq!(FsPath::from_names(&names), joined);
        }
    }

    #[test]
    fn rebase_moves_the_prefix() {
        assert_eq!(p("/a/b/c").rebase(&p("/a/b"), &p("/z")), Ok(p("/z/c")));
        assert_eq!(p("/a/b").rebase(&p("/a/b"), &p("/z/y")), Ok(p("/z/y")));
        assert_eq!(
            p("/a/bc").rebase(&p("/a/b"), &p("/z")),
            Err(SchemaError::NotInSubtree)
        );
    }

    #[test]
    fn renamed_descendant_limit() {
        let old = p("/a");
        let new = FsPath::root().join(&[b'n'; 200]).unwrap();
        assert_eq!(renamed_len(&old, &new, 10), 10 - 2 + 201);
        assert!(check_renamed_descendant(&old, &new, PATH_BYTES_MAX - 199).is_ok());
        assert_eq!(
            check_renamed_descendant(&old, &new, PATH_BYTES_MAX - 198),
            Err(SchemaError::PathTooLong {
                path_bytes: PATH_BYTES_MAX + 1
            })
        );
    }
}
