//! Power cuts at every point of a workload with checkpoints, on the
//! fault-injecting device: after recovery the store equals the model after
//! some prefix of the operations no earlier than the last acknowledged
//! checkpoint, and `verify()` passes.
//!
//! The workload never syncs: a checkpoint is its only acknowledgement. The
//! state recovered is mostly a checkpoint's, but the log's full buffers
//! are written out between checkpoints (without a device sync), so
//! recovery may also replay records logged past the last one. Coverage
//! is asserted per phase, not just counted.

use std::collections::HashMap;
use std::sync::Arc;

use wodfs_device::{FaultConfig, FaultDevice, MemDevice};
use wodfs_engine::{Config, Error, Op, Tree};

mod common;

use common::{apply, Model, Rng};

fn cfg() -> Config {
    Config {
        cache_bytes: 12 << 10,
        ..Config::tiny()
    }
}

const DEVICE_BYTES: u64 = 8 << 20;
const OPS: usize = 900;
const CHECKPOINT_EVERY: usize = 150;

/// The workload: deterministic from the seed.
fn ops(seed: u64) -> Vec<Op> {
    let mut r = Rng(seed);
    (0..OPS)
        .map(|_| {
            let k = format!("/d{}/f{:03}", r.below(4), r.below(300)).into_bytes();
            match r.below(10) {
                0..=5 => Op::Insert {
                    key: k,
                    value: vec![r.below(256) as u8; 40 + r.below(120) as usize],
                },
                6 => Op::Delete { key: k },
                7 | 8 => Op::Patch {
                    key: k,
                    offset: r.below(60) as u32,
                    data: vec![r.below(256) as u8; 4],
                },
                _ => {
                    let d = r.below(4);
                    Op::DeleteRange {
                        lo: format!("/d{d}/f{:03}", r.below(150)).into_bytes(),
                        hi: format!("/d{d}/f{:03}", 150 + r.below(150)).into_bytes(),
                    }
                }
            }
        })
        .collect()
}

/// Runs the workload until it finishes or the power goes. Returns the
/// model after every operation since the last acknowledged checkpoint,
/// that checkpoint's first: (state, acknowledged?). Empty if mkfs did not
/// finish.
fn run(dev: &Arc<FaultDevice>, seed: u64) -> Vec<(Model, bool)> {
    let mut states = Vec::new();
    let Ok(tree) = Tree::create(Box::new(dev.clone()), cfg()) else {
        return states;
    };
    states.push((Model::new(), true));
    let mut model = Model::new();
    for (i, op) in ops(seed).iter().enumerate() {
        if tree.write(std::slice::from_ref(op)).is_err() {
            return states;
        }
        apply(&mut model, op);
        if (i + 1) % CHECKPOINT_EVERY == 0 {
            if tree.checkpoint().is_err() {
                states.push((model.clone(), false));
                return states;
            }
            states.clear();
            states.push((model.clone(), true));
        } else {
            states.push((model.clone(), false));
        }
    }
    states
}

fn contents(tree: &Tree) -> Model {
    tree.range(&[], None).map(|r| r.unwrap()).collect()
}

/// One crash: returns the phase it landed in.
fn crash_once(seed: u64, cut_after_writes: u64) -> &'static str {
    let dev = Arc::new(FaultDevice::new(
        DEVICE_BYTES,
        FaultConfig {
            power_cut_after_writes: Some(cut_after_writes),
            ..FaultConfig::with_seed(seed)
        },
    ));
    let states = run(&dev, seed);
    let phase = dev.phase_at_power_cut().unwrap_or("none");
    let image = dev.crash_image();
    let reopened = Tree::open(Box::new(MemDevice::from_bytes(image)), cfg().cache_bytes);
    let Some(last_acked) = states.iter().rposition(|(_, acked)| *acked) else {
        // The power went before mkfs finished: the image may be unusable,
        // but opening it must fail cleanly.
        if let Err(e) = &reopened {
            assert!(
                matches!(e, Error::NotWodfs(_) | Error::Corrupt { .. }),
                "seed {seed} cut {cut_after_writes}: {e}"
            );
        }
        return "mkfs";
    };
    let tree =
        reopened.unwrap_or_else(|e| panic!("seed {seed} cut {cut_after_writes}: open failed: {e}"));
    tree.verify()
        .unwrap_or_else(|e| panic!("seed {seed} cut {cut_after_writes}: {e}"));
    let got = contents(&tree);
    let ok = states[last_acked..].iter().any(|(m, _)| *m == got);
    assert!(
        ok,
        "seed {seed} cut {cut_after_writes} (phase {phase}): recovered state is not a prefix at or after the last acknowledged checkpoint"
    );
    // The recovered store keeps working.
    tree.insert(b"/after", b"crash").unwrap();
    tree.checkpoint().unwrap();
    phase
}

#[test]
fn power_cut_at_any_write_recovers_a_checkpoint() {
    let seeds = common::env_u64("WODFS_CRASH_SEEDS", 12);
    let per_seed = common::env_u64("WODFS_CRASH_POINTS", 60);
    let mut phases: HashMap<&'static str, u64> = HashMap::new();
    for seed in 1..=seeds {
        // Count the writes of an uninterrupted run, then cut inside it.
        let probe = Arc::new(FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(seed)));
        run(&probe, seed);
        let total = probe.writes_issued();
        let mut r = Rng(seed ^ 0xC0FFEE);
        for _ in 0..per_seed {
            let cut = 1 + r.below(total);
            *phases.entry(crash_once(seed, cut)).or_default() += 1;
        }
    }
    eprintln!("crashes per phase: {phases:?}");
    for phase in ["evict", "checkpoint.nodes", "checkpoint.superblock"] {
        let n = phases.get(phase).copied().unwrap_or(0);
        assert!(n >= seeds, "phase {phase} got only {n} crashes: {phases:?}");
    }
}
