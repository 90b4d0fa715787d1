//! Mounting real wodfs file systems in tests: an image file in a fresh
//! temporary directory, the adapter served on a thread, unmount with
//! umount(8). Tests skip (with the reason printed) only when /dev/fuse is
//! missing or the test does not run as root.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use wodfs_device::FileDevice;
use wodfs_engine::Config;
use wodfs_fs::{Fs, FsOptions};
use wodfs_fuse::{MountOptions, RequestCounters};

/// Why FUSE tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    if rustix_uid() != 0 {
        return Some("not running as root".into());
    }
    None
}

fn rustix_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Returns early from a test (printing why) when FUSE is unavailable.
#[macro_export]
macro_rules! require_fuse {
    () => {
        if let Some(reason) = common::skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// A scratch directory removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wodfs-fuse-test-{}-{name}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        Scratch { dir }
    }

    pub fn image(&self) -> PathBuf {
        self.dir.join("image")
    }

    pub fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.mnt()).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates an empty file system image of `bytes`.
pub fn mkfs(image: &Path, bytes: u64) {
    let dev = FileDevice::create(image, bytes).unwrap();
    let cfg = Config {
        log_bytes: 16 << 20,
        cache_bytes: 64 << 20,
        ..Config::default()
    };
    Fs::mkfs(Box::new(dev), cfg, 0, 0)
        .unwrap()
        .checkpoint()
        .unwrap();
}

/// A mounted file system.
pub struct Mounted {
    pub mnt: PathBuf,
    pub fs: Arc<Fs>,
    pub counters: Arc<RequestCounters>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

/// Mounts `image` on `mnt`.
pub fn mount(image: &Path, mnt: &Path, writeback: bool) -> Mounted {
    mount_device(Box::new(open_image(image)), mnt, writeback)
}

/// Opens `image`, waiting out a brief `ResourceBusy`: the image's lock is
/// an `flock` on its descriptor, and a child another test thread is
/// spawning at the moment the previous mount closes it (`umount`, `mkfs`)
/// holds a copy of the descriptor, and with it the lock, until it execs.
pub fn open_image(image: &Path) -> FileDevice {
    for _ in 0..100 {
        match FileDevice::open(image) {
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
    FileDevice::open(image).unwrap()
}

/// Mounts the file system on `dev` (for instance a counting wrapper).
pub fn mount_device(dev: Box<dyn wodfs_device::Device>, mnt: &Path, writeback: bool) -> Mounted {
    mount_with(dev, mnt, writeback, HOUR_MS)
}

/// An hour: runs are not handed over by age during a test (that counts
/// batches) unless it asks for it.
const HOUR_MS: u64 = 3_600_000;

/// Mounts the file system on `dev`, handing the write coalescer's runs
/// to the engine by age every `run_age_ms`.
pub fn mount_with(
    dev: Box<dyn wodfs_device::Device>,
    mnt: &Path,
    writeback: bool,
    run_age_ms: u64,
) -> Mounted {
    let image = mnt.display().to_string();
    let fs = Arc::new(Fs::open(dev, 64 << 20, FsOptions::default()).unwrap());
    let counters = Arc::new(RequestCounters::default());
    let opts = MountOptions {
        fs_name: image,
        writeback_cache: writeback,
        counters: Arc::clone(&counters),
        run_age_ms,
        ..MountOptions::default()
    };
    let (tx, rx) = mpsc::channel();
    let (fs2, mnt2) = (Arc::clone(&fs), mnt.to_path_buf());
    let thread = std::thread::spawn(move || {
        wodfs_fuse::serve(fs2, &mnt2, &opts, move || {
            let _ = tx.send(());
        })
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("mount did not come up");
    Mounted {
        mnt: mnt.to_path_buf(),
        fs,
        counters,
        thread: Some(thread),
    }
}

impl Mounted {
    /// Unmounts and waits for the daemon side to checkpoint and stop.
    pub fn unmount(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(t) = self.thread.take() {
            // A just-closed file can keep the mount busy for a moment
            // (its release is still in flight): retry briefly.
            let mut out = None;
            for _ in 0..50 {
                let o = Command::new("umount").arg(&self.mnt).output().unwrap();
                if o.status.success() {
                    out = None;
                    break;
                }
                out = Some(String::from_utf8_lossy(&o.stderr).into_owned());
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(out.is_none(), "umount failed: {out:?}");
            t.join().expect("serve thread").expect("serve");
        }
    }

    /// Returns once the daemon has read a request sent now: what it does
    /// after answering the previous one (a CREATE writes the pending runs
    /// after its answer) is done by then. A STATFS always reaches it.
    pub fn settled(&self) {
        rustix::fs::statvfs(&self.mnt).expect("statvfs of the mount");
    }

    /// Runs a shell command inside the mount; panics with its output if it
    /// fails.
    pub fn sh(&self, script: &str) -> String {
        sh_in(&self.mnt, script)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
        }
    }
}

/// Runs `script` with bash in `dir`; panics with its output on failure.
pub fn sh_in(dir: &Path, script: &str) -> String {
    let out = Command::new("bash")
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "`{script}` failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `len` bytes of a pattern that `seed` varies, so that a file's contents
/// tell which write put them there.
pub fn body(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(seed) % 251) as u8)
        .collect()
}
