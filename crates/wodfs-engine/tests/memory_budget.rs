//! The node-cache budget holds under a workload larger than it, measured
//! from outside the engine's own accounting: a counting global allocator
//! (this test binary only) records the peak of live heap bytes.
//!
//! Bound: `cache_bytes` (nodes within two thirds, dirty nodes and the
//! checkpoint images made from them within the last third) plus a fixed
//! overhead of four nodes for the nodes an operation holds outside the
//! cache while it changes them (a parent, a child, the pieces of a split),
//! plus 1 MiB for the rest (block table, iterator batch, allocator slack).

// A global allocator cannot be written without `unsafe`; this wrapper only
// forwards to the system allocator and counts, and lives in a test.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use wodfs_device::FileDevice;
use wodfs_engine::{Config, Tree};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn cache_budget_holds_for_data_five_times_larger() {
    let cfg = Config {
        node_bytes: 512 << 10,
        partition_bytes: 32 << 10,
        fanout: 16,
        cache_bytes: 8 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    };
    let path = std::env::temp_dir().join(format!("wodfs-membudget-{}.img", std::process::id()));
    let dev = FileDevice::create(&path, 1 << 30).unwrap();
    let tree = Tree::create(Box::new(dev), cfg.clone()).unwrap();
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let bound = cfg.cache_bytes + 4 * cfg.node_bytes + (1 << 20);
    let mut x: u64 = 88172645463325252;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let value = [0xabu8; 100];
    let n = 400_000u64; // ~46 MB of 16-byte keys and 100-byte values: 5x the cache
    let mut phases = Vec::new();
    for i in 0..n {
        let k = rand();
        let key: Vec<u8> = k
            .to_be_bytes()
            .iter()
            .chain(&k.to_le_bytes())
            .copied()
            .collect();
        tree.insert(&key, &value).unwrap();
        if i % 150_000 == 0 {
            tree.checkpoint().unwrap();
        }
    }
    phases.push(("random inserts", PEAK.load(Relaxed) - base));
    for _ in 0..20_000 {
        let k = rand();
        let key: Vec<u8> = k
            .to_be_bytes()
            .iter()
            .chain(&k.to_le_bytes())
            .copied()
            .collect();
        tree.get(&key).unwrap();
    }
    phases.push(("point reads", PEAK.load(Relaxed) - base));
    let mut count = 0u64;
    for item in tree.range(&[], None) {
        item.unwrap();
        count += 1;
    }
    assert!(count > n * 99 / 100, "{count}");
    phases.push(("full scan", PEAK.load(Relaxed) - base));
    tree.checkpoint().unwrap();
    phases.push(("checkpoint", PEAK.load(Relaxed) - base));
    eprintln!("peak heap above baseline by phase: {phases:?}; bound {bound}");
    drop(tree);
    let _ = std::fs::remove_file(&path);
    for (phase, peak) in phases {
        assert!(
            peak <= bound,
            "{phase}: peak {peak} bytes exceeds the bound {bound}"
        );
    }
}
