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
    let reopened = Tree::open(
        Box::new(MemDevice::from_bytes(dev.crash_image())),
        cfg().cache_bytes,
    )
    .unwrap();
    reopened.verify().unwrap();
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
fn a_full_node_area_is_an_error_not_a_panic() {
    // A device with little room: writes eventually fail with NoSpace.
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
