//! The four workloads. Each runs in a child process of its own (inside the
//! memory cgroup), from a [`Spec`] the harness passes in, and reports a
//! [`Timing`] back. Every engine runs the same sequence on the same data:
//!
//! 1. [`random_insert`]: a new store, records in shuffled key order;
//! 2. [`point_read`]: reopen it cold and read existing keys at random;
//! 3. [`full_scan`]: reopen it cold and read every record in key order;
//! 4. [`seq_insert`]: a new store, records in key order.

pub mod full_scan;
pub mod point_read;
pub mod random_insert;
pub mod seq_insert;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::data::{self, KeyOrder, RECORD_BYTES};
use crate::engine::{Batch, EngineConfig, EngineKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    RandomInsert,
    PointRead,
    FullScan,
    SeqInsert,
}

impl Phase {
    pub const ALL: [Phase; 4] = [
        Phase::RandomInsert,
        Phase::PointRead,
        Phase::FullScan,
        Phase::SeqInsert,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::RandomInsert => "random-insert",
            Phase::PointRead => "point-read",
            Phase::FullScan => "full-scan",
            Phase::SeqInsert => "seq-insert",
        }
    }

    /// Insert phases count open and close in their time; read phases count
    /// only the reads (the cold open is reported on its own).
    pub fn is_insert(self) -> bool {
        matches!(self, Phase::RandomInsert | Phase::SeqInsert)
    }
}

/// What a child process is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub engine: EngineKind,
    pub phase: Phase,
    pub store_dir: PathBuf,
    pub config: EngineConfig,
    /// Records to insert, or records the store already holds.
    pub records: u64,
    /// Point reads to issue (point-read phase only).
    pub reads: u64,
    /// Records per commit.
    pub batch_records: u64,
    pub seed: u64,
}

/// What a child process reports back; all times in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timing {
    pub open_ns: u64,
    pub work_ns: u64,
    pub close_ns: u64,
    pub ops: u64,
    pub user_bytes: u64,
    /// Filled in by the child after the workload.
    pub peak_rss_bytes: Option<u64>,
}

pub fn run(spec: &Spec) -> Result<Timing> {
    match spec.phase {
        Phase::RandomInsert => random_insert::run(spec),
        Phase::PointRead => point_read::run(spec),
        Phase::FullScan => full_scan::run(spec),
        Phase::SeqInsert => seq_insert::run(spec),
    }
}

/// One stderr line per tenth of an insert phase, so a long run shows it is
/// alive. Called after each commit; cheap when it prints nothing.
fn progress(spec: &Spec, done: u64) {
    let step = (spec.records / 10).max(1);
    let before = (done - spec.batch_records.min(done)) / step;
    if done / step > before {
        eprintln!(
            "engine-compare: {} {} {}%",
            spec.engine.name(),
            spec.phase.name(),
            done * 100 / spec.records.max(1)
        );
    }
}

struct Stopwatch {
    last: Instant,
}

impl Stopwatch {
    fn start() -> Self {
        Self {
            last: Instant::now(),
        }
    }

    /// Nanoseconds since the previous lap.
    fn lap(&mut self) -> u64 {
        let now = Instant::now();
        let ns = now.duration_since(self.last).as_nanos();
        self.last = now;
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// Inserts `spec.records` records into a new store, one commit per
/// `spec.batch_records`, then closes it durably.
fn insert_all(spec: &Spec, order: KeyOrder) -> Result<Timing> {
    let mut watch = Stopwatch::start();
    let mut engine = spec.engine.create(&spec.store_dir, &spec.config)?;
    let open_ns = watch.lap();

    let batch_records = spec.batch_records.max(1);
    let mut batch = Batch::with_capacity(usize::try_from(batch_records)?);
    for i in 0..spec.records {
        batch.push(&data::key(order, spec.seed, i), &data::value(spec.seed, i));
        if batch.len() as u64 == batch_records {
            engine.insert_batch(&batch)?;
            batch.clear();
            progress(spec, i + 1);
        }
    }
    if !batch.is_empty() {
        engine.insert_batch(&batch)?;
    }
    let work_ns = watch.lap();

    engine.close()?;
    let close_ns = watch.lap();
    Ok(Timing {
        open_ns,
        work_ns,
        close_ns,
        ops: spec.records,
        user_bytes: spec.records * RECORD_BYTES,
        peak_rss_bytes: None,
    })
}
