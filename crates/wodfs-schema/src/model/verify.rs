//! Structural self-check of the model, run after every step of model
//! tests so a broken model fails where it broke, not later in a diff.

use std::collections::BTreeMap;

use super::{Body, Ino, Namespace, ROOT_INO};
use crate::path::{validate_name, FsPath};

impl Namespace {
    /// Checks the invariants: the root is a directory with no name; every
    /// inode is reachable; directories have exactly one name and form a
    /// tree; every link count equals the number of names; every name and
    /// path is within the limits.
    pub fn verify(&self) -> Result<(), String> {
        let root = self.inodes.get(&ROOT_INO).ok_or("no root inode")?;
        if !matches!(root.body, Body::Dir(_)) {
            return Err("root is not a directory".into());
        }
        let mut names_per_inode: BTreeMap<Ino, u64> = BTreeMap::new();
        let mut stack = vec![(FsPath::root(), ROOT_INO)];
        while let Some((path, dir)) = stack.pop() {
            let Body::Dir(entries) = &self.inodes[&dir].body else {
                continue;
            };
            for (name, &child) in entries {
                validate_name(name).map_err(|e| format!("{path}: bad name: {e}"))?;
                let child_path = path.join(name).map_err(|e| format!("{path}: {e}"))?;
                let inode = self
                    .inodes
                    .get(&child)
                    .ok_or_else(|| format!("{child_path}: dangling inode {child}"))?;
                let seen = names_per_inode.entry(child).or_insert(0);
                *seen += 1;
                if let Body::Dir(_) = inode.body {
                    if *seen > 1 || child == ROOT_INO {
                        return Err(format!("{child_path}: directory {child} has two names"));
                    }
                    stack.push((child_path, child));
                }
            }
        }
        for (&ino, inode) in &self.inodes {
            let names = names_per_inode.get(&ino).copied().unwrap_or(0);
            if ino != ROOT_INO && names == 0 {
                return Err(format!("inode {ino} is unreachable"));
            }
            if inode.links != names {
                return Err(format!(
                    "inode {ino}: link count {} but {names} names",
                    inode.links
                ));
            }
            if ino >= self.next_ino {
                return Err(format!("inode {ino} not below next_ino {}", self.next_ino));
            }
        }
        Ok(())
    }
}
