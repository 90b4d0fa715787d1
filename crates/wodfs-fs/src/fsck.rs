//! Namespace checks over a whole image, for `wodfs fsck`.
//!
//! One scan of every key, in key order, checks: every key decodes; every
//! attribute record decodes; every path's parent exists and is a
//! directory; every data and xattr key belongs to a path-keyed file (data
//! only to regular files); every inode-space key belongs to an inode
//! record; an inode's link count equals the number of names pointing at it
//! (0 only for an orphan marker that the next mount removes); a directory's
//! link count is 2 plus its subdirectories; no data block starts at or past
//! its file's size.

use std::collections::{BTreeMap, HashMap, HashSet};

use wodfs_schema::key_codec::{decode_key, DecodedKey};
use wodfs_schema::FsPath;

use crate::attr::{Attr, Kind};
use crate::error::FsResult;
use crate::fs::{orphan_prefix, Fs};
use crate::loc::Loc;

/// What fsck found.
#[derive(Debug, Default, Clone)]
pub struct FsckReport {
    /// Problems, one line each.
    pub errors: Vec<String>,
    /// Directories seen.
    pub dirs: u64,
    /// Non-directories seen (names, not inodes).
    pub files: u64,
    /// Data blocks seen.
    pub blocks: u64,
    /// Orphans waiting for removal at the next mount.
    pub orphans: u64,
}

impl Fs {
    /// Checks the namespace (see the module documentation). Reads every
    /// key once; memory grows with the number of directories and links.
    pub fn fsck(&self) -> FsResult<FsckReport> {
        self.fsck_with_progress(&mut |_| {})
    }

    /// [`Fs::fsck`], calling `progress` with the number of keys checked so
    /// far every 65,536 keys.
    pub fn fsck_with_progress(&self, progress: &mut dyn FnMut(u64)) -> FsResult<FsckReport> {
        let mut r = FsckReport::default();
        // Path metadata, by path: (kind, size, nlink, linked).
        let mut paths: HashMap<FsPath, (Kind, u64, u32, bool)> = HashMap::new();
        let mut subdirs: HashMap<FsPath, u32> = HashMap::new();
        let mut pointers: BTreeMap<u64, u32> = BTreeMap::new();
        let mut inodes: BTreeMap<u64, Attr> = BTreeMap::new();
        let mut orphans: HashSet<u64> = HashSet::new();
        let orphan_pre = orphan_prefix();
        let mut keys = 0u64;
        for kv in self.tree.range(&[], None) {
            let (key, value) = kv?;
            keys += 1;
            if keys & 0xffff == 0 {
                progress(keys);
            }
            let decoded = match decode_key(&key) {
                Ok(d) => d,
                Err(e) => {
                    r.errors.push(format!(
                        "undecodable key {:?}: {e}",
                        key.escape_ascii().to_string()
                    ));
                    continue;
                }
            };
            match decoded {
                DecodedKey::Sys { .. } => {
                    if key.starts_with(&orphan_pre) {
                        orphans.insert(Loc::block_of(&key));
                        r.orphans += 1;
                    }
                }
                DecodedKey::Meta { path } => {
                    let attr = match Attr::decode(&value) {
                        Ok(a) => a,
                        Err(e) => {
                            r.errors.push(format!("{path}: {e}"));
                            continue;
                        }
                    };
                    if let Some(parent) = path.parent() {
                        match paths.get(&parent) {
                            Some((Kind::Dir, ..)) => {}
                            Some(_) => r.errors.push(format!("{path}: parent is not a directory")),
                            None => r.errors.push(format!("{path}: parent is missing")),
                        }
                        if attr.kind == Kind::Dir {
                            *subdirs.entry(parent).or_insert(0) += 1;
                        }
                    }
                    if attr.kind == Kind::Dir {
                        r.dirs += 1;
                    } else {
                        r.files += 1;
                    }
                    if attr.is_linked() {
                        *pointers.entry(attr.ino).or_insert(0) += 1;
                    }
                    paths.insert(path, (attr.kind, attr.size, attr.nlink, attr.is_linked()));
                }
                DecodedKey::Xattr { path, .. } => match paths.get(&path) {
                    Some((_, _, _, false)) => {}
                    _ => r
                        .errors
                        .push(format!("{path}: xattr key without a path-keyed file")),
                },
                DecodedKey::Data { path, block } => {
                    r.blocks += 1;
                    match paths.get(&path) {
                        Some((Kind::File, size, _, false)) => {
                            if block.saturating_mul(4096) >= *size {
                                r.errors
                                    .push(format!("{path}: block {block} past the size {size}"));
                            }
                        }
                        _ => r.errors.push(format!(
                            "{path}: data block {block} without a path-keyed file"
                        )),
                    }
                }
                DecodedKey::InodeMeta { ino } => match Attr::decode(&value) {
                    Ok(a) => {
                        inodes.insert(ino, a);
                    }
                    Err(e) => r.errors.push(format!("inode {ino}: {e}")),
                },
                DecodedKey::InodeXattr { ino, .. } => {
                    if !inodes.contains_key(&ino) {
                        r.errors
                            .push(format!("inode {ino}: xattr without an inode record"));
                    }
                }
                DecodedKey::InodeData { ino, block } => {
                    r.blocks += 1;
                    match inodes.get(&ino) {
                        Some(a) if block.saturating_mul(4096) >= a.size => r.errors.push(format!(
                            "inode {ino}: block {block} past the size {}",
                            a.size
                        )),
                        Some(_) => {}
                        None => r
                            .errors
                            .push(format!("inode {ino}: data without an inode record")),
                    }
                }
            }
        }
        if !matches!(paths.get(&FsPath::root()), Some((Kind::Dir, ..))) {
            r.errors.push("root directory missing".into());
        }
        for (path, (kind, _, nlink, _)) in &paths {
            if *kind == Kind::Dir {
                let want = 2 + subdirs.get(path).copied().unwrap_or(0);
                if *nlink != want {
                    r.errors.push(format!(
                        "{path}: directory link count {nlink}, expected {want}"
                    ));
                }
            }
        }
        for (ino, attr) in &inodes {
            let names = pointers.get(ino).copied().unwrap_or(0);
            if attr.nlink != names && !(names == 0 && orphans.contains(ino)) {
                r.errors.push(format!(
                    "inode {ino}: link count {}, names {names}",
                    attr.nlink
                ));
            }
            if names == 0 && !orphans.contains(ino) {
                r.errors
                    .push(format!("inode {ino}: no name and no orphan marker"));
            }
        }
        for ino in pointers.keys() {
            if !inodes.contains_key(ino) {
                r.errors.push(format!("names point at missing inode {ino}"));
            }
        }
        Ok(r)
    }
}
