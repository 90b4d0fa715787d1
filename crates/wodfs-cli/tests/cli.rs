//! The `wodfs` command end to end: mkfs, stat, fsck exit codes on good,
//! foreign, corrupt and inconsistent images, one-line errors, and (as root
//! with /dev/fuse) the daemon: mount, sync, SIGTERM, remount.

mod common;

use std::path::Path;
use std::process::Command;

use common::{text, wodfs, Tmp};
use std::time::Duration;

use wodfs_device::FileDevice;
use wodfs_engine::Tree;
use wodfs_schema::key_codec::data_key;
use wodfs_schema::FsPath;

fn mkfs(img: &str) {
    let o = wodfs(&["mkfs", img, "--size", "256M"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `mkfs IMAGE ARGS...` succeeds and `stat` shows a log of `log_mib`.
fn assert_mkfs_log(img: &str, args: &[&str], log_mib: u64) {
    let o = wodfs(&[&["mkfs", img][..], args].concat());
    assert!(o.status.success(), "{}", text(&o));
    let stat = wodfs(&["stat", img]);
    assert!(
        text(&stat)
            .lines()
            .any(|l| l.starts_with("log ") && l.ends_with(&format!(" {log_mib} MiB"))),
        "{args:?}: {}",
        text(&stat)
    );
}

#[test]
fn mkfs_stat_fsck_on_a_fresh_image() {
    let t = Tmp::new("fresh");
    let img = t.p("img");
    mkfs(&img);
    let again = wodfs(&["mkfs", &img, "--size", "256M"]);
    assert!(!again.status.success());
    assert!(
        text(&again).contains("already holds a wodfs image"),
        "{}",
        text(&again)
    );
    let stat = wodfs(&["stat", &img]);
    assert!(stat.status.success(), "{}", text(&stat));
    assert!(text(&stat).contains("tree height"));
    let fsck = wodfs(&["fsck", &img]);
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck));
}

#[test]
fn one_line_errors_and_fsck_exit_codes() {
    let t = Tmp::new("errors");
    // Missing image: operational error.
    let o = wodfs(&["fsck", &t.p("missing")]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("no such file"), "{}", text(&o));
    // A foreign file: not a wodfs image.
    std::fs::write(t.p("foreign"), vec![0x5a; 1 << 20]).unwrap();
    let o = wodfs(&["fsck", &t.p("foreign")]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("not a wodfs image"), "{}", text(&o));
    let o = wodfs(&["stat", &t.p("foreign")]);
    assert!(!o.status.success());
    assert_eq!(text(&o).lines().count(), 1, "{}", text(&o));
    // Bad options and sizes.
    let o = wodfs(&["mkfs", &t.p("x"), "--size", "12Q"]);
    assert!(
        !o.status.success() && text(&o).contains("bad size"),
        "{}",
        text(&o)
    );
    for bad in ["0", "lots", "100"] {
        let o = wodfs(&["mkfs", &t.p("x"), "--size", "256M", "--log-mib", bad]);
        assert!(
            !o.status.success() && text(&o).contains("--log-mib"),
            "--log-mib {bad}: {}",
            text(&o)
        );
    }
    assert_mkfs_log(&t.p("logged"), &["--size", "256M", "--log-mib", "32"], 32);
    // The log by default: 256 MiB from 4 GiB up, 1/16 of a smaller image.
    for (size, log_mib) in [("8G", 256), ("1G", 64), ("256M", 16)] {
        assert_mkfs_log(&t.p(&format!("default-{size}")), &["--size", size], log_mib);
    }
    std::fs::create_dir_all(t.p("mnt")).unwrap();
    mkfs(&t.p("img"));
    let o = wodfs(&["mount", &t.p("img"), &t.p("mnt"), "-o", "frobnicate"]);
    assert!(
        !o.status.success() && text(&o).contains("unknown mount option"),
        "{}",
        text(&o)
    );
    let o = wodfs(&["mount", &t.p("missing"), &t.p("mnt")]);
    assert!(
        !o.status.success() && text(&o).contains("no such file"),
        "{}",
        text(&o)
    );
    let o = wodfs(&["bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn fsck_finds_damaged_nodes_and_namespace_errors() {
    let t = Tmp::new("damage");
    // Namespace damage the engine cannot see: a data block without a file.
    let img = t.p("ns");
    mkfs(&img);
    {
        let tree = Tree::open(Box::new(FileDevice::open(&img).unwrap()), 64 << 20).unwrap();
        let stray = data_key(&FsPath::parse("/nobody").unwrap(), 0);
        tree.insert(&stray, b"stray").unwrap();
        tree.checkpoint().unwrap();
    }
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(
        text(&o).contains("without a path-keyed file"),
        "{}",
        text(&o)
    );
    // Checksummed node damage: flip bytes all over the used node area.
    let img = t.p("nodes");
    mkfs(&img);
    {
        let tree = Tree::open(Box::new(FileDevice::open(&img).unwrap()), 64 << 20).unwrap();
        for i in 0..2000u32 {
            let k = data_key(&FsPath::parse("/f").unwrap(), u64::from(i));
            tree.insert(&k, &vec![(i % 251) as u8; 512]).unwrap();
        }
        tree.checkpoint().unwrap();
    }
    let mut bytes = std::fs::read(&img).unwrap();
    let used: Vec<usize> = (1..bytes.len() / 4096)
        .filter(|b| bytes[b * 4096..(b + 1) * 4096].iter().any(|&x| x != 0))
        .collect();
    for b in used.iter().skip(used.len() / 2) {
        bytes[b * 4096 + 100] ^= 0xff;
    }
    std::fs::write(&img, bytes).unwrap();
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
}

fn fuse_ok() -> bool {
    Path::new("/dev/fuse").exists()
        && std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false)
}

fn daemon_pid(img: &str) -> Option<i32> {
    let out = Command::new("pgrep")
        .arg("-f")
        .arg(format!("wodfs mount {img}"))
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn wait_gone(pid: i32) {
    for _ in 0..200 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("daemon {pid} did not exit");
}

/// Kills the daemon serving `img` with SIGKILL (a crash: no checkpoint,
/// no log flush) and detaches its dead mount from `mnt`.
fn crash_daemon(img: &str, mnt: &str) {
    let pid = daemon_pid(img).expect("daemon running");
    Command::new("kill")
        .arg("-KILL")
        .arg(pid.to_string())
        .status()
        .unwrap();
    wait_gone(pid);
    let _ = Command::new("umount").arg("-l").arg(mnt).output();
}

#[test]
fn daemon_mount_sync_sigterm_and_remount() {
    if !fuse_ok() {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let t = Tmp::new("daemon");
    let (img, mnt) = (t.p("img"), t.p("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    mkfs(&img);
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    // A second mount on the same point is refused.
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(
        !o.status.success() && text(&o).contains("busy"),
        "{}",
        text(&o)
    );
    std::fs::write(format!("{mnt}/file"), b"synced").unwrap();
    let o = wodfs(&["sync", &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    let o = wodfs(&["sync", "/tmp"]);
    assert!(!o.status.success());
    // SIGTERM unmounts cleanly (no dead "transport endpoint" mount).
    let pid = daemon_pid(&img).expect("daemon running");
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    wait_gone(pid);
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&mnt), "still mounted after SIGTERM");
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Remount through the mount(8)-style entry point and read it back.
    let o = wodfs(&[&img, &mnt, "-o", "rw,nosuid"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(format!("{mnt}/file")).unwrap(), b"synced");
    let pid = daemon_pid(&img).expect("daemon running");
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_gone(pid);
}

#[test]
fn sigkill_during_a_workload_loses_nothing_fsynced() {
    if !fuse_ok() {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let t = Tmp::new("sigkill");
    let (img, mnt) = (t.p("img"), t.p("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    mkfs(&img);
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    // fsync'd files, then more work that nobody syncs.
    for i in 0..20 {
        let path = format!("{mnt}/synced-{i}");
        let mut f = std::fs::File::create(&path).unwrap();
        std::io::Write::write_all(&mut f, &vec![i as u8; 10_000 + i * 1000]).unwrap();
        f.sync_all().unwrap();
    }
    std::fs::create_dir(format!("{mnt}/dir")).unwrap();
    std::fs::File::open(format!("{mnt}/dir"))
        .unwrap()
        .sync_all()
        .unwrap();
    for i in 0..200 {
        std::fs::write(format!("{mnt}/dir/unsynced-{i}"), vec![1u8; 5000]).unwrap();
    }
    crash_daemon(&img, &mnt);
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    for i in 0..20 {
        let data = std::fs::read(format!("{mnt}/synced-{i}")).unwrap();
        assert_eq!(data, vec![i as u8; 10_000 + i * 1000], "synced-{i}");
    }
    assert!(Path::new(&format!("{mnt}/dir")).is_dir());
    let pid = daemon_pid(&img).expect("daemon running");
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_gone(pid);
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Bytes nobody synced are durable a few `commit` intervals after they
/// were written, even if no request follows them: the write coalescer
/// hands them to the engine within two intervals, whose log sync makes
/// them durable within one more. Until session 56 the last file written
/// before an idle spell stayed in the daemon's memory: after a crash it
/// was there, empty.
#[test]
fn unsynced_writes_survive_a_crash_three_commit_intervals_later() {
    if !fuse_ok() {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let t = Tmp::new("commit");
    let (img, mnt) = (t.p("img"), t.p("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    mkfs(&img);
    let o = wodfs(&["mount", &img, &mnt, "-o", "commit=1"]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(format!("{mnt}/early"), b"first").unwrap();
    // A read of another file, and the last file written before the wait.
    assert_eq!(std::fs::read(format!("{mnt}/early")).unwrap(), b"first");
    std::fs::write(format!("{mnt}/last"), vec![7u8; 3000]).unwrap();
    std::thread::sleep(Duration::from_millis(4500));
    crash_daemon(&img, &mnt);
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read(format!("{mnt}/early")).unwrap(), b"first");
    assert_eq!(
        std::fs::read(format!("{mnt}/last")).unwrap(),
        vec![7u8; 3000]
    );
    let pid = daemon_pid(&img).expect("daemon running");
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_gone(pid);
}

#[test]
fn a_full_small_image_says_enospc_and_recovers_after_rm() {
    if !fuse_ok() {
        eprintln!("SKIPPED: needs root and /dev/fuse");
        return;
    }
    let t = Tmp::new("full");
    let (img, mnt) = (t.p("img"), t.p("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    let o = wodfs(&["mkfs", &img, "--size", "64M"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = wodfs(&["mount", &img, &mnt]);
    assert!(o.status.success(), "{}", text(&o));
    let mut x = 99u64;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let err = {
        let mut f = std::fs::File::create(format!("{mnt}/fill")).unwrap();
        let mut err = None;
        for i in 0..200u64 {
            let mut c = chunk.clone();
            c[..8].copy_from_slice(&i.to_le_bytes());
            if let Err(e) = std::io::Write::write_all(&mut f, &c).and_then(|()| f.sync_all()) {
                err = Some(e);
                break;
            }
        }
        err.expect("a 64 MiB image took 200 MiB")
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    std::fs::remove_file(format!("{mnt}/fill")).unwrap();
    std::fs::write(format!("{mnt}/after"), b"room again").unwrap();
    let pid = daemon_pid(&img).expect("daemon running");
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    wait_gone(pid);
    let o = wodfs(&["fsck", &img]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
