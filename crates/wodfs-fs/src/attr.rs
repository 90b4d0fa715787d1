//! The attributes record stored under every metadata key, and its encoding.
//!
//! Layout, version 1 (little-endian, fixed header then the symlink target):
//!
//! | bytes | field                                       |
//! | ----- | ------------------------------------------- |
//! | 1     | format version (1)                          |
//! | 1     | kind ([`Kind`], persistent numbers)         |
//! | 1     | flags ([`FLAG_LINKED`], [`FLAG_NO_XATTRS`]) |
//! | 2     | permission bits (`mode & 0o7777`)           |
//! | 4 × 4 | uid, gid, nlink, rdev                       |
//! | 8 × 2 | inode number, size                          |
//! | 12 × 3| atime, mtime, ctime (i64 s, u32 ns)         |
//! | rest  | symlink target                              |
//!
//! A path whose file has more than one name (or is open but unlinked)
//! stores a *pointer*: the same record with [`FLAG_LINKED`] set; the real
//! attributes then live under the inode key. Decoding never panics.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{FsError, FsResult};

/// Current encoding version.
pub const ATTR_VERSION: u8 = 1;
const HEADER_BYTES: usize = 1 + 1 + 1 + 2 + 16 + 16 + 36;

/// Flag: this path record points at the inode space (hard-linked file).
pub const FLAG_LINKED: u8 = 1;

/// Flag: the object has never had an extended attribute. Set on every new
/// inode and cleared by its first `setxattr`, it lets an unlink skip the
/// range delete over the object's xattr keys, which would otherwise be
/// one of the two range messages of every unlink. Records written before
/// the flag existed lack it and count as possibly having xattrs, so no
/// version change was needed.
pub const FLAG_NO_XATTRS: u8 = 2;

/// What kind of object an inode is. The numbers are persistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Regular file.
    File = 1,
    /// Directory.
    Dir = 2,
    /// Symbolic link.
    Symlink = 3,
    /// Named pipe.
    Fifo = 4,
    /// Unix socket.
    Socket = 5,
    /// Character device.
    CharDev = 6,
    /// Block device.
    BlockDev = 7,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::File,
            2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::Fifo,
            5 => Kind::Socket,
            6 => Kind::CharDev,
            7 => Kind::BlockDev,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }

    /// The kind named by the `S_IFMT` bits of `mode` (0 means a file).
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            0 | libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            _ => return None,
        })
    }
}

/// A point in time with nanoseconds, seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timespec {
    /// Seconds (negative before 1970).
    pub sec: i64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Timespec {
        Timespec::from(SystemTime::now())
    }
}

impl From<SystemTime> for Timespec {
    fn from(t: SystemTime) -> Timespec {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timespec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                Timespec { sec, nsec }
            }
        }
    }
}

impl From<Timespec> for SystemTime {
    fn from(t: Timespec) -> SystemTime {
        let nanos = std::time::Duration::new(0, t.nsec.min(999_999_999));
        if t.sec >= 0 {
            UNIX_EPOCH + std::time::Duration::from_secs(t.sec as u64) + nanos
        } else {
            UNIX_EPOCH - std::time::Duration::from_secs(t.sec.unsigned_abs()) + nanos
        }
    }
}

/// Attributes of one inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number, stable for the life of the file.
    pub ino: u64,
    /// Object kind.
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count (`2 + subdirectories` for a directory).
    pub nlink: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Size in bytes (file length, symlink target length; 0 for dirs).
    pub size: u64,
    /// Last access.
    pub atime: Timespec,
    /// Last content change.
    pub mtime: Timespec,
    /// Last attribute change.
    pub ctime: Timespec,
    /// Record flags ([`FLAG_LINKED`], [`FLAG_NO_XATTRS`]).
    pub flags: u8,
    /// Symlink target (empty for other kinds).
    pub target: Vec<u8>,
}

impl Attr {
    /// A fresh inode with every time set to `now`.
    pub fn new(ino: u64, kind: Kind, perm: u16, uid: u32, gid: u32, now: Timespec) -> Attr {
        Attr {
            ino,
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            rdev: 0,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            flags: FLAG_NO_XATTRS,
            target: Vec::new(),
        }
    }

    /// The attributes after `len > 0` bytes are written at `offset` at
    /// time `now` by a caller whose write clears what `kill_priv` says:
    /// the size grows to cover them, mtime and ctime become `now`.
    pub fn written(
        &self,
        offset: u64,
        len: u64,
        kill_priv: crate::KillPriv,
        now: Timespec,
    ) -> Attr {
        let mut a = self.clone();
        a.size = a.size.max(offset + len);
        a.mtime = now;
        a.ctime = now;
        a.perm = kill_priv.apply(a.perm, a.gid);
        a
    }

    /// Full `st_mode`: kind bits and permissions.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | u32::from(self.perm)
    }

    /// False only if the object has certainly never had an xattr.
    pub fn may_have_xattrs(&self) -> bool {
        self.flags & FLAG_NO_XATTRS == 0
    }

    /// True if the record is a pointer to the inode space.
    pub fn is_linked(&self) -> bool {
        self.flags & FLAG_LINKED != 0
    }

    /// 512-byte blocks to report (an estimate: size rounded up to 4 KiB).
    pub fn blocks_512(&self) -> u64 {
        self.size.div_ceil(4096) * 8
    }

    /// Encodes the record (version [`ATTR_VERSION`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.target.len());
        out.push(ATTR_VERSION);
        out.push(self.kind as u8);
        out.push(self.flags);
        out.extend_from_slice(&self.perm.to_le_bytes());
        for v in [self.uid, self.gid, self.nlink, self.rdev] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.ino.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        for t in [self.atime, self.mtime, self.ctime] {
            out.extend_from_slice(&t.sec.to_le_bytes());
            out.extend_from_slice(&t.nsec.to_le_bytes());
        }
        out.extend_from_slice(&self.target);
        out
    }

    /// Decodes a record; unknown versions and short or invalid records are
    /// errors.
    pub fn decode(bytes: &[u8]) -> FsResult<Attr> {
        let bad = |what: &str| FsError::Corrupt(format!("attributes: {what}"));
        if bytes.len() < HEADER_BYTES {
            return Err(bad("record too short"));
        }
        if bytes[0] != ATTR_VERSION {
            return Err(bad(&format!("unknown version {}", bytes[0])));
        }
        let kind = Kind::from_u8(bytes[1]).ok_or_else(|| bad("unknown kind"))?;
        let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or([0; 8]));
        let time_at = |o: usize| Timespec {
            sec: u64_at(o) as i64,
            nsec: u32_at(o + 8),
        };
        Ok(Attr {
            kind,
            flags: bytes[2],
            perm: u16_at(3),
            uid: u32_at(5),
            gid: u32_at(9),
            nlink: u32_at(13),
            rdev: u32_at(17),
            ino: u64_at(21),
            size: u64_at(29),
            atime: time_at(37),
            mtime: time_at(49),
            ctime: time_at(61),
            target: bytes[HEADER_BYTES..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let mut a = Attr::new(7, Kind::Symlink, 0o777, 1, 2, Timespec { sec: -5, nsec: 9 });
        a.target = b"/x/y".to_vec();
        a.size = 4;
        a.flags = FLAG_LINKED;
        assert_eq!(Attr::decode(&a.encode()).unwrap(), a);
        assert!(Attr::decode(&[1, 2, 3]).is_err());
        let mut bad = a.encode();
        bad[0] = 9;
        assert!(Attr::decode(&bad).is_err());
        bad[0] = 1;
        bad[1] = 99;
        assert!(Attr::decode(&bad).is_err());
    }

    #[test]
    fn time_conversion_round_trips() {
        for t in [
            Timespec { sec: 5, nsec: 7 },
            Timespec { sec: -3, nsec: 500 },
        ] {
            assert_eq!(Timespec::from(SystemTime::from(t)), t);
        }
    }
}
