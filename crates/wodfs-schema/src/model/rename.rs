//! `rename` / `renameat2` in the model.
//!
//! The checks run in the order of Linux's `do_renameat2` and `vfs_rename`,
//! because when several are violated at once the first one decides the
//! errno a test observes:
//!
//! 1. walk both parents (`ENOENT`, `ENOTDIR`, `ELOOP`);
//! 2. the root as source is `EBUSY`; as destination `EBUSY`, or `EEXIST`
//!    under `RENAME_NOREPLACE`;
//! 3. the source must exist (`ENOENT`);
//! 4. `RENAME_NOREPLACE` with an existing destination is `EEXIST`;
//!    `RENAME_EXCHANGE` with a missing one is `ENOENT`;
//! 5. a directory moved into its own subtree is `EINVAL`; a destination
//!    that is an ancestor of the source is `ENOTEMPTY` (`EINVAL` for
//!    exchange);
//! 6. two names of the same inode: success, and nothing changes;
//! 7. replacing: dir over non-dir `ENOTDIR`, non-dir over dir `EISDIR`,
//!    dir over non-empty dir `ENOTEMPTY`;
//! 8. wodfs only: a descendant path longer than the limit after the move is
//!    `ENAMETOOLONG`.

use super::resolve::{last_name, parse};
use super::{EntryKind, Errno, Ino, Namespace, RenameMode};
use crate::path::{check_renamed_descendant, FsPath};

impl Namespace {
    /// Renames `old` to `new` as `renameat2(old, new, mode)` would.
    pub fn rename(
        &mut self,
        old: impl AsRef<[u8]>,
        new: impl AsRef<[u8]>,
        mode: RenameMode,
    ) -> Result<(), Errno> {
        let old = parse(old)?;
        let new = parse(new)?;
        let old_dir = self.walk_parent(&old)?;
        let new_dir = self.walk_parent(&new)?;
        if old.is_root() {
            return Err(Errno::EBUSY);
        }
        if new.is_root() {
            return Err(match mode {
                RenameMode::NoReplace => Errno::EEXIST,
                _ => Errno::EBUSY,
            });
        }
        let (old_name, new_name) = (last_name(&old), last_name(&new));
        let source = self.child(old_dir, old_name).ok_or(Errno::ENOENT)?;
        let target = self.child(new_dir, new_name);
        match (mode, target) {
            (RenameMode::NoReplace, Some(_)) => return Err(Errno::EEXIST),
            (RenameMode::Exchange, None) => return Err(Errno::ENOENT),
            _ => {}
        }
        if old.is_ancestor_of(&new) {
            return Err(Errno::EINVAL);
        }
        if new.is_ancestor_of(&old) {
            return Err(match mode {
                RenameMode::Exchange => Errno::EINVAL,
                _ => Errno::ENOTEMPTY,
            });
        }
        if target == Some(source) {
            return Ok(());
        }
        if let (Some(target), false) = (target, mode == RenameMode::Exchange) {
            self.check_replaceable(source, target)?;
        }
        self.check_moved_paths(source, &old, &new)?;
        if let (Some(target), RenameMode::Exchange) = (target, mode) {
            self.check_moved_paths(target, &new, &old)?;
        }

        self.entries_mut(old_dir).remove(old_name);
        let replaced = self.entries_mut(new_dir).insert(new_name.to_vec(), source);
        match (replaced, mode) {
            (Some(target), RenameMode::Exchange) => {
                self.entries_mut(old_dir).insert(old_name.to_vec(), target);
            }
            (Some(target), _) => self.drop_link(target),
            (None, _) => {}
        }
        Ok(())
    }

    /// The type and emptiness rules for replacing `target` with `source`.
    fn check_replaceable(&self, source: Ino, target: Ino) -> Result<(), Errno> {
        let source_is_dir = self.kind_of(source) == EntryKind::Dir;
        let target_is_dir = self.kind_of(target) == EntryKind::Dir;
        match (source_is_dir, target_is_dir) {
            (true, false) => Err(Errno::ENOTDIR),
            (false, true) => Err(Errno::EISDIR),
            (true, true) if !self.entries(target).is_empty() => Err(Errno::ENOTEMPTY),
            _ => Ok(()),
        }
    }

    /// wodfs keys are full paths, so a move must keep every descendant of
    /// `ino` (now at `from`) within the path limit once it sits at `to`.
    fn check_moved_paths(&self, ino: Ino, from: &FsPath, to: &FsPath) -> Result<(), Errno> {
        let deepest = self.deepest_path_bytes(ino, from.len_bytes());
        check_renamed_descendant(from, to, deepest).map_err(Errno::from)
    }
}
