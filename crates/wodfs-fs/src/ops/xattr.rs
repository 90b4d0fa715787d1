//! Extended attributes: one key per (file, name), moved by rename with the
//! file's other keys and removed with it by one range delete.

use wodfs_engine::Op;
use wodfs_schema::key_codec::validate_xattr_name;

use crate::attr::{Kind, Timespec, FLAG_NO_XATTRS};
use crate::error::{err, FsResult};
use crate::fs::{put_attr, Fs};
use crate::loc::Loc;

/// Largest xattr value (Linux `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_BYTES_MAX: usize = 65536;

/// How `set_xattr` treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Upsert,
    /// `XATTR_CREATE`: `EEXIST` if present.
    Create,
    /// `XATTR_REPLACE`: `ENODATA` if absent.
    Replace,
}

fn check_name(name: &[u8]) -> FsResult<()> {
    validate_xattr_name(name)?;
    Ok(())
}

/// POSIX ACLs are refused rather than stored: without the kernel's
/// FUSE_POSIX_ACL mode (not negotiated) the kernel neither enforces a
/// stored ACL nor keeps it in step with chmod, so `getfacl` would show
/// rules that nothing applies.
fn is_posix_acl(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
}

impl Fs {
    /// Sets xattr `name` of the object at `loc`.
    pub fn set_xattr(&self, loc: &Loc, name: &[u8], value: &[u8], how: XattrSet) -> FsResult<()> {
        check_name(name)?;
        if is_posix_acl(name) {
            return err(libc::EOPNOTSUPP);
        }
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return err(libc::E2BIG);
        }
        let g = self.lock();
        let mut attr = self.getattr(loc)?;
        if attr.kind == Kind::Symlink && name.starts_with(b"user.") {
            return err(libc::EPERM);
        }
        let key = loc.xattr_key(name)?;
        let exists = self.tree.get(&key)?.is_some();
        match (how, exists) {
            (XattrSet::Create, true) => return err(libc::EEXIST),
            (XattrSet::Replace, false) => return err(libc::ENODATA),
            _ => {}
        }
        attr.ctime = Timespec::now();
        attr.flags &= !FLAG_NO_XATTRS;
        g.write(&[
            Op::Insert {
                key,
                value: value.to_vec(),
            },
            put_attr(loc, &attr),
        ])?;
        Ok(())
    }

    /// The value of xattr `name`. An object whose record says it never
    /// had one is answered from the record (cached once the kernel has
    /// looked the name up) without the tree: the kernel asks for
    /// `security.capability` before the first write of every file it
    /// looked up, and that search of the xattr keys was a cold lookup of
    /// its own (TableFS's small-file writes).
    pub fn get_xattr(&self, loc: &Loc, name: &[u8]) -> FsResult<Vec<u8>> {
        check_name(name)?;
        if !self.getattr(loc)?.may_have_xattrs() {
            return err(libc::ENODATA);
        }
        match self.tree.get(&loc.xattr_key(name)?)? {
            Some(v) => Ok(v),
            None => err(libc::ENODATA),
        }
    }

    /// Every xattr name, in byte order.
    pub fn list_xattr(&self, loc: &Loc) -> FsResult<Vec<Vec<u8>>> {
        if !self.getattr(loc)?.may_have_xattrs() {
            return Ok(Vec::new());
        }
        let r = loc.xattrs();
        let mut names = Vec::new();
        for kv in self.tree.range(&r.start, Some(&r.end)) {
            let (key, _) = kv?;
            names.push(key[r.start.len()..].to_vec());
        }
        Ok(names)
    }

    /// Removes xattr `name`.
    pub fn remove_xattr(&self, loc: &Loc, name: &[u8]) -> FsResult<()> {
        check_name(name)?;
        let g = self.lock();
        let mut attr = self.getattr(loc)?;
        if attr.kind == Kind::Symlink && name.starts_with(b"user.") {
            return err(libc::EPERM);
        }
        let key = loc.xattr_key(name)?;
        if self.tree.get(&key)?.is_none() {
            return err(libc::ENODATA);
        }
        attr.ctime = Timespec::now();
        g.write(&[Op::Delete { key }, put_attr(loc, &attr)])?;
        Ok(())
    }
}
