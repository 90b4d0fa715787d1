//! Regression (xfstests generic/184, 306, 434): `-o dev`, `-o suid` and
//! `-o noexec` were accepted and silently dropped, so device nodes on a
//! wodfs mount could never be opened and `noexec` in fstab did nothing.
//! Needs root and /dev/fuse.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Tmp(PathBuf);

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.join("mnt")).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wodfs(args: &[&Path]) {
    let o = Command::new(env!("CARGO_BIN_EXE_wodfs"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
}

/// The mount options column of `mnt` in /proc/self/mountinfo.
fn mount_flags(mnt: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.display().to_string();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .expect("mounted");
    line.split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect()
}

/// `wodfs mount IMG MNT -o OPTIONS`.
fn mount_with(img: &Path, mnt: &Path, options: &str) {
    wodfs(&[
        Path::new("mount"),
        img,
        mnt,
        Path::new("-o"),
        Path::new(options),
    ]);
}

fn umount(mnt: &Path) {
    for _ in 0..50 {
        if Command::new("umount").arg(mnt).status().unwrap().success() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("cannot unmount {}", mnt.display());
}

#[test]
fn dev_suid_and_noexec_reach_the_kernel() {
    let root = std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t0\t")));
    if !Path::new("/dev/fuse").exists() || !root {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let t = Tmp(std::env::temp_dir().join(format!("wodfs-flags-{}", std::process::id())));
    let (img, mnt) = (t.0.join("img"), t.0.join("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    wodfs(&[
        Path::new("mkfs"),
        &img,
        Path::new("--size"),
        Path::new("256M"),
    ]);

    // The default stays nodev,nosuid, as for any FUSE mount.
    wodfs(&[Path::new("mount"), &img, &mnt]);
    let flags = mount_flags(&mnt);
    assert!(flags.contains(&"nodev".into()) && flags.contains(&"nosuid".into()));
    let null = mnt.join("null");
    let made = Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(made.success());
    assert!(std::fs::write(&null, b"x").is_err(), "nodev must refuse");
    umount(&mnt);

    mount_with(&img, &mnt, "dev,suid");
    let flags = mount_flags(&mnt);
    assert!(!flags.contains(&"nodev".into()) && !flags.contains(&"nosuid".into()));
    std::fs::write(&null, b"discarded").unwrap();
    assert_eq!(std::fs::read(&null).unwrap(), b"");
    umount(&mnt);

    mount_with(&img, &mnt, "noexec");
    assert!(mount_flags(&mnt).contains(&"noexec".into()));
    umount(&mnt);
}
