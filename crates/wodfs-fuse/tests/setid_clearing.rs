//! Set-user-ID and set-group-ID through the mount: an unprivileged
//! write, fallocate or truncate clears them as Linux 6.2+ does (set-group-ID
//! of a file without group-execute stays only for a member of the file's
//! group), and `stat` sees the new mode at once, even when it asks for the
//! mode alone (the kernel's attribute cache; xfstests generic/355, 683-685).

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::{mkfs, mount, Scratch};

/// The mode as `stat -c %a` gets it: statx asking for STATX_MODE only, so
/// the kernel answers from its attribute cache if it holds the mode.
#[allow(unsafe_code)]
fn cached_mode(path: &Path) -> u32 {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statx is plain data, valid when zeroed; the path is
    // NUL-terminated and outlives the call, which fills `stx`.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_MODE, &mut stx) };
    assert_eq!(r, 0, "statx {}", path.display());
    u32::from(stx.stx_mode) & 0o7777
}

#[test]
fn unprivileged_modifications_clear_setid_bits_and_the_kernel_sees_it() {
    require_fuse!();
    let s = Scratch::new("setid");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    // nobody, outside group root; and nobody with root as a supplementary
    // group (setpriv drops every capability with the root user ID).
    let outsider = "setpriv --reuid 65534 --regid 65534 --clear-groups";
    let member = "setpriv --reuid 65534 --regid 65534 --groups 0";
    let cases = [
        ("write", outsider, "printf x 1<>f", 0o6666, 0o666),
        ("write", member, "printf x 1<>f", 0o6666, 0o2666),
        ("write", member, "printf x 1<>f", 0o6676, 0o676),
        ("write", outsider, "printf x 1<>f", 0o2666, 0o666),
        ("fallocate", outsider, "fallocate -l 64KiB f", 0o6666, 0o666),
        ("fallocate", member, "fallocate -l 64KiB f", 0o6766, 0o2766),
        (
            "punch hole",
            outsider,
            "fallocate -p -l 4KiB f",
            0o6766,
            0o766,
        ),
        ("truncate", outsider, "truncate -s 1 f", 0o6666, 0o666),
        ("truncate", member, "truncate -s 2 f", 0o6666, 0o2666),
        ("root's write", "", "printf x 1<>f", 0o6666, 0o6666),
    ];
    for (what, who, cmd, mode, expect) in cases {
        m.sh(&format!("touch f && chmod {mode:o} f && stat -c %a f"));
        assert_eq!(cached_mode(&m.mnt.join("f")), mode);
        m.sh(&format!("{who} sh -c '{cmd}'"));
        assert_eq!(
            cached_mode(&m.mnt.join("f")),
            expect,
            "{what} by `{who}` of a root:root {mode:o} file"
        );
    }
    m.unmount();
    let m = mount(&s.image(), &s.mnt(), false);
    assert_eq!(cached_mode(&m.mnt.join("f")), 0o6666, "after remount");
    m.unmount();
}
