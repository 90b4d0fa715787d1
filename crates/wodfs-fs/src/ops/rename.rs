//! rename(2) and renameat2(2): replace, RENAME_NOREPLACE, RENAME_EXCHANGE.
//!
//! A rename is one batch of engine range moves (the schema's
//! `rename_moves_all`, `file_rename_moves` for anything but a directory,
//! `exchange_moves`), plus the removal of a replaced
//! destination and the parents' attribute updates. An empty regular file
//! that never had an xattr has no key but its record: its rename is a
//! delete and an insert of that record (`has_only_its_record`). Because
//! keys are full paths, a directory rename that would push any descendant
//! past `PATH_BYTES_MAX` fails with `ENAMETOOLONG`; the longest descendant
//! is found by scanning the directory's metadata range, and only when the
//! new path is longer than the old one.
//!
//! [`Fs::rename_carrying`] also writes bytes a caller held back for the
//! file it renames, in the rename's batch and at the new name (rsync
//! writes each file under a temporary name and renames it: the bytes were
//! written at the temporary name and then copied by the range move).

use wodfs_engine::Op;
use wodfs_schema::key_codec::{
    decode_key, descendants_range, exchange_moves, file_rename_moves, meta_key, rename_moves_all,
    PathSpace,
};
use wodfs_schema::path::check_renamed_descendant;
use wodfs_schema::FsPath;

use super::data::{write_ops, Carried, HeldBytes};
use super::{pointer, Removed};
use crate::attr::{Attr, Kind, Timespec};
use crate::error::{err, FsResult};
use crate::fs::{put_attr, Fs, Guard};
use crate::loc::Loc;

/// How an existing destination is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameMode {
    /// Replace a compatible destination.
    Replace,
    /// Fail with `EEXIST` if the destination exists.
    NoReplace,
    /// Swap the two names; both must exist.
    Exchange,
}

/// What a rename did, for callers that cache names (the FUSE inode table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// Inode of the renamed object.
    pub ino: u64,
    /// The replaced destination, if any.
    pub replaced: Option<Removed>,
    /// For an exchange: the inode now at the old name.
    pub exchanged: Option<u64>,
}

impl Fs {
    /// Renames `old_dir/old_name` to `new_dir/new_name`.
    pub fn rename(
        &self,
        old_dir: &FsPath,
        old_name: &[u8],
        new_dir: &FsPath,
        new_name: &[u8],
        mode: RenameMode,
    ) -> FsResult<Renamed> {
        let old = old_dir.join(old_name)?;
        let new = new_dir.join(new_name)?;
        self.rename_paths(old_dir, &old, new_dir, &new, mode, None)
    }

    /// Writes `held` into the file at `old_dir/old_name` and renames it to
    /// `new_dir/new_name`: what [`Fs::write_then_set`] and then
    /// [`Fs::rename`] do, in one batch that writes the bytes at the new
    /// name, so the rename moves none of them (and a crash keeps both or
    /// neither). If the rename fails, the bytes are written alone, at the
    /// old name; if they are too many for one batch, they are written
    /// first.
    pub fn rename_carrying(
        &self,
        old_dir: &FsPath,
        old_name: &[u8],
        new_dir: &FsPath,
        new_name: &[u8],
        mode: RenameMode,
        held: HeldBytes<'_>,
    ) -> Carried<Renamed> {
        let write_alone =
            |at: FsResult<FsPath>| self.write_then_set(&Loc::Path(at?), held).map(drop);
        let old = old_dir.join(old_name);
        let new = new_dir.join(new_name);
        let fits = held.data.len() <= self.write_chunk_bytes() && held.end().is_some();
        let (Ok(old), Ok(new), true) = (&old, &new, fits) else {
            let written = write_alone(old.clone().map_err(Into::into));
            let renamed = self.rename(old_dir, old_name, new_dir, new_name, mode);
            return Carried {
                written,
                done: renamed,
            };
        };
        self.back_pressure.pace_writer();
        match self.rename_paths(old_dir, old, new_dir, new, mode, Some(held)) {
            Ok(renamed) => Carried {
                written: Ok(()),
                done: Ok(renamed),
            },
            Err(e) => Carried {
                written: write_alone(Ok(old.clone())),
                done: Err(e),
            },
        }
    }

    /// The rename of [`Fs::rename`], writing `held` into the renamed file
    /// in the same batch.
    fn rename_paths(
        &self,
        old_dir: &FsPath,
        old: &FsPath,
        new_dir: &FsPath,
        new: &FsPath,
        mode: RenameMode,
        held: Option<HeldBytes<'_>>,
    ) -> FsResult<Renamed> {
        let g = self.lock();
        let old_parent = self.dir_attr(old_dir)?;
        let new_parent = self.dir_attr(new_dir)?;
        let (src, src_loc) = self.resolve(old)?;
        let dst = self.try_resolve(new)?;
        match (mode, &dst) {
            (RenameMode::NoReplace, Some(_)) => return err(libc::EEXIST),
            (RenameMode::Exchange, None) => return err(libc::ENOENT),
            _ => {}
        }
        if old.is_ancestor_of(new) {
            return err(libc::EINVAL);
        }
        if new.is_ancestor_of(old) {
            return err(match mode {
                RenameMode::Exchange => libc::EINVAL,
                _ => libc::ENOTEMPTY,
            });
        }
        let src_dir = src.kind == Kind::Dir;
        if let (RenameMode::Replace, Some((d, _))) = (mode, &dst) {
            if d.ino == src.ino {
                self.write_held_in_place(&g, &src, &src_loc, held)?;
                return Ok(Renamed {
                    ino: src.ino,
                    replaced: None,
                    exchanged: None,
                });
            }
            let dst_dir = d.kind == Kind::Dir;
            if src_dir && !dst_dir {
                return err(libc::ENOTDIR);
            }
            if !src_dir && dst_dir {
                return err(libc::EISDIR);
            }
            if dst_dir && !self.dir_is_empty(new)? {
                return err(libc::ENOTEMPTY);
            }
        }
        if old == new {
            self.write_held_in_place(&g, &src, &src_loc, held)?;
            return Ok(Renamed {
                ino: src.ino,
                replaced: None,
                exchanged: None,
            });
        }
        if src_dir {
            self.check_descendant_lengths(old, new)?;
        }
        if let (RenameMode::Exchange, Some((d, _))) = (mode, &dst) {
            if d.kind == Kind::Dir {
                self.check_descendant_lengths(new, old)?;
            }
        }
        let now = Timespec::now();
        let mut ops = Vec::new();
        let mut replaced = None;
        let mut exchanged = None;
        // Link-count changes of the two parents (subdirectories moved).
        let (mut old_delta, mut new_delta) = (0i32, 0i32);
        match (mode, dst) {
            (RenameMode::Exchange, Some((d, d_loc))) => {
                for m in exchange_moves(old, new)? {
                    ops.push(Op::RangeMove {
                        from: m.from,
                        to: m.to,
                    });
                }
                let d_dir = d.kind == Kind::Dir;
                if src_dir != d_dir && old_dir != new_dir {
                    let s = if src_dir { 1 } else { -1 };
                    old_delta -= s;
                    new_delta += s;
                }
                ops.extend(self.touch_moved(old, &d, &d_loc, now));
                exchanged = Some(d.ino);
            }
            (_, dst) => {
                if let Some((d, d_loc)) = dst {
                    let (rm, removed) = self.remove_name_ops(new, &d, &d_loc, now);
                    ops.extend(rm);
                    if d.kind == Kind::Dir {
                        new_delta -= 1;
                    }
                    replaced = Some(removed);
                }
                let moves = if src_dir {
                    rename_moves_all(old, new)?
                } else if has_only_its_record(&src, &src_loc) {
                    // The record moves by touch_moved's insert below.
                    ops.push(Op::Delete { key: meta_key(old) });
                    Vec::new()
                } else {
                    file_rename_moves(old, new)?
                };
                for m in moves {
                    ops.push(Op::RangeMove {
                        from: m.from,
                        to: m.to,
                    });
                }
                if src_dir {
                    old_delta -= 1;
                    new_delta += 1;
                }
            }
        }
        // The held bytes go where the file is after the moves.
        let src = match held {
            Some(h) => {
                let file = file_kind(&src)?;
                let moved_to = match &src_loc {
                    Loc::Path(_) => Loc::Path(new.clone()),
                    at @ Loc::Inode(_) => at.clone(),
                };
                write_ops(&moved_to, h.offset, h.data, file.size, &mut ops);
                held_attr(file, h, now)
            }
            None => src,
        };
        ops.extend(self.touch_moved(new, &src, &src_loc, now));
        if old_dir == new_dir {
            ops.push(self.touch_dir(old_dir, &old_parent, old_delta + new_delta, now));
        } else {
            ops.push(self.touch_dir(old_dir, &old_parent, old_delta, now));
            ops.push(self.touch_dir(new_dir, &new_parent, new_delta, now));
        }
        g.write_owned(ops)?;
        Ok(Renamed {
            ino: src.ino,
            replaced,
            exchanged,
        })
    }

    /// Writes `held` into the file at `loc` under the held lock (a rename
    /// that changes no name).
    fn write_held_in_place(
        &self,
        g: &Guard<'_>,
        attr: &Attr,
        loc: &Loc,
        held: Option<HeldBytes<'_>>,
    ) -> FsResult<()> {
        let Some(h) = held else {
            return Ok(());
        };
        let file = file_kind(attr)?;
        let mut ops = Vec::new();
        write_ops(loc, h.offset, h.data, file.size, &mut ops);
        let after = held_attr(file.clone(), h, Timespec::now());
        crate::fs::update_attr(loc, &file, &after, &mut ops);
        g.write_owned(ops)
    }

    /// Ops that set the ctime of an object now named `path`.
    fn touch_moved(&self, path: &FsPath, attr: &Attr, loc: &Loc, now: Timespec) -> Vec<Op> {
        let mut a = attr.clone();
        a.ctime = now;
        match loc {
            Loc::Path(_) => vec![put_attr(&Loc::Path(path.clone()), &a)],
            Loc::Inode(_) => vec![
                put_attr(loc, &a),
                Op::Insert {
                    key: meta_key(path),
                    value: pointer(&a),
                },
            ],
        }
    }

    /// `ENAMETOOLONG` if renaming directory `old` to `new` pushes a
    /// descendant past the path limit.
    fn check_descendant_lengths(&self, old: &FsPath, new: &FsPath) -> FsResult<()> {
        if new.len_bytes() <= old.len_bytes() {
            return Ok(());
        }
        let r = descendants_range(PathSpace::Meta, old);
        for kv in self.tree.range(&r.start, Some(&r.end)) {
            let (key, _) = kv?;
            if let Ok(k) = decode_key(&key) {
                if let Some(p) = k.path() {
                    check_renamed_descendant(old, new, p.len_bytes())?;
                }
            }
        }
        Ok(())
    }
}

/// Whether the object `attr` at `loc` has no key but its attribute
/// record: an empty regular file at its path that never had an
/// extended attribute (a file has no block at or past its size; fsck
/// checks it). Renaming one is a delete and an insert of that record: a
/// range move by copy would scan its three key ranges and check the
/// destination's to find nothing else (rsync's temporary files, whose
/// bytes the rename carries: 11 % of its request thread).
fn has_only_its_record(attr: &Attr, loc: &Loc) -> bool {
    matches!(loc, Loc::Path(_))
        && attr.kind == Kind::File
        && attr.size == 0
        && !attr.may_have_xattrs()
}

/// `attr` if it is a regular file's (held bytes belong to one).
fn file_kind(attr: &Attr) -> FsResult<Attr> {
    match attr.kind {
        Kind::File => Ok(attr.clone()),
        Kind::Dir => err(libc::EISDIR),
        _ => err(libc::EINVAL),
    }
}

/// The attributes of `file` once `held` is written into it.
fn held_attr(file: Attr, held: HeldBytes<'_>, now: Timespec) -> Attr {
    match held.attr {
        Some(attr) => attr.clone(),
        None => file.written(held.offset, held.data.len() as u64, held.kill_priv, now),
    }
}
