//! What per-partition LZ4 buys: loads every file under a directory as
//! 4 KiB blocks keyed by path (as the file system stores data), closes,
//! and compares device bytes written and node bytes with and without
//! compression.
//!
//! `cargo run --release -p wodfs-engine --example compression -- [DIR]`

use std::path::Path;
use std::sync::Arc;

use wodfs_device::{CountingDevice, MemDevice};
use wodfs_engine::{Compression, Config, Op, Tree};

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => files(&p, out),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/usr/include".into());
    let mut paths = Vec::new();
    files(Path::new(&dir), &mut paths);
    paths.sort();
    for compression in [Compression::None, Compression::Lz4] {
        let dev = Arc::new(CountingDevice::new(MemDevice::new(4 << 30)));
        let tree = Tree::create(
            Box::new(dev.clone()),
            Config {
                compression,
                ..Config::default()
            },
        )?;
        let before = dev.counts();
        let mut logical = 0u64;
        for p in &paths {
            let data = std::fs::read(p)?;
            let ops: Vec<Op> = data
                .chunks(4096)
                .enumerate()
                .map(|(i, c)| Op::Insert {
                    key: format!("{}\0{i:016x}", p.display()).into_bytes(),
                    value: c.to_vec(),
                })
                .collect();
            logical += data.len() as u64;
            if !ops.is_empty() {
                tree.write(&ops)?;
            }
        }
        tree.checkpoint()?;
        let extents = tree.verify()?.extent_bytes;
        tree.close()?;
        let written = dev.counts().since(&before).write_bytes;
        println!(
            "{compression:?}: {} files, {:.1} MiB of data; node extents {:.1} MiB; device bytes written {:.1} MiB",
            paths.len(),
            logical as f64 / (1 << 20) as f64,
            extents as f64 / (1 << 20) as f64,
            written as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}
