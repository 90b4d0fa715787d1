//! `wodfs mkfs IMAGE [--size 8G] [--node-kib N] [--log-mib N] [--force]`.

use std::path::Path;

use wodfs_device::{Device, FileDevice};
use wodfs_engine::{Config, Tree};
use wodfs_fs::Fs;

use crate::args::parse_size;
use crate::image::Fail;

const USAGE: &str = "usage: wodfs mkfs IMAGE [--size 8G] [--node-kib 4096] [--log-mib N] [--force]";

/// The log of an image of 4 GiB or more (a smaller one gets 1/16 of its
/// size); four times the engine's library default ([`Config::default`]).
/// Why this size, and what it was measured against:
/// `docs/ARCHITECTURE.md`, "Durability", Recovery.
const LOG_BYTES: u64 = 256 << 20;

/// Runs `mkfs`.
pub fn run(args: &[String]) -> Result<(), Fail> {
    let mut size: Option<u64> = None;
    let mut node_kib: Option<usize> = None;
    let mut log_mib: Option<u64> = None;
    let mut force = false;
    let mut image = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--size" | "-s" => {
                let v = it.next().ok_or_else(|| Fail::new(USAGE))?;
                size = Some(parse_size(v).map_err(Fail::new)?);
            }
            "--node-kib" => {
                let v = it.next().ok_or_else(|| Fail::new(USAGE))?;
                node_kib = Some(
                    v.parse()
                        .map_err(|_| Fail::new(format!("bad --node-kib {v:?}")))?,
                );
            }
            "--log-mib" => {
                let v = it.next().ok_or_else(|| Fail::new(USAGE))?;
                log_mib = Some(
                    v.parse()
                        .ok()
                        .filter(|&m| m >= 1)
                        .ok_or_else(|| Fail::new(format!("bad --log-mib {v:?}")))?,
                );
            }
            "--force" | "-f" => force = true,
            s if s.starts_with('-') => {
                return Err(Fail::new(format!("unknown option {s}\n{USAGE}")))
            }
            s if image.is_none() => image = Some(s.to_string()),
            _ => return Err(Fail::new(USAGE)),
        }
    }
    let image = image.ok_or_else(|| Fail::new(USAGE))?;
    let path = Path::new(&image);
    let is_blockdev = std::fs::metadata(path)
        .map(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
        .unwrap_or(false);
    if !force && path.exists() {
        if let Ok(dev) = FileDevice::open(path) {
            if dev.size_bytes() > 0 && Tree::open(Box::new(dev), 256 << 20).is_ok() {
                return Err(Fail::new(format!(
                    "{image}: already holds a wodfs image (use --force to overwrite)"
                )));
            }
        }
    }
    let size = match (size, is_blockdev) {
        (Some(s), _) => s,
        (None, true) => 0,
        (None, false) => 8 << 30,
    };
    let dev = FileDevice::create(path, size).map_err(|e| Fail::new(format!("{image}: {e}")))?;
    let dev_bytes = dev.size_bytes();
    let mut cfg = Config::default();
    match node_kib {
        Some(k) => cfg.node_bytes = k << 10,
        // Small images get smaller nodes: the engine wants room for a few
        // dozen nodes besides the log.
        None if dev_bytes < 1 << 30 => {
            let fit = (dev_bytes / 256).next_power_of_two() as usize;
            cfg.node_bytes = fit.clamp(64 << 10, cfg.node_bytes);
        }
        None => {}
    }
    cfg.partition_bytes = cfg.partition_bytes.min(cfg.node_bytes / 4).max(4096);
    cfg.log_bytes = match log_mib {
        Some(m) if m << 20 > dev_bytes / 4 => {
            return Err(Fail::new(format!(
                "--log-mib {m}: the log may take at most a quarter of the image"
            )))
        }
        Some(m) => m << 20,
        // A small image gets a proportionally small log.
        None => (dev_bytes / 16).clamp(1 << 20, LOG_BYTES) / 4096 * 4096,
    };
    cfg.cache_bytes = ((dev_bytes / 8) as usize)
        .min(cfg.cache_bytes)
        .max(8 * cfg.node_bytes);
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    Fs::mkfs(Box::new(dev), cfg.clone(), uid, gid)
        .map_err(|e| Fail::new(format!("{image}: cannot create a file system: {e}")))?;
    println!(
        "wodfs: created {image}: {} MiB, {} KiB nodes",
        dev_bytes >> 20,
        cfg.node_bytes >> 10
    );
    Ok(())
}
