//! The back-pressure worker pays what writers hand it: a stream written
//! while it runs is bound as it goes (the unbound inserts stay under the
//! engine's round size), stopping it pays what is still owed, and after it
//! stops writers pay inline again.

mod common;

use std::sync::Arc;

use common::{file, root};
use wodfs_device::MemDevice;
use wodfs_engine::Config;
use wodfs_fs::{Fs, KillPriv};

const MIB: usize = 1 << 20;
/// The engine asks for a binding round at this many unbound inserts and
/// binds inline at twice as many (`UNBOUND_BIND_AT`).
const BIND_ROUND: usize = 8 * 1024;

fn stream(fs: &Fs, name: &str, mib: usize) {
    let f = file(fs, name);
    let chunk = vec![7u8; MIB];
    for i in 0..mib {
        fs.write(&f, (i * MIB) as u64, &chunk, KillPriv::Keep)
            .unwrap();
    }
}

#[test]
fn the_worker_pays_a_streams_back_pressure() {
    let cfg = Config {
        log_bytes: 64 << 20,
        cache_bytes: 64 << 20,
        ..Config::default()
    };
    let dev = Arc::new(MemDevice::new(2 << 30));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), cfg, 0, 0).unwrap();
    let worker = fs.start_back_pressure_worker();
    // 320 MiB is 81,920 blocks: without binding they would all be pending.
    stream(&fs, "a", 320);
    worker.stop();
    let left = fs.tree().unbound_pending();
    assert!(left < 2 * BIND_ROUND, "{left} unbound inserts left");
    // Without a worker, writers pay inline.
    stream(&fs, "b", 320);
    let left = fs.tree().unbound_pending();
    assert!(left < 2 * BIND_ROUND, "{left} unbound inserts left");
    fs.fsync().unwrap();
    assert_eq!(fs.tree().unbound_pending(), 0);
    let (_, a) = fs.lookup(&root(), b"a").unwrap();
    assert_eq!(fs.read(&a, 319 * MIB as u64, 4).unwrap(), [7; 4]);
}
