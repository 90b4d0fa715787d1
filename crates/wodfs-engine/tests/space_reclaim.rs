//! Space under a range delete comes back through `reclaim_space` (what the
//! file system's background work and `rm` of a large file rely on), at
//! every level the delete has reached, not only the root's buffers.

use wodfs_device::MemDevice;
use wodfs_engine::{Config, Tree};

fn key(i: u64) -> Vec<u8> {
    format!("/data/file{:03}/{:010}", i % 7, i).into_bytes()
}

#[test]
fn reclaim_reaches_range_deletes_waiting_below_the_root() {
    let cfg = Config {
        node_bytes: 256 << 10,
        partition_bytes: 16 << 10,
        fanout: 16,
        cache_bytes: 6 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    };
    let tree = Tree::create(Box::new(MemDevice::new(512 << 20)), cfg).unwrap();
    // Incompressible values, so the space they take is what they are.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..20_000 {
        let value: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        tree.insert(&key(i), &value).unwrap();
    }
    tree.checkpoint().unwrap();
    assert!(tree.height() >= 2, "height {}", tree.height());
    let full = tree.space().used_bytes;
    tree.delete_range(b"/data/", b"/data0").unwrap();
    // One flush at a time: the first calls move the delete out of the
    // root's buffers to the level below, where later calls must find it.
    for _ in 0..200 {
        tree.reclaim_space(1).unwrap();
    }
    let report = tree.verify().unwrap();
    assert_eq!(report.leaf_entries, 0, "{report:?}");
    let used = tree.space().used_bytes;
    assert!(
        used * 20 < full,
        "{used} bytes still used of {full} after the delete"
    );
}
