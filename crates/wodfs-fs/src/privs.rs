//! Which of set-user-ID and set-group-ID a modification clears.
//!
//! Linux (`setattr_should_drop_suidgid`, 6.2 and later) clears them when a
//! caller without CAP_FSETID writes, truncates or fallocates a regular
//! file: set-user-ID always; set-group-ID when the file is
//! group-executable, or when the caller is not in the file's group (a
//! set-group-ID file without group-execute marks mandatory locking, which
//! a member may keep). Whoever sees credentials (the FUSE adapter) names
//! the caller; the file system, which sees the file's mode and group,
//! decides, and reads the caller's supplementary groups only in the one
//! case where they matter.

use std::fs;

/// Who modifies a file, as far as set-user-ID and set-group-ID go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KillPriv {
    /// A caller with CAP_FSETID: nothing is cleared.
    #[default]
    Keep,
    /// A caller without it: process `pid` (0 if unknown) acting with
    /// file-system group `fsgid`.
    Caller {
        /// The calling process; its supplementary groups are read from
        /// `/proc/PID/status` when membership decides.
        pid: u32,
        /// The caller's file-system group ID.
        fsgid: u32,
    },
}

impl KillPriv {
    /// `perm` of a file owned by group `gid`, with the bits this caller's
    /// modification clears removed.
    pub fn apply(self, perm: u16, gid: u32) -> u16 {
        let KillPriv::Caller { pid, fsgid } = self else {
            return perm;
        };
        let perm = perm & !(libc::S_ISUID as u16);
        if perm & (libc::S_ISGID as u16) == 0 {
            return perm;
        }
        let group_exec = perm & (libc::S_IXGRP as u16) != 0;
        if group_exec || !in_group(pid, fsgid, gid) {
            return perm & !(libc::S_ISGID as u16);
        }
        perm
    }

    /// [`KillPriv::apply`] for a chown, which clears set-user-ID even
    /// when the caller is privileged (`chown_common` always asks for
    /// ATTR_KILL_SUID; a privileged caller counts as a member). `gid` is
    /// the group before the change.
    pub fn apply_chown(self, perm: u16, gid: u32) -> u16 {
        match self {
            KillPriv::Keep => KillPriv::Caller { pid: 0, fsgid: gid }.apply(perm, gid),
            caller => caller.apply(perm, gid),
        }
    }
}

/// Whether the caller is in group `gid`: its file-system group or one of
/// its supplementary groups (the kernel's `in_group_p`). Without a
/// readable `/proc/PID/status` only the file-system group counts.
fn in_group(pid: u32, fsgid: u32, gid: u32) -> bool {
    if fsgid == gid {
        return true;
    }
    if pid == 0 {
        return false;
    }
    let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|groups| groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMBER: KillPriv = KillPriv::Caller { pid: 0, fsgid: 7 };
    const OUTSIDER: KillPriv = KillPriv::Caller { pid: 0, fsgid: 8 };

    #[test]
    fn the_kernels_table() {
        // (mode, member's result, outsider's result); the modes and the
        // outsider's results are xfstests generic/683's.
        for (mode, member, outsider) in [
            (0o6666, 0o2666, 0o666),
            (0o6676, 0o676, 0o676),
            (0o6766, 0o2766, 0o766),
            (0o6777, 0o777, 0o777),
            (0o2676, 0o676, 0o676),
            (0o2777, 0o777, 0o777),
            (0o2666, 0o2666, 0o666),
            (0o4644, 0o644, 0o644),
            (0o644, 0o644, 0o644),
        ] {
            assert_eq!(KillPriv::Keep.apply(mode, 7), mode);
            assert_eq!(MEMBER.apply(mode, 7), member, "{mode:o}");
            assert_eq!(OUTSIDER.apply(mode, 7), outsider, "{mode:o}");
        }
        assert_eq!(KillPriv::Keep.apply_chown(0o6666, 7), 0o2666);
        assert_eq!(KillPriv::Keep.apply_chown(0o6676, 7), 0o676);
        assert_eq!(OUTSIDER.apply_chown(0o6666, 7), 0o666);
    }

    #[test]
    fn supplementary_groups_come_from_proc() {
        let pid = std::process::id();
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let groups: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .unwrap()
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect();
        let absent = (1000..).find(|g| !groups.contains(g)).unwrap();
        let fsgid = absent + 1;
        let caller = KillPriv::Caller { pid, fsgid };
        for g in groups.into_iter().filter(|&g| g != fsgid) {
            assert_eq!(caller.apply(0o2666, g), 0o2666, "member of {g}");
        }
        assert_eq!(caller.apply(0o2666, absent), 0o666);
        assert!(in_group(pid, fsgid, fsgid));
    }
}
