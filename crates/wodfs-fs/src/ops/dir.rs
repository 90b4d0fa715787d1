//! Directory listing: one range scan of the directory's children.
//!
//! A listing resumes after a *name*, not an index, so a position stays
//! valid while entries are added or removed (telldir/seekdir; the FUSE
//! adapter maps its 64-bit cookies to names).

use wodfs_schema::key_codec::{child_name, children_range, meta_key, PathSpace};
use wodfs_schema::FsPath;

use crate::attr::{Attr, Kind};
use crate::error::{err, FsError, FsResult};
use crate::fs::Fs;
use crate::loc::Loc;

/// One directory entry.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// Entry name.
    pub name: Vec<u8>,
    /// Attributes of the object it names (pointers followed).
    pub attr: Attr,
    /// Where that object's keys live.
    pub loc: Loc,
}

impl Fs {
    /// Up to `limit` entries of `dir` in name order, starting after the
    /// name `after` (from the first entry if `None`).
    pub fn readdir(
        &self,
        dir: &FsPath,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>> {
        let (attr, _) = self.resolve(dir)?;
        if attr.kind != Kind::Dir {
            return err(libc::ENOTDIR);
        }
        let range = children_range(PathSpace::Meta, dir);
        let lo = match after {
            Some(name) => {
                let mut k = meta_key(&dir.join(name)?);
                k.push(0);
                k
            }
            None => range.start.clone(),
        };
        let mut out = Vec::new();
        let generation = self.attrs.generation();
        let mut records = Vec::new();
        for kv in self.tree.range(&lo, Some(&range.end)) {
            if out.len() >= limit {
                break;
            }
            let (key, value) = kv?;
            let bad = || FsError::Corrupt(format!("bad key in {dir}"));
            let name = child_name(&range.start, &key).map_err(|_| bad())?;
            let path = dir.join(&name).map_err(|_| bad())?;
            // The cache takes the stored record; the entry shows a noted
            // atime (`lazy_atime`).
            let stored = Attr::decode(&value)?;
            let mut attr = stored.clone();
            self.atimes.overlay(&key, &mut attr);
            records.push((key, Some(stored)));
            let mut loc = Loc::Path(path);
            if attr.is_linked() {
                loc = Loc::Inode(attr.ino);
                attr = self.getattr(&loc)?;
            }
            out.push(DirEntry { name, attr, loc });
        }
        self.attrs.fill(generation, records);
        Ok(out)
    }
}
