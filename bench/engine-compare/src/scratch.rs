//! Where a store lives while it is measured.
//!
//! The full run gives every store a fresh ext4 file system on a loop device
//! over a sparse image file (`losetup --direct-io=on`, so the host's page
//! cache does not absorb the loop device's I/O). The loop device's
//! `/sys/block/loopN/stat` then counts every byte the engine, the page
//! cache and ext4 sent to the device. `mkfs` initialises inode tables and
//! the journal eagerly, so no background ext4 work lands in a measurement.
//!
//! Quick mode uses a plain temporary directory and reports no device
//! bytes. Either way the guard removes everything it made when it drops,
//! on success, on error and on an interrupt the harness caught.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

const SECTOR_BYTES: u64 = 512;

#[derive(Debug)]
pub struct Scratch {
    root: PathBuf,
    store_dir: PathBuf,
    image: Option<PathBuf>,
    loop_device: Option<String>,
    mount_dir: Option<PathBuf>,
}

/// Cumulative counters of one block device.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DeviceStat {
    pub read_ios: u64,
    pub read_bytes: u64,
    pub write_ios: u64,
    pub write_bytes: u64,
}

impl DeviceStat {
    pub fn since(self, earlier: DeviceStat) -> DeviceStat {
        DeviceStat {
            read_ios: self.read_ios.saturating_sub(earlier.read_ios),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_ios: self.write_ios.saturating_sub(earlier.write_ios),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

impl Scratch {
    /// A plain directory under `base`.
    pub fn temp(base: &Path, label: &str) -> Result<Self> {
        let root = base.join(format!("engine-compare-{}-{label}", std::process::id()));
        let scratch = Self {
            store_dir: root.join("store"),
            root,
            image: None,
            loop_device: None,
            mount_dir: None,
        };
        fs::create_dir_all(&scratch.store_dir)
            .with_context(|| format!("create {}", scratch.store_dir.display()))?;
        Ok(scratch)
    }

    /// A fresh ext4 on a loop device over a sparse `image_bytes` file under
    /// `base`. Needs root.
    pub fn loop_ext4(base: &Path, label: &str, image_bytes: u64) -> Result<Self> {
        let root = base.join(format!("engine-compare-{}-{label}", std::process::id()));
        let mount_dir = root.join("mnt");
        let mut scratch = Self {
            store_dir: mount_dir.join("store"),
            root,
            image: None,
            loop_device: None,
            mount_dir: None,
        };
        fs::create_dir_all(&mount_dir)
            .with_context(|| format!("create {}", mount_dir.display()))?;

        let image = scratch.root.join("fs.img");
        fs::File::create(&image)
            .and_then(|file| file.set_len(image_bytes))
            .with_context(|| format!("create {}", image.display()))?;
        scratch.image = Some(image.clone());

        let device = command(
            Command::new("losetup")
                .args(["--find", "--show", "--direct-io=on"])
                .arg(&image),
        )?;
        let device = device.trim().to_string();
        if !device.starts_with("/dev/loop") {
            bail!("losetup printed {device:?}, expected a /dev/loopN path");
        }
        scratch.loop_device = Some(device.clone());

        command(
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-i", "1048576"])
                .args(["-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard"])
                .arg(&device),
        )?;
        command(
            Command::new("mount")
                .args(["-o", "noatime"])
                .arg(&device)
                .arg(&mount_dir),
        )?;
        scratch.mount_dir = Some(mount_dir);
        fs::create_dir(&scratch.store_dir)
            .with_context(|| format!("create {}", scratch.store_dir.display()))?;
        Ok(scratch)
    }

    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// `loopN`, when the store is on a loop device.
    pub fn device_name(&self) -> Option<&str> {
        self.loop_device
            .as_deref()
            .and_then(|path| path.strip_prefix("/dev/"))
    }

    /// Whether the loop device really does direct I/O to its image (the
    /// kernel falls back to buffered I/O when it cannot).
    pub fn direct_io(&self) -> Option<bool> {
        let name = self.device_name()?;
        let dio = fs::read_to_string(format!("/sys/block/{name}/loop/dio")).ok()?;
        Some(dio.trim() == "1")
    }

    pub fn device_stat(&self) -> Result<Option<DeviceStat>> {
        let Some(name) = self.device_name() else {
            return Ok(None);
        };
        let path = format!("/sys/block/{name}/stat");
        let text = fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("parse {path}: {text:?}"))?;
        if fields.len() < 7 {
            bail!("{path} has {} fields, expected at least 7", fields.len());
        }
        Ok(Some(DeviceStat {
            read_ios: fields[0],
            read_bytes: fields[2] * SECTOR_BYTES,
            write_ios: fields[4],
            write_bytes: fields[6] * SECTOR_BYTES,
        }))
    }

    /// Writes back whatever the file system still holds dirty (`syncfs`),
    /// so the device counters include it.
    pub fn sync(&self) -> Result<()> {
        if let Some(mount_dir) = &self.mount_dir {
            command(Command::new("sync").arg("-f").arg(mount_dir))?;
        }
        Ok(())
    }

    /// Bytes allocated to the store's files (sparse holes not counted).
    pub fn store_bytes(&self) -> u64 {
        allocated_bytes(&self.store_dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mount_dir) = self.mount_dir.take() {
            // A child that was just killed may still hold files open for a
            // moment; retry before giving up.
            let mut unmounted = false;
            for _ in 0..20 {
                if command(Command::new("umount").arg(&mount_dir)).is_ok() {
                    unmounted = true;
                    break;
                }
                thread::sleep(Duration::from_millis(250));
            }
            if !unmounted {
                eprintln!("engine-compare: cannot unmount {}", mount_dir.display());
                return;
            }
        }
        if let Some(device) = self.loop_device.take() {
            if let Err(e) = command(Command::new("losetup").arg("-d").arg(&device)) {
                eprintln!("engine-compare: {e:#}");
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.root) {
            eprintln!("engine-compare: cannot remove {}: {e}", self.root.display());
        }
    }
}

fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * SECTOR_BYTES;
    if !meta.is_dir() {
        return own;
    }
    let children = fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| allocated_bytes(&entry.path()))
                .sum()
        })
        .unwrap_or(0);
    own + children
}

/// Runs a command to completion; its stdout on success, an error that
/// carries its stderr otherwise.
fn command(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let output = cmd.output().with_context(|| format!("run {shown}"))?;
    if !output.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Writes back all dirty data and empties the page, dentry and inode
/// caches of the whole machine, so the next open starts cold.
pub fn drop_caches() -> Result<()> {
    command(&mut Command::new("sync"))?;
    fs::write("/proc/sys/vm/drop_caches", "3").context("write /proc/sys/vm/drop_caches")
}
