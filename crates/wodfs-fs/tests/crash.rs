//! Power cuts at the file-system level: a random workload on the fault
//! device with fsyncs (log flushes) and checkpoints among its operations
//! loses power after a random number of device writes. After reopening
//! the crash image (log replay), the namespace (paths, contents, links,
//! xattrs) must equal the model after some operation prefix no earlier
//! than the last acknowledged fsync, and fsck must be clean.

mod common;

use std::sync::Arc;

use common::{apply_fs, apply_model, extract, op_strategy, small_config, FsOp};
use proptest::prelude::*;
use wodfs_device::{Device, FaultConfig, FaultDevice, MemDevice};
use wodfs_fs::{Fs, FsOptions};
use wodfs_schema::model::Namespace;

const DEVICE_BYTES: u64 = 32 << 20;

fn fresh_image() -> Vec<u8> {
    let mem = Arc::new(MemDevice::new(DEVICE_BYTES));
    let fs = Fs::mkfs(Box::new(Arc::clone(&mem)), small_config(), 0, 0).expect("mkfs");
    drop(fs);
    mem.to_bytes()
}

fn run(ops: &[FsOp], cut_after_writes: u64, seed: u64) -> Result<(), TestCaseError> {
    let fault = Arc::new(FaultDevice::from_image(
        fresh_image(),
        FaultConfig {
            power_cut_after_writes: Some(cut_after_writes),
            ..FaultConfig::with_seed(seed)
        },
    ));
    let dev: Arc<dyn Device> = fault.clone();
    let mut fs = Fs::open(Box::new(Arc::clone(&dev)), 4 << 20, FsOptions::default()).expect("open");
    let mut ns = Namespace::new();
    // Candidates: the model after every operation since the last
    // acknowledged fsync (each operation is one atomic batch or a few).
    let mut candidates = vec![ns.clone()];
    for (i, op) in ops.iter().enumerate() {
        if let FsOp::Reopen = op {
            let synced = if i & 1 == 0 {
                fs.fsync()
            } else {
                fs.checkpoint()
            };
            match synced {
                Ok(()) => candidates = vec![ns.clone()],
                Err(_) => break,
            }
            continue;
        }
        if let FsOp::WriteRename(a, off, data, ..) | FsOp::WriteCreate(a, off, data, ..) = op {
            // Written apart, the write may land without the rename or the
            // creation.
            let mut written = ns.clone();
            let _ = apply_model(&mut written, &FsOp::Write(a.clone(), *off, data.clone()));
            candidates.push(written);
        }
        let want = apply_model(&mut ns, op);
        match apply_fs(&mut fs, &dev, op) {
            Err(code) if code == libc::EIO || code == libc::EROFS => break,
            got => prop_assert_eq!(got, want, "{:?}", op),
        }
        candidates.push(ns.clone());
    }
    // Everything after the cut is lost; a checkpoint that was in flight
    // may or may not have landed.
    drop(fs);
    if std::env::var_os("WODFS_CRASH_DEBUG").is_some() {
        eprintln!(
            "cut={} phase={:?}",
            fault.power_is_cut(),
            fault.phase_at_power_cut()
        );
    }
    let image = fault.crash_image();
    let mem = Arc::new(MemDevice::from_bytes(image));
    let fs = Fs::open(Box::new(mem), 4 << 20, FsOptions::default()).expect("reopen after crash");
    let seen = extract(&fs);
    prop_assert!(
        candidates.contains(&seen),
        "recovered namespace matches no prefix since the last fsync; vs it: {:?}",
        seen.first_difference(&candidates[0])
    );
    let report = fs.fsck().expect("fsck");
    prop_assert!(report.errors.is_empty(), "fsck: {:?}", report.errors);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn power_cut_recovers_a_checkpoint_no_older_than_the_last_fsync(
        ops in proptest::collection::vec(prop_oneof![4 => op_strategy(), 1 => Just(FsOp::Reopen)], 1..80),
        cut in 1u64..30,
        seed in any::<u64>(),
    ) {
        run(&ops, cut, seed)?;
    }
}
