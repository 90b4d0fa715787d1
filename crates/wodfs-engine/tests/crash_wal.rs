//! Power cuts during a workload that syncs the log every few operations and
//! checkpoints now and then, on the fault-injecting device.
//!
//! Oracle: after recovery the store equals the model after some prefix of
//! the operations, no shorter than the last prefix a `sync` or checkpoint
//! acknowledged, and `verify()` passes. Coverage is asserted per phase:
//! mid log append (fresh and reused log space), mid checkpoint (nodes,
//! superblock), eviction, and mid range move.
//!
//! `WODFS_CRASH_SEEDS` and `WODFS_CRASH_POINTS` scale it up for a soak; a
//! failure prints the seed and cut point that reproduce it.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{apply, Model, Rng};
use wodfs_device::{FaultConfig, FaultDevice, MemDevice};
use wodfs_engine::{Config, Op, Tree};

const DEVICE_BYTES: u64 = 8 << 20;
const OPS: usize = 1200;

fn cfg() -> Config {
    Config {
        cache_bytes: 12 << 10,
        log_bytes: 32 << 10,
        ..Config::tiny()
    }
}

enum Step {
    Op(Op),
    Sync,
    Checkpoint,
}

fn workload(seed: u64) -> Vec<Step> {
    let mut r = Rng(seed);
    let mut steps = Vec::new();
    for _ in 0..OPS {
        let k = format!("/d{}/f{:03}", r.below(4), r.below(200)).into_bytes();
        let op = match r.below(20) {
            0..=10 => Op::Insert {
                key: k,
                value: vec![r.below(256) as u8; 20 + r.below(100) as usize],
            },
            11 | 12 => Op::Delete { key: k },
            13..=15 => Op::Patch {
                key: k,
                offset: r.below(60) as u32,
                data: vec![r.below(256) as u8; 4],
            },
            16 => Op::Truncate {
                key: k,
                len: r.below(40) as u32,
            },
            17 | 18 => {
                let d = r.below(4);
                Op::DeleteRange {
                    lo: format!("/d{d}/f{:03}", r.below(100)).into_bytes(),
                    hi: format!("/d{d}/f{:03}", 100 + r.below(100)).into_bytes(),
                }
            }
            _ => {
                let (a, b) = (r.below(4), r.below(4));
                if a == b {
                    continue;
                }
                Op::RangeMove {
                    from: format!("/d{a}/").into_bytes(),
                    to: format!("/d{b}/").into_bytes(),
                }
            }
        };
        steps.push(Step::Op(op));
        match r.below(40) {
            0..=5 => steps.push(Step::Sync),
            6 => steps.push(Step::Checkpoint),
            _ => {}
        }
    }
    steps
}

/// Runs until done or the power goes. Returns the model after every
/// operation, how many operations a sync acknowledged, and whether the
/// operation in flight at the cut was a range move.
fn run(dev: &Arc<FaultDevice>, seed: u64) -> (Vec<Model>, usize, bool, bool) {
    let mut models = vec![Model::new()];
    let Ok(tree) = Tree::create(Box::new(dev.clone()), cfg()) else {
        return (models, 0, false, false);
    };
    let mut acked = 0;
    for step in workload(seed) {
        match step {
            Step::Op(op) => {
                if tree.write(std::slice::from_ref(&op)).is_err() {
                    let mut m = models.last().unwrap().clone();
                    apply(&mut m, &op);
                    models.push(m);
                    return (models, acked, matches!(op, Op::RangeMove { .. }), true);
                }
                let mut m = models.last().unwrap().clone();
                apply(&mut m, &op);
                models.push(m);
            }
            Step::Sync => {
                if tree.sync().is_err() {
                    return (models, acked, false, true);
                }
                acked = models.len() - 1;
            }
            Step::Checkpoint => {
                if tree.checkpoint().is_err() {
                    return (models, acked, false, true);
                }
                acked = models.len() - 1;
            }
        }
    }
    (models, acked, false, true)
}

fn crash_once(seed: u64, cut: u64) -> &'static str {
    let dev = Arc::new(FaultDevice::new(
        DEVICE_BYTES,
        FaultConfig {
            power_cut_after_writes: Some(cut),
            ..FaultConfig::with_seed(seed)
        },
    ));
    let (models, acked, in_range_move, created) = run(&dev, seed);
    let phase = if in_range_move {
        "range_move"
    } else {
        dev.phase_at_power_cut().unwrap_or("none")
    };
    let reopened = Tree::open(
        Box::new(MemDevice::from_bytes(dev.crash_image())),
        cfg().cache_bytes,
    );
    if !created {
        return "mkfs";
    }
    let tree =
        reopened.unwrap_or_else(|e| panic!("seed {seed} cut {cut} ({phase}): open failed: {e}"));
    tree.verify()
        .unwrap_or_else(|e| panic!("seed {seed} cut {cut} ({phase}): {e}"));
    let got: Model = tree.range(&[], None).map(|r| r.unwrap()).collect();
    let matched = models[acked..].contains(&got);
    assert!(
        matched,
        "seed {seed} cut {cut} ({phase}): recovered state is not a prefix at or after the last acknowledged sync (op {acked} of {})",
        models.len() - 1
    );
    tree.insert(b"/after", b"crash").unwrap();
    tree.sync().unwrap();
    phase
}

#[test]
fn power_cut_recovers_a_prefix_no_earlier_than_the_last_sync() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let seeds = env("WODFS_CRASH_SEEDS", 10);
    let per_seed = env("WODFS_CRASH_POINTS", 100);
    let mut phases: HashMap<&'static str, u64> = HashMap::new();
    for seed in 1..=seeds {
        let probe = Arc::new(FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(seed)));
        run(&probe, seed);
        let total = probe.writes_issued();
        let mut r = Rng(seed ^ 0x10C);
        for _ in 0..per_seed {
            *phases
                .entry(crash_once(seed, 1 + r.below(total)))
                .or_default() += 1;
        }
    }
    eprintln!("crashes per phase: {phases:?}");
    let min = seeds;
    for phase in [
        "log.write",
        "log.write.reused",
        "checkpoint.nodes",
        "checkpoint.superblock",
        "evict",
        "range_move",
    ] {
        let n = phases.get(phase).copied().unwrap_or(0);
        assert!(
            n >= min,
            "phase {phase}: only {n} crashes (want >= {min}): {phases:?}"
        );
    }
}
