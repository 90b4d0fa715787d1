//! Device errors: after a failed write or sync the store refuses further
//! writes (a sticky error) instead of going on in an unknown state; reads
//! keep working; the image reopens at its last durable state.

mod common;

use std::sync::Arc;

use common::{apply, Model};
use wodfs_device::{FaultConfig, FaultDevice, FaultKind, MemDevice};
use wodfs_engine::{Config, Error, Op, Tree};

fn cfg() -> Config {
    Config {
        cache_bytes: 12 << 10,
        log_bytes: 64 << 10,
        ..Config::tiny()
    }
}

fn ins(i: u32) -> Op {
    Op::Insert {
        key: format!("/k/{i:05}").into_bytes(),
        value: vec![i as u8; 50],
    }
}

/// The device's crash image (what it holds durably), opened and checked.
fn reopen_verified(dev: &FaultDevice) -> Tree {
    let reopened = Tree::open(
        Box::new(MemDevice::from_bytes(dev.crash_image())),
        cfg().cache_bytes,
    )
    .unwrap();
    reopened.verify().unwrap();
    reopened
}

fn check_sticky(kind: FaultKind, arm: impl Fn(&FaultDevice)) {
    let dev = Arc::new(FaultDevice::new(8 << 20, FaultConfig::with_seed(7)));
    let tree = Tree::create(Box::new(dev.clone()), cfg()).unwrap();
    let mut model = Model::new();
    for i in 0..300 {
        tree.write(&[ins(i)]).unwrap();
        apply(&mut model, &ins(i));
    }
    tree.sync().unwrap();
    let durable = model.clone();
    arm(&dev);
    let mut failed = None;
    for i in 300..3000 {
        let r = tree
            .write(&[ins(i)])
            .and_then(|_| if i % 50 == 0 { tree.sync() } else { Ok(()) });
        if let Err(e) = r {
            failed = Some(e);
            break;
        }
    }
    let e = failed.expect("the armed fault must surface");
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // Sticky: every later write or sync is refused, with the cause.
    let again = tree.write(&[ins(99_999)]).unwrap_err();
    assert!(matches!(again, Error::Poisoned(_)), "{again}");
    assert!(matches!(tree.sync().unwrap_err(), Error::Poisoned(_)));
    assert!(matches!(tree.checkpoint().unwrap_err(), Error::Poisoned(_)));
    // Reads still work.
    assert_eq!(tree.get(b"/k/00007").unwrap(), Some(vec![7; 50]));
    // Reopen: at least what was synced, and a consistent tree.
    drop(tree);
    let reopened = reopen_verified(&dev);
    for (k, v) in &durable {
        assert_eq!(
            reopened.get(k).unwrap().as_ref(),
            Some(v),
            "{kind:?}: lost a synced key"
        );
    }
}

#[test]
fn failed_write_makes_the_store_read_only() {
    check_sticky(FaultKind::Eio, |d| d.arm_write_fault(40, FaultKind::Eio));
}

#[test]
fn failed_sync_makes_the_store_read_only() {
    check_sticky(FaultKind::Eio, |d| d.arm_sync_fault(1, FaultKind::Eio));
}

#[test]
fn device_enospc_is_reported_and_sticky() {
    check_sticky(FaultKind::Enospc, |d| {
        d.arm_write_fault(25, FaultKind::Enospc)
    });
}

#[test]
fn a_full_store_refuses_inserts_but_stays_writable_and_deletes_work() {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let cfg = Config {
        log_bytes: 256 << 10,
        ..cfg()
    };
    let tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let mut model = Model::new();
    let mut written = 0;
    let err = loop {
        let op = Op::Insert {
            key: format!("/k/{written:06}").into_bytes(),
            value: vec![written as u8; 200],
        };
        match tree.write(std::slice::from_ref(&op)) {
            Ok(()) => {
                apply(&mut model, &op);
                written += 1;
            }
            Err(e) => break e,
        }
        assert!(written < 100_000, "the device never filled");
    };
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    // Only that batch failed: the store is not poisoned.
    tree.sync().unwrap();
    tree.checkpoint().unwrap();
    let full = tree.space();
    // Deletes still work on a full store. The next insert that does not
    // fit makes the engine push the range delete down (pruning the covered
    // leaves unread) and checkpoint, so the released space is reused.
    tree.delete_range(b"/k/", b"/k0").unwrap();
    model.clear();
    tree.checkpoint().unwrap();
    tree.write(&[Op::Insert {
        key: b"/k/again".to_vec(),
        value: vec![1; 8],
    }])
    .unwrap();
    apply(
        &mut model,
        &Op::Insert {
            key: b"/k/again".to_vec(),
            value: vec![1; 8],
        },
    );
    tree.checkpoint().unwrap();
    tree.checkpoint().unwrap();
    let after = tree.space();
    assert!(
        after.free_bytes > full.free_bytes,
        "deletes freed nothing: {full:?} -> {after:?}"
    );
    // Inserts are admitted again, and everything reopens intact.
    for i in 0..100 {
        let op = Op::Insert {
            key: format!("/k/{i:06}").into_bytes(),
            value: vec![2; 200],
        };
        tree.write(std::slice::from_ref(&op)).unwrap();
        apply(&mut model, &op);
    }
    tree.sync().unwrap();
    drop(tree);
    let tree = Tree::open(Box::new(dev), cfg.cache_bytes).unwrap();
    tree.verify().unwrap();
    let got: Model = tree.range(&[], None).map(|r| r.unwrap()).collect();
    assert_eq!(got, model);
}

#[test]
fn a_full_node_area_is_an_error_not_a_panic() {
    // A device with little room and a checkpoint after every write: the
    // writes eventually fail with NoSpace, cleanly.
    let dev = Arc::new(MemDevice::new(300 << 10));
    let tree = Tree::create(
        Box::new(dev),
        Config {
            log_bytes: 16 << 10,
            ..cfg()
        },
    )
    .unwrap();
    let mut err = None;
    for i in 0..100_000 {
        if let Err(e) = tree.write(&[ins(i)]).and_then(|_| tree.checkpoint()) {
            err = Some(e);
            break;
        }
    }
    let e = err.expect("the device must fill up");
    assert!(matches!(e, Error::NoSpace { .. }), "{e}");
}

#[test]
fn deleted_space_comes_back_through_the_background_thread() {
    let dev = Arc::new(MemDevice::new(16 << 20));
    let tree = Tree::create(
        Box::new(dev),
        Config {
            log_bytes: 1 << 20,
            ..cfg()
        },
    )
    .unwrap();
    tree.checkpoint().unwrap();
    let empty = tree.space().used_bytes;
    for i in 0..3000 {
        tree.write(&[ins(i)]).unwrap();
    }
    tree.checkpoint().unwrap();
    let full = tree.space();
    // The tree's own nodes, beyond what an empty store uses (its root,
    // the block table): what the delete must give back, most of it.
    let data = full.used_bytes - empty;
    tree.delete_range(b"/k/", b"/k0").unwrap();
    tree.checkpoint().unwrap();
    // Nothing was under pressure: the range delete is still buffered.
    assert_eq!(tree.space().used_bytes, full.used_bytes);
    let bg = tree.start_background(wodfs_engine::BackgroundConfig {
        log_sync_every: std::time::Duration::from_millis(20),
        checkpoint_every: std::time::Duration::from_millis(50),
        reclaim_flushes: 64,
        write_back_thread: true,
    });
    // Most of it comes back: the pruned leaves. What stays is the emptied
    // tree's skeleton (about 40 nodes, height 5, of these 2 KiB nodes),
    // because siblings merge only when both are cached and nothing
    // collapses an emptied subtree yet. That skeleton is 24.8-25.5 % of
    // `data`, one 4 KiB unit either side of the quarter this bound was
    // (runs passed or failed by which merges the timing allowed), so
    // the bound is a third until emptied subtrees collapse.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while tree.space().used_bytes > empty + data / 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "space never came back: {:?}, {full:?} before, {empty} empty",
            tree.space()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    bg.stop().unwrap();
    tree.verify().unwrap();
    assert_eq!(tree.range(&[], None).count(), 0);
}

/// A read that fails in the middle of a flush (a child read while its
/// parent's buffer is on its way down) leaves the in-memory tree without
/// the nodes that operation had taken out of the cache. Such a store
/// must not answer from what is left: every read of an acknowledged key
/// gives its latest value or an error, never an older value or none.
/// Reopening replays the log and has everything synced.
#[test]
fn a_read_error_mid_flush_never_serves_stale_data() {
    let mut incomplete = 0;
    for (seed, after) in (0..24u64).map(|i| (i, 3 + i * 5)) {
        let dev = Arc::new(FaultDevice::new(16 << 20, FaultConfig::with_seed(seed)));
        let tree = Tree::create(Box::new(dev.clone()), cfg()).unwrap();
        let mut rng = common::Rng(seed);
        let mut model = Model::new();
        let mut put = |tree: &Tree, model: &mut Model, n: u64| -> wodfs_engine::Result<()> {
            let k = rng.below(400);
            let op = Op::Insert {
                key: format!("/k/{k:05}").into_bytes(),
                value: format!("{n:08}").repeat(6).into_bytes(),
            };
            tree.write(std::slice::from_ref(&op))?;
            apply(model, &op);
            Ok(())
        };
        for n in 0..1500 {
            put(&tree, &mut model, n).unwrap();
        }
        tree.sync().unwrap();
        let durable = model.clone();
        dev.arm_read_fault(after, FaultKind::Eio);
        let mut failed = None;
        for n in 1500..20_000 {
            if let Err(e) = put(&tree, &mut model, n) {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("the armed read fault must surface");
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(matches!(
            tree.write(&[ins(1)]).unwrap_err(),
            Error::Poisoned(_)
        ));
        let mut refused = 0;
        for (k, v) in &model {
            match tree.get(k) {
                Ok(got) => assert_eq!(got.as_ref(), Some(v), "seed {seed}: stale read"),
                Err(Error::Incomplete(_)) => refused += 1,
                Err(e) => panic!("seed {seed}: {e}"),
            }
        }
        if refused > 0 {
            incomplete += 1;
            assert!(
                tree.range(&[], None).any(|r| r.is_err()),
                "a scan of an incomplete tree must fail too"
            );
        }
        drop(tree);
        let reopened = reopen_verified(&dev);
        // Each synced key has its synced value or one written after it
        // (writes after the sync may have reached the log's durable part;
        // each write's value is greater than the ones before it).
        for (k, v) in &durable {
            let got = reopened.get(k).unwrap().expect("a synced key is there");
            let later = |w: &Vec<u8>| w.as_slice() >= v.as_slice() && Some(w) <= model.get(k);
            assert!(later(&got), "seed {seed}: lost a synced key");
        }
    }
    // Most faults land in a flush's child read (that is what this test
    // is for), not in a read that loses nothing.
    assert!(incomplete > 0, "no fault landed mid-flush");
}
