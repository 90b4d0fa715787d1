//! The parent side: sizes the run, prepares a store location per engine,
//! runs every workload in a child process and gathers the report.
//!
//! Per engine, in order: a fresh ext4 for the random-insert store, then
//! random inserts, point reads and a full scan on it (caches dropped before
//! each phase, so reads start cold), then another fresh ext4 for the
//! sequential inserts. Engines run one after another, never at once, in
//! the same memory cgroup.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::resource::{getrusage, UsageWho};

use crate::cgroup::MemCgroup;
use crate::child::{self, Request};
use crate::cli::Options;
use crate::data::{KEY_BYTES, RECORD_BYTES, VALUE_BYTES};
use crate::engine::{EngineConfig, EngineKind};
use crate::report::{self, EngineReport, Host, PhaseReport, RunReport, Settings};
use crate::scratch::{self, Scratch};
use crate::signals::Interrupts;
use crate::workload::{Phase, Spec};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Quick mode: enough records to fill a few commits and exercise every
/// path, small enough for a debug build in seconds.
const QUICK_RECORDS: u64 = 20_000;
const QUICK_READS_MAX: u64 = 2_000;
const QUICK_BATCH_MAX: u64 = 1_000;
/// wodfs-engine wants room for six 4 MiB nodes in its cache.
const QUICK_CACHE_BYTES: u64 = 32 * MIB;
const QUICK_WRITE_BUFFER_BYTES: u64 = 4 * MIB;

const MALLOC_ARENA_MAX: &str = "2";

/// The sizes of one run, derived from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub isolated: bool,
    pub mem_limit_bytes: Option<u64>,
    pub config: EngineConfig,
    pub random_records: u64,
    pub seq_records: u64,
    pub reads: u64,
    pub batch_records: u64,
    pub seed: u64,
    /// Sparse size of each ext4 image.
    pub image_bytes: u64,
    pub work_dir: PathBuf,
}

impl Plan {
    pub fn new(options: &Options) -> Plan {
        if options.quick {
            let random_records = QUICK_RECORDS;
            return Plan {
                isolated: false,
                mem_limit_bytes: None,
                config: EngineConfig {
                    cache_bytes: QUICK_CACHE_BYTES,
                    write_buffer_bytes: QUICK_WRITE_BUFFER_BYTES,
                    device_bytes: 256 * MIB,
                },
                random_records,
                seq_records: scaled(random_records, options.seq_fraction),
                reads: options.reads.min(QUICK_READS_MAX),
                batch_records: options.batch_records.min(QUICK_BATCH_MAX),
                seed: options.seed,
                image_bytes: 0,
                work_dir: options.work_dir.clone().unwrap_or_else(std::env::temp_dir),
            };
        }
        let mem_limit_bytes = options.mem_mib * MIB;
        let data_bytes = scaled(mem_limit_bytes, options.scale);
        let random_records = data_bytes / RECORD_BYTES;
        let cache_bytes = options
            .cache_mib
            .map_or(mem_limit_bytes / 4, |mib| mib * MIB);
        let write_buffer_bytes = options
            .write_buffer_mib
            .map_or(mem_limit_bytes / 16, |mib| mib * MIB);
        // Room for the largest space amplification seen (redb's file grows
        // while non-durable commits cannot reuse pages) plus fjall's
        // journal; the images are sparse, so only what is written is used.
        let device_bytes = (4 * data_bytes).max(GIB).next_multiple_of(MIB);
        Plan {
            isolated: true,
            mem_limit_bytes: Some(mem_limit_bytes),
            config: EngineConfig {
                cache_bytes,
                write_buffer_bytes,
                device_bytes,
            },
            random_records,
            seq_records: scaled(random_records, options.seq_fraction),
            reads: options.reads,
            batch_records: options.batch_records,
            seed: options.seed,
            image_bytes: (device_bytes + 4 * GIB).max(8 * GIB),
            work_dir: options
                .work_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("/var/tmp")),
        }
    }

    fn settings(&self, quick: bool, rounds: usize) -> Settings {
        Settings {
            quick,
            rounds,
            isolated: self.isolated,
            mem_limit_bytes: self.mem_limit_bytes,
            cache_bytes: self.config.cache_bytes,
            write_buffer_bytes: self.config.write_buffer_bytes,
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
            random_records: self.random_records,
            seq_records: self.seq_records,
            reads: self.reads,
            batch_records: self.batch_records,
            seed: self.seed,
            durability: "no sync per commit; durable close counted",
        }
    }

    fn scratch(&self, engine: EngineKind, label: &str) -> Result<Scratch> {
        let label = format!("{}-{label}", engine.name());
        if self.isolated {
            Scratch::loop_ext4(&self.work_dir, &label, self.image_bytes)
        } else {
            Scratch::temp(&self.work_dir, &label)
        }
    }
}

fn scaled(n: u64, factor: f64) -> u64 {
    (n as f64 * factor).round() as u64
}

/// Runs the whole comparison, prints the tables and writes the JSON.
/// Returns whether every phase succeeded.
pub fn main(options: &Options) -> Result<bool> {
    let interrupts = Interrupts::install()?;
    let started = Instant::now();
    let started_utc = report::utc_now();
    let plan = Plan::new(options);
    eprintln!(
        "engine-compare: {} random + {} sequential records, cache {} MiB, memory limit {}",
        report::group(plan.random_records),
        report::group(plan.seq_records),
        plan.config.cache_bytes / MIB,
        plan.mem_limit_bytes
            .map_or("none".to_string(), |bytes| format!("{} MiB", bytes / MIB)),
    );

    let cgroup = match plan.mem_limit_bytes {
        Some(limit) => Some(MemCgroup::create(
            &format!("engine-compare-{}", std::process::id()),
            limit,
        )?),
        None => None,
    };
    // Round r runs the engines in the given order rotated by r, so none
    // always runs first (or last) on a machine whose speed drifts.
    let mut rounds: Vec<Vec<EngineReport>> = Vec::new();
    for round in 0..options.rounds {
        if options.rounds > 1 {
            eprintln!("engine-compare: round {} of {}", round + 1, options.rounds);
        }
        let mut reports: Vec<Option<EngineReport>> = options.engines.iter().map(|_| None).collect();
        for k in 0..options.engines.len() {
            let i = (k + round) % options.engines.len();
            let engine = options.engines[i];
            reports[i] = Some(run_engine(engine, &plan, cgroup.as_ref(), &interrupts)?);
        }
        rounds.push(
            reports
                .into_iter()
                .map(|r| r.expect("every engine ran"))
                .collect(),
        );
    }
    drop(cgroup);

    let engines = report::median_engines(&rounds);
    let ratios = report::ratios(&engines);
    // Every round's own reports and ratios, when there are several.
    let rounds = if rounds.len() > 1 {
        rounds
            .into_iter()
            .map(|engines| report::Round {
                ratios: report::ratios(&engines),
                engines,
            })
            .collect()
    } else {
        Vec::new()
    };
    let run = RunReport {
        tool: "engine-compare",
        started_utc,
        host: Host {
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        },
        settings: plan.settings(options.quick, options.rounds),
        engines,
        ratios,
        rounds,
        total_seconds: started.elapsed().as_secs_f64(),
    };
    print!("{}", report::markdown(&run));

    let out_dir = match (&options.out_dir, options.quick) {
        (Some(dir), _) => Some(dir.clone()),
        (None, false) => Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../out")),
        (None, true) => None,
    };
    if let Some(dir) = out_dir {
        fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        let path = dir.join(format!("engine-compare-{}.json", run.started_utc));
        fs::write(&path, serde_json::to_string_pretty(&run)? + "\n")
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("engine-compare: wrote {}", path.display());
    }
    Ok(run
        .engines
        .iter()
        .all(|engine| engine.phases.iter().all(|phase| phase.ok)))
}

fn run_engine(
    engine: EngineKind,
    plan: &Plan,
    cgroup: Option<&MemCgroup>,
    interrupts: &Interrupts,
) -> Result<EngineReport> {
    let mut phases = Vec::new();
    let mut direct_io = None;

    let scratch = plan.scratch(engine, "random")?;
    direct_io = direct_io.or(scratch.direct_io());
    let mut store_ok = true;
    for phase in [Phase::RandomInsert, Phase::PointRead, Phase::FullScan] {
        if !store_ok {
            phases.push(PhaseReport::failed(
                phase,
                "skipped: the random-insert store failed".into(),
            ));
            continue;
        }
        let report = run_phase(engine, phase, plan, &scratch, cgroup, interrupts)?;
        store_ok &= report.ok;
        phases.push(report);
    }
    drop(scratch);

    let scratch = plan.scratch(engine, "seq")?;
    phases.push(run_phase(
        engine,
        Phase::SeqInsert,
        plan,
        &scratch,
        cgroup,
        interrupts,
    )?);
    drop(scratch);

    Ok(EngineReport {
        engine,
        version: engine.version(),
        direct_io,
        phases,
    })
}

/// The running binary, for re-executing it as a workload child. On Linux,
/// `/proc/self/exe` names the file this process started from even after
/// a rebuild has replaced it at its path: an 8x run lasts 40 minutes, and
/// one rebuilt meanwhile (session 27) failed at its next child with "No
/// such file or directory", its results lost.
fn own_executable() -> Result<PathBuf> {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if proc_exe.exists() {
        return Ok(proc_exe);
    }
    std::env::current_exe().context("find own executable")
}

/// Runs one workload in a child. A failing workload becomes a failed
/// report; only harness failures (and interrupts) return an error.
fn run_phase(
    engine: EngineKind,
    phase: Phase,
    plan: &Plan,
    scratch: &Scratch,
    cgroup: Option<&MemCgroup>,
    interrupts: &Interrupts,
) -> Result<PhaseReport> {
    interrupts.check()?;
    eprintln!("engine-compare: {} {}", engine.name(), phase.name());
    let request = Request {
        spec: Spec {
            engine,
            phase,
            store_dir: scratch.store_dir().to_path_buf(),
            config: plan.config,
            records: match phase {
                Phase::SeqInsert => plan.seq_records,
                _ => plan.random_records,
            },
            reads: plan.reads,
            batch_records: plan.batch_records,
            seed: plan.seed,
        },
        cgroup: cgroup.map(|cgroup| cgroup.path().to_path_buf()),
    };
    if plan.isolated {
        scratch::drop_caches()?;
    }
    if let Some(cgroup) = cgroup {
        cgroup.reset_peak()?;
    }
    let oom_kills_before = cgroup.map(MemCgroup::oom_kills).transpose()?;
    let device_before = scratch.device_stat()?;
    let usage_before = getrusage(UsageWho::RUSAGE_CHILDREN)?;

    let started = Instant::now();
    let child = Command::new(own_executable()?)
        .arg("child")
        .arg(serde_json::to_string(&request)?)
        // glibc gives every thread that allocates an arena of its own, and
        // freed memtable memory stays in them: fjall's RSS doubled without
        // this cap. Every engine runs with the same allocator setting.
        .env("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawn the workload child")?;
    interrupts.track_child(child.id());
    let output = child.wait_with_output();
    interrupts.untrack_child();
    let output = output.context("wait for the workload child")?;
    let process_seconds = started.elapsed().as_secs_f64();
    interrupts.check()?;

    let usage_after = getrusage(UsageWho::RUSAGE_CHILDREN)?;
    scratch.sync()?;
    let device = match (scratch.device_stat()?, device_before) {
        (Some(after), Some(before)) => Some(after.since(before)),
        _ => None,
    };
    let oom_killed = match (
        cgroup.map(MemCgroup::oom_kills).transpose()?,
        oom_kills_before,
    ) {
        (Some(after), Some(before)) => after > before,
        _ => false,
    };

    let mut report = PhaseReport {
        phase: Some(phase),
        process_seconds,
        cpu_user_seconds: seconds(usage_after.user_time()) - seconds(usage_before.user_time()),
        cpu_system_seconds: seconds(usage_after.system_time())
            - seconds(usage_before.system_time()),
        device,
        peak_memory_bytes: cgroup.map(MemCgroup::peak_bytes).transpose()?,
        oom_killed,
        store_bytes: scratch.store_bytes(),
        ..PhaseReport::default()
    };
    let timing = if output.status.success() {
        child::parse_result(&String::from_utf8_lossy(&output.stdout))
    } else if oom_killed {
        Err(anyhow::anyhow!(
            "killed by the cgroup OOM killer ({})",
            output.status
        ))
    } else {
        Err(anyhow::anyhow!("child failed ({})", output.status))
    };
    let timing = match timing {
        Ok(timing) => timing,
        Err(e) => {
            report.error = Some(format!("{e:#}"));
            eprintln!("engine-compare: {} {}: {e:#}", engine.name(), phase.name());
            return Ok(report);
        }
    };

    report.ok = true;
    report.ops = timing.ops;
    report.peak_rss_bytes = timing.peak_rss_bytes;
    report.user_bytes = timing.user_bytes;
    report.open_seconds = nanos(timing.open_ns);
    report.work_seconds = nanos(timing.work_ns);
    report.close_seconds = nanos(timing.close_ns);
    report.timed_seconds = if phase.is_insert() {
        report.open_seconds + report.work_seconds + report.close_seconds
    } else {
        report.work_seconds
    };
    report.ops_per_second = if report.timed_seconds > 0.0 {
        timing.ops as f64 / report.timed_seconds
    } else {
        0.0
    };
    if let Some(device) = device {
        if phase.is_insert() && timing.user_bytes > 0 {
            report.write_amplification = Some(device.write_bytes as f64 / timing.user_bytes as f64);
        }
        if !phase.is_insert() && timing.ops > 0 {
            report.device_read_bytes_per_op = Some(device.read_bytes as f64 / timing.ops as f64);
        }
    }
    Ok(report)
}

fn seconds(time: nix::sys::time::TimeVal) -> f64 {
    time.tv_sec() as f64 + time.tv_usec() as f64 / 1e6
}

fn nanos(ns: u64) -> f64 {
    Duration::from_nanos(ns).as_secs_f64()
}
