//! Keys decode to what they encode; anything else is an error, never a
//! panic, and every accepted key is canonical.

use proptest::prelude::*;
use wodfs_schema::key_codec::{
    data_key, decode_key, inode_data_key, inode_meta_key, inode_xattr_key, meta_key, sys_key,
    xattr_key, DecodedKey, KEY_BYTES_MAX,
};
use wodfs_schema::{FsPath, NAME_BYTES_MAX, PATH_BYTES_MAX};

use crate::strategies::{name_up_to, path};

fn decoded_key() -> impl Strategy<Value = DecodedKey> {
    prop_oneof![
        path().prop_map(|path| DecodedKey::Meta { path }),
        (path(), name_up_to(12)).prop_map(|(path, name)| DecodedKey::Xattr { path, name }),
        (path(), any::<u64>()).prop_map(|(path, block)| DecodedKey::Data { path, block }),
        any::<u64>().prop_map(|ino| DecodedKey::InodeMeta { ino }),
        (any::<u64>(), name_up_to(12)).prop_map(|(ino, name)| DecodedKey::InodeXattr { ino, name }),
        (any::<u64>(), any::<u64>()).prop_map(|(ino, block)| DecodedKey::InodeData { ino, block }),
        name_up_to(12).prop_map(|name| DecodedKey::Sys { name }),
    ]
}

/// The key built by the public constructors, to check `encode` agrees.
fn construct(decoded: &DecodedKey) -> Vec<u8> {
    match decoded {
        DecodedKey::Meta { path } => meta_key(path),
        DecodedKey::Xattr { path, name } => xattr_key(path, name).unwrap(),
        DecodedKey::Data { path, block } => data_key(path, *block),
        DecodedKey::InodeMeta { ino } => inode_meta_key(*ino),
        DecodedKey::InodeXattr { ino, name } => inode_xattr_key(*ino, name).unwrap(),
        DecodedKey::InodeData { ino, block } => inode_data_key(*ino, *block),
        DecodedKey::Sys { name } => sys_key(name).unwrap(),
    }
}

/// Decoding must not panic, and what it accepts must re-encode to itself.
fn check_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(decoded) = decode_key(bytes) {
        prop_assert_eq!(decoded.encode(), bytes.to_vec());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_decode_round_trip(decoded in decoded_key()) {
        let key = construct(&decoded);
        prop_assert_eq!(decoded.encode(), key.clone());
        prop_assert_eq!(decode_key(&key), Ok(decoded));
        prop_assert!(key.len() <= KEY_BYTES_MAX);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        check_canonical(&bytes)?;
    }

    #[test]
    fn mutated_keys_never_panic(
        decoded in decoded_key(), at in any::<usize>(), byte in any::<u8>(), op in 0..3u8,
    ) {
        let mut key = construct(&decoded);
        let at = at % (key.len() + 1);
        match op {
            0 if at < key.len() => key[at] = byte,
            1 => key.insert(at, byte),
            _ if at < key.len() => { key.remove(at); }
            _ => key.push(byte),
        }
        check_canonical(&key)?;
    }
}

#[test]
fn longest_keys_fit_the_bound() {
    // Names made only of escaped bytes double in size.
    let name = vec![0x01; NAME_BYTES_MAX];
    let mut wide = FsPath::root();
    while let Ok(next) = wide.join(&name) {
        wide = next;
    }
    let mut deep = FsPath::root();
    while let Ok(next) = deep.join(b"\x01") {
        deep = next;
    }
    for path in [wide, deep] {
        assert!(path.len_bytes() > PATH_BYTES_MAX - NAME_BYTES_MAX - 1);
        let key = xattr_key(&path, &[b'x'; 255]).unwrap();
        assert!(
            key.len() <= KEY_BYTES_MAX,
            "{} > {KEY_BYTES_MAX}",
            key.len()
        );
        assert_eq!(decode_key(&key).unwrap().path(), Some(&path));
    }
}

#[test]
fn scratch_and_empty_sys_keys_are_rejected() {
    assert!(sys_key(b"").is_err());
    assert!(sys_key(b"\0x").is_err());
    assert!(decode_key(b"\x00").is_err());
    assert!(decode_key(b"\x00\x00\x10\x00").is_err());
    assert_eq!(
        decode_key(&sys_key(b"next_ino").unwrap()),
        Ok(DecodedKey::Sys {
            name: b"next_ino".to_vec()
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A listing's short cut agrees with decoding the whole key: the name
    /// of every child of a directory, and an error for anything else in
    /// or around its children's range (garbage after the prefix, a
    /// deeper descendant, a truncated key).
    #[test]
    fn child_name_agrees_with_decode_key(
        dir in path(), name in name_up_to(20), tail in proptest::collection::vec(any::<u8>(), 0..6),
    ) {
        use wodfs_schema::key_codec::{child_name, children_range, PathSpace};
        let children = children_range(PathSpace::Meta, &dir).start;
        let Ok(child) = dir.join(&name) else { return Ok(()) };
        let key = meta_key(&child);
        prop_assert_eq!(child_name(&children, &key), Ok(name.clone()));
        let mut other = key.clone();
        other.truncate(key.len() - 1);
        other.extend_from_slice(&tail);
        let want = match decode_key(&other) {
            Ok(DecodedKey::Meta { path }) if path.parent().as_ref() == Some(&dir) => {
                path.file_name().map(<[u8]>::to_vec)
            }
            _ => None,
        };
        prop_assert_eq!(child_name(&children, &other).ok(), want);
        // A grandchild's key lies in the range too but names no child.
        if let Ok(grandchild) = child.join(b"g") {
            prop_assert!(child_name(&children, &meta_key(&grandchild)).is_err());
        }
    }
}
