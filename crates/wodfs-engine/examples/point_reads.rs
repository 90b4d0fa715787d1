//! Cold random point reads against partition (basement) size: builds a
//! store of random 16-byte keys and 100-byte values on an image file, drops
//! the page cache, reopens with a small node cache and reads random keys.
//!
//! `cargo run --release -p wodfs-engine --example point_reads -- [records] [partition KiB…]`
//! (root, for drop_caches).

use std::time::Instant;

use wodfs_device::FileDevice;
use wodfs_engine::{Config, Op, Tree};

fn key(i: u64) -> Vec<u8> {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x.to_be_bytes()
        .iter()
        .chain(&i.to_le_bytes())
        .copied()
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    let sizes: Vec<usize> = args.map(|s| s.parse()).collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![128, 32, 16]
    } else {
        sizes
    };
    for kib in sizes {
        let path = std::env::temp_dir().join(format!("wodfs-point-reads-{kib}.img"));
        let cfg = Config {
            partition_bytes: kib << 10,
            cache_bytes: 48 << 20,
            ..Config::default()
        };
        let tree = Tree::create(Box::new(FileDevice::create(&path, 4 << 30)?), cfg.clone())?;
        let value = [7u8; 100];
        for chunk in (0..records).collect::<Vec<_>>().chunks(10_000) {
            let ops: Vec<Op> = chunk
                .iter()
                .map(|i| Op::Insert {
                    key: key(*i),
                    value: value.to_vec(),
                })
                .collect();
            tree.write(&ops)?;
        }
        tree.close()?;
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
        let tree = Tree::open(Box::new(FileDevice::open(&path)?), cfg.cache_bytes)?;
        let reads = 50_000u64;
        let start = Instant::now();
        for r in 0..reads {
            let i = r.wrapping_mul(2_654_435_761) % records;
            assert!(tree.get(&key(i))?.is_some());
        }
        let secs = start.elapsed().as_secs_f64();
        let s = tree.stats();
        println!(
            "partition {kib:>3} KiB: {:>8.0} cold point reads/s; per read {:.2} header + {:.2} partition reads",
            reads as f64 / secs,
            s.header_reads as f64 / reads as f64,
            s.partition_reads as f64 / reads as f64
        );
        drop(tree);
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
