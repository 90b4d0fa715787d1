//! Recovery of a full log. Bound (docs/ARCHITECTURE.md, "Recovery"): open
//! reads the log sequentially from the checkpoint's position, a 1 MiB
//! window at a time (a 3 MiB log here: several windows), and replays at
//! most the records
//! written since the last checkpoint, which the 3/4-full checkpoint trigger
//! caps at 3/4 of the region; replay applies them in memory, reading only
//! the nodes they touch. The test checks that every record is replayed,
//! exactly once, and prints the time (timings are not asserted).
//! `WODFS_RECOVERY_LOG_MIB` sets the log size (default 4; the default
//! configuration's is 64).

mod common;

use std::sync::Arc;
use std::time::Instant;

use wodfs_device::MemDevice;
use wodfs_engine::{Config, Tree};

#[test]
fn a_full_log_replays_every_record_once() {
    let log_mib: u64 = common::env_u64("WODFS_RECOVERY_LOG_MIB", 4);
    let cfg = Config {
        node_bytes: 256 << 10,
        partition_bytes: 32 << 10,
        cache_bytes: 32 << 20,
        log_bytes: log_mib << 20,
        ..Config::default()
    };
    let dev = Arc::new(MemDevice::new((log_mib << 20) * 8 + (256 << 20)));
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let mut written = 0u64;
    // Fill the log to just under the checkpoint trigger, then sync.
    loop {
        let (used, size) = tree.log_usage();
        if used + 600 > size * 3 / 4 {
            break;
        }
        let k = format!("/file{:03}/{:08}", written % 97, written).into_bytes();
        tree.insert(&k, &[written as u8; 500]).unwrap();
        written += 1;
    }
    tree.sync().unwrap();
    assert_eq!(tree.stats().checkpoints, 1, "only the one at creation");
    drop(tree);
    let start = Instant::now();
    let tree = Tree::open(Box::new(dev), cfg.cache_bytes).unwrap();
    let took = start.elapsed();
    let s = tree.stats();
    eprintln!(
        "recovered {} records ({} MiB log) in {:.3} s",
        s.replayed_records,
        log_mib,
        took.as_secs_f64()
    );
    assert_eq!(s.replayed_records, written);
    assert_eq!(s.recoveries, 1);
    for i in [0, written / 2, written - 1] {
        let k = format!("/file{:03}/{:08}", i % 97, i).into_bytes();
        assert_eq!(tree.get(&k).unwrap(), Some(vec![i as u8; 500]));
    }
    tree.verify().unwrap();
}
