//! The handle is `Send + Sync`: readers run while writers write, and a
//! checkpoint can be requested and waited on from any thread while writes
//! continue. Values carry a checksum of their key and version so a reader
//! can tell a torn or mixed-up value from a correct one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use wodfs_device::MemDevice;
use wodfs_engine::{Config, Op, Tree};

fn value(key: u32, version: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.resize(60, (key ^ version) as u8);
    v
}

fn valid(key: u32, v: &[u8]) -> bool {
    v.len() == 60
        && v[..4] == key.to_le_bytes()
        && v[8..]
            .iter()
            .all(|b| *b == (key ^ u32::from_le_bytes(v[4..8].try_into().unwrap())) as u8)
}

#[test]
fn readers_writers_and_checkpoints_in_parallel() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tree>();

    let dev = Arc::new(MemDevice::new(256 << 20));
    let cfg = Config {
        node_bytes: 32 << 10,
        partition_bytes: 4 << 10,
        fanout: 8,
        cache_bytes: 1 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    };
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let keys = 4000u32;
    let done = Arc::new(AtomicBool::new(false));
    let key = |k: u32| format!("/k/{k:06}").into_bytes();

    let writer = {
        let tree = tree.clone();
        thread::spawn(move || {
            for version in 1..=6u32 {
                for k in 0..keys {
                    // Batches of two keys, checked equal at the end.
                    tree.write(&[
                        Op::Insert {
                            key: key(k),
                            value: value(k, version),
                        },
                        Op::Insert {
                            key: format!("/pair/{k:06}").into_bytes(),
                            value: value(k, version),
                        },
                    ])
                    .unwrap();
                }
            }
        })
    };
    let checkpointer = {
        let (tree, done) = (tree.clone(), done.clone());
        thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                tree.checkpoint().unwrap();
                n += 1;
            }
            n
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (tree, done) = (tree.clone(), done.clone());
            thread::spawn(move || {
                let mut reads = 0u64;
                let mut k = r;
                while !done.load(Ordering::Relaxed) {
                    k = (k * 7 + 13) % keys;
                    if let Some(v) = tree.get(&key(k)).unwrap() {
                        assert!(valid(k, &v), "torn value for key {k}");
                    }
                    reads += 1;
                    if reads.is_multiple_of(500) {
                        let got = tree
                            .range(b"/k/000100", Some(b"/k/000200"))
                            .collect::<Result<Vec<_>, _>>()
                            .unwrap();
                        assert!(got.len() <= 100);
                        for (k, v) in got {
                            let n: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                            assert!(
                                (100..200).contains(&n) && valid(n, &v),
                                "bad scan entry {k:?}"
                            );
                        }
                    }
                }
                reads
            })
        })
        .collect();
    writer.join().unwrap();
    done.store(true, Ordering::Relaxed);
    let checkpoints = checkpointer.join().unwrap();
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(
        checkpoints >= 2 && reads > 1000,
        "checkpoints {checkpoints}, reads {reads}"
    );
    for k in 0..keys {
        let a = tree.get(&key(k)).unwrap().unwrap();
        let b = tree
            .get(format!("/pair/{k:06}").as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(a, value(k, 6));
        assert_eq!(a, b);
    }
    tree.verify().unwrap();
    // The last checkpoint was taken concurrently; after a final one the
    // image reopens with everything.
    tree.checkpoint().unwrap();
    drop(tree);
    let tree = Tree::open(Box::new(dev), cfg.cache_bytes).unwrap();
    assert_eq!(
        tree.get(&key(keys - 1)).unwrap().unwrap(),
        value(keys - 1, 6)
    );
    tree.verify().unwrap();
}
