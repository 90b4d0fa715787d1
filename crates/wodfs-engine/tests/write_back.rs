//! Dirty nodes written back without the tree's lock (the write-back thread
//! and the checkpoint's first pass) against the model: while a writer keeps
//! changing nodes that are being serialized, readers and a checkpointer
//! run, and every value, the tree's invariants and a reopen agree with a
//! `BTreeMap` that saw the same operations.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{apply, incompressible, small_nodes, Model, Rng};
use wodfs_device::MemDevice;
use wodfs_engine::{BackgroundConfig, Config, Op, Tree};

fn key(k: u64) -> Vec<u8> {
    format!("/f/{:05}/{:04}", k / 64, k % 64).into_bytes()
}

fn check(tree: &Tree, model: &Model) {
    let all: Vec<_> = tree.range(&[], None).map(|r| r.unwrap()).collect();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), want.len(), "entry count");
    assert!(all == want, "contents differ from the model");
}

#[test]
fn write_back_thread_and_checkpoints_agree_with_the_model() {
    let dev = Arc::new(MemDevice::new(512 << 20));
    let cfg = Config {
        cache_bytes: 3 << 20,
        log_bytes: 4 << 20,
        ..small_nodes()
    };
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let bg = tree.start_background(BackgroundConfig {
        log_sync_every: Duration::from_millis(5),
        checkpoint_every: Duration::from_millis(40),
        reclaim_flushes: 4,
        write_back_thread: true,
    });
    let done = Arc::new(AtomicBool::new(false));
    // Readers look at random keys while nodes turn clean under them; a
    // value must be one the writer wrote for that key (it starts with the
    // key) or absent.
    let readers: Vec<_> = (0..2)
        .map(|seed| {
            let (tree, done) = (tree.clone(), done.clone());
            thread::spawn(move || {
                let mut rng = Rng(100 + seed);
                let mut seen = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let k = key(rng.below(6000));
                    if let Some(v) = tree.get(&k).unwrap() {
                        assert!(v.starts_with(&k), "a value under the wrong key");
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    let mut rng = Rng(7);
    let mut model = Model::new();
    for step in 0..30_000u64 {
        let k = key(rng.below(6000));
        let op = match rng.below(20) {
            0..=11 => {
                let mut value = k.clone();
                let n = 200 + rng.below(1800) as usize;
                value.extend(incompressible(&mut rng, n));
                Op::Insert { key: k, value }
            }
            12..=14 => Op::Patch {
                data: incompressible(&mut rng, 16),
                offset: k.len() as u32 + rng.below(64) as u32,
                key: k,
            },
            15..=17 => Op::Delete { key: k },
            18 => {
                // A narrow range: a few keys of one file.
                let first = rng.below(6000);
                Op::DeleteRange {
                    lo: key(first),
                    hi: key(first + 1 + rng.below(8)),
                }
            }
            _ => Op::Truncate {
                len: k.len() as u32 + rng.below(100) as u32,
                key: k,
            },
        };
        // A patch into a missing value fills the key's place with zeros;
        // keep every value starting with its key for the readers' check.
        if let Op::Patch { key, .. } = &op {
            if !model.contains_key(key) {
                continue;
            }
        }
        apply(&mut model, &op);
        tree.write(&[op]).unwrap();
        if step % 5000 == 4999 {
            check(&tree, &model);
        }
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    bg.stop().unwrap();
    let stats = tree.stats();
    assert!(
        stats.unlocked_writes > 100,
        "the write-back thread and checkpoints wrote only {} nodes without the lock",
        stats.unlocked_writes
    );
    // Leaves flushed into were read ahead while the writer worked, and
    // the values above came out right through them.
    assert!(stats.flush_reads_ahead > 0, "{stats:?}");
    tree.verify().unwrap();
    check(&tree, &model);
    // Space the thread was handed for queued nodes, and what its images
    // left unused, all came back: what the tree references is all that is
    // used, as a reopen (which rebuilds free space from the checkpoint's
    // table) counts it.
    tree.checkpoint().unwrap();
    tree.checkpoint().unwrap();
    let used = tree.space().used_bytes;
    tree.close().unwrap();
    let tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
    tree.verify().unwrap();
    check(&tree, &model);
    assert_eq!(
        tree.space().used_bytes,
        used,
        "space used before the close and as the reopened checkpoint counts it"
    );
}
