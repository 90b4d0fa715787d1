//! File-system operations, one file per family. Each public operation
//! takes the namespace lock (if it mutates), checks POSIX conditions
//! against the stored attributes, and commits one engine batch.

pub mod data;
pub mod dir;
pub mod namespace;
pub mod rename;
pub mod setattr;
pub mod statfs;
pub mod xattr;

use wodfs_engine::Op;
use wodfs_schema::key_codec::{hardlink_moves, meta_key};
use wodfs_schema::FsPath;

use crate::attr::{Attr, Kind, Timespec, FLAG_LINKED};
use crate::fs::{delete_inode_ops, orphan_key, put_attr, Fs};
use crate::loc::Loc;
use data::BLOCK;

/// What a removal did to the file it removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Inode number of the removed name's file.
    pub ino: u64,
    /// True if the file lives on (open, or other names) in the inode
    /// space: later operations on `ino` must use [`Loc::Inode`].
    pub inode_loc: bool,
    /// Its attributes after the removal (link count 0 if it is gone): an
    /// open directory that was removed (rmdir, or a rename over it) still
    /// answers `fstat`, as on any local file system.
    pub attr: Attr,
}

impl Fs {
    /// The op that updates a parent directory after an entry change.
    pub(crate) fn touch_dir(
        &self,
        dir: &FsPath,
        attr: &Attr,
        nlink_delta: i32,
        now: Timespec,
    ) -> Op {
        let mut a = attr.clone();
        a.nlink = a.nlink.saturating_add_signed(nlink_delta);
        a.mtime = now;
        a.ctime = now;
        put_attr(&Loc::Path(dir.clone()), &a)
    }

    /// Ops that remove the name `path` (whose file is `attr` at `loc`):
    /// the metadata key and, unless the file lives on, its blocks
    /// ([`delete_blocks_ops`]) and its xattrs (one range delete, unless it
    /// never had one). An open file whose
    /// last name goes becomes an orphan in the inode space.
    pub(crate) fn remove_name_ops(
        &self,
        path: &FsPath,
        attr: &Attr,
        loc: &Loc,
        now: Timespec,
    ) -> (Vec<Op>, Removed) {
        let mut ops = Vec::new();
        let ino = attr.ino;
        match loc {
            Loc::Inode(_) => {
                ops.push(Op::Delete {
                    key: meta_key(path),
                });
                let mut a = attr.clone();
                a.nlink = a.nlink.saturating_sub(1);
                a.ctime = now;
                if a.nlink == 0 && !self.is_open(ino) {
                    ops.extend(delete_inode_ops(ino));
                } else {
                    if a.nlink == 0 {
                        ops.push(Op::Insert {
                            key: orphan_key(ino),
                            value: Vec::new(),
                        });
                        self.mark_orphan(ino);
                    }
                    ops.push(put_attr(loc, &a));
                }
            }
            Loc::Path(_) if attr.kind != Kind::Dir && self.is_open(ino) => {
                for m in hardlink_moves(path, ino) {
                    ops.push(Op::RangeMove {
                        from: m.from,
                        to: m.to,
                    });
                }
                ops.push(Op::Delete {
                    key: meta_key(path),
                });
                let mut a = attr.clone();
                a.nlink = 0;
                a.ctime = now;
                ops.push(put_attr(&Loc::Inode(ino), &a));
                ops.push(Op::Insert {
                    key: orphan_key(ino),
                    value: Vec::new(),
                });
                self.mark_orphan(ino);
                return (
                    ops,
                    Removed {
                        ino,
                        inode_loc: true,
                        attr: a,
                    },
                );
            }
            Loc::Path(_) => {
                ops.push(Op::Delete {
                    key: meta_key(path),
                });
                delete_blocks_ops(loc, attr, &mut ops);
                if attr.may_have_xattrs() {
                    let x = loc.xattrs();
                    ops.push(Op::DeleteRange {
                        lo: x.start,
                        hi: x.end,
                    });
                }
            }
        }
        let inode_loc = matches!(loc, Loc::Inode(_));
        let mut after = attr.clone();
        after.ctime = now;
        after.nlink = if inode_loc {
            attr.nlink.saturating_sub(1)
        } else {
            0
        };
        (
            ops,
            Removed {
                ino,
                inode_loc,
                attr: after,
            },
        )
    }
}

/// Files up to this many blocks are removed block by block.
const POINT_DELETED_BLOCKS_MAX: u64 = 16;

/// Ops that delete every block of the path-keyed object `attr` at `loc`.
///
/// Only a regular file has blocks, and none at or past its size (fsck
/// checks both), so a small file's blocks are exactly known: point
/// deletes for them cost less than a range delete, which every buffer on
/// its way down indexes, clips, and checks on every lookup. A larger file
/// gets one range delete, whose cost does not grow with the file.
fn delete_blocks_ops(loc: &Loc, attr: &Attr, ops: &mut Vec<Op>) {
    if attr.kind != Kind::File {
        return;
    }
    let blocks = attr.size.div_ceil(BLOCK);
    if blocks <= POINT_DELETED_BLOCKS_MAX {
        ops.extend((0..blocks).map(|block| Op::Delete {
            key: loc.data_key(block),
        }));
    } else {
        let b = loc.blocks();
        ops.push(Op::DeleteRange {
            lo: b.start,
            hi: b.end,
        });
    }
}

/// A pointer record for a path whose file lives in the inode space.
pub(crate) fn pointer(attr: &Attr) -> Vec<u8> {
    let mut p = attr.clone();
    p.flags |= FLAG_LINKED;
    p.encode()
}
