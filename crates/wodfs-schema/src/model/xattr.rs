//! Extended attributes in the model, with `l*xattr` semantics (never
//! follow a symlink). Xattrs belong to the inode, so hard links share them.

use super::resolve::parse;
use super::{EntryKind, Errno, Ino, Namespace, XattrMode, XATTR_VALUE_BYTES_MAX};
use crate::key_codec::validate_xattr_name;

/// Linux allows `user.` xattrs only on regular files and directories:
/// writes elsewhere are `EPERM`, reads `ENODATA`.
fn user_xattr_forbidden(kind: EntryKind, name: &[u8]) -> bool {
    kind == EntryKind::Symlink && name.starts_with(b"user.")
}

impl Namespace {
    fn xattr_inode(&self, path: impl AsRef<[u8]>, name: &[u8]) -> Result<Ino, Errno> {
        // The kernel validates the name before it resolves the path.
        validate_xattr_name(name)?;
        let path = parse(path)?;
        self.lookup(&path)
    }

    /// Sets xattr `name` (`lsetxattr`).
    pub fn set_xattr(
        &mut self,
        path: impl AsRef<[u8]>,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), Errno> {
        validate_xattr_name(name)?;
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        let ino = self.xattr_inode(path, name)?;
        if user_xattr_forbidden(self.kind_of(ino), name) {
            return Err(Errno::EPERM);
        }
        let xattrs = &mut self.inode_mut(ino).xattrs;
        match (mode, xattrs.contains_key(name)) {
            (XattrMode::Create, true) => return Err(Errno::EEXIST),
            (XattrMode::Replace, false) => return Err(Errno::ENODATA),
            _ => {}
        }
        xattrs.insert(name.to_vec(), value.to_vec());
        Ok(())
    }

    /// Reads xattr `name` (`lgetxattr`).
    pub fn get_xattr(&self, path: impl AsRef<[u8]>, name: &[u8]) -> Result<Vec<u8>, Errno> {
        let ino = self.xattr_inode(path, name)?;
        if user_xattr_forbidden(self.kind_of(ino), name) {
            return Err(Errno::ENODATA);
        }
        self.inode(ino)
            .xattrs
            .get(name)
            .cloned()
            .ok_or(Errno::ENODATA)
    }

    /// Names of all xattrs, in byte order (`llistxattr`).
    pub fn list_xattr(&self, path: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>, Errno> {
        let path = parse(path)?;
        let ino = self.lookup(&path)?;
        Ok(self.inode(ino).xattrs.keys().cloned().collect())
    }

    /// Removes xattr `name` (`lremovexattr`).
    pub fn remove_xattr(&mut self, path: impl AsRef<[u8]>, name: &[u8]) -> Result<(), Errno> {
        let ino = self.xattr_inode(path, name)?;
        if user_xattr_forbidden(self.kind_of(ino), name) {
            return Err(Errno::EPERM);
        }
        self.inode_mut(ino)
            .xattrs
            .remove(name)
            .map(drop)
            .ok_or(Errno::ENODATA)
    }
}
