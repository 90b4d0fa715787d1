//! Space under a range delete comes back through `reclaim_space` (what the
//! file system's background work and `rm` of a large file rely on), at
//! every level the delete has reached, not only the root's buffers.

mod common;

use common::{incompressible, small_nodes, Rng};
use wodfs_device::MemDevice;
use wodfs_engine::Tree;

fn key(i: u64) -> Vec<u8> {
    format!("/data/file{:03}/{:010}", i % 7, i).into_bytes()
}

#[test]
fn reclaim_reaches_range_deletes_waiting_below_the_root() {
    let tree = Tree::create(Box::new(MemDevice::new(512 << 20)), small_nodes()).unwrap();
    // Incompressible values, so the space they take is what they are.
    let mut rng = Rng(7);
    for i in 0..20_000 {
        tree.insert(&key(i), &incompressible(&mut rng, 4096))
            .unwrap();
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
