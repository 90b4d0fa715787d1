//! What a run found: the JSON document written to bench/out and the
//! markdown tables printed to stdout.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::engine::EngineKind;
use crate::scratch::DeviceStat;
use crate::workload::Phase;

/// The targets: wodfs throughput over the baseline's, at least.
pub const TARGETS: [(Phase, EngineKind, f64); 5] = [
    (Phase::RandomInsert, EngineKind::Redb, 10.0),
    (Phase::RandomInsert, EngineKind::Fjall, 1.0),
    (Phase::SeqInsert, EngineKind::Fjall, 1.0),
    (Phase::FullScan, EngineKind::Fjall, 2.0),
    (Phase::PointRead, EngineKind::Redb, 0.5),
];

#[derive(Debug, Serialize)]
pub struct RunReport {
    pub tool: &'static str,
    pub started_utc: String,
    pub host: Host,
    pub settings: Settings,
    /// With `--rounds` above 1, each workload's median round per engine;
    /// otherwise the one round.
    pub engines: Vec<EngineReport>,
    /// Ratios of the medians.
    pub ratios: Vec<Ratio>,
    /// Every round, when there were several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Round>,
    pub total_seconds: f64,
}

/// One round of a run with `--rounds`: every engine once.
#[derive(Debug, Serialize)]
pub struct Round {
    pub engines: Vec<EngineReport>,
    pub ratios: Vec<Ratio>,
}

#[derive(Debug, Serialize)]
pub struct Host {
    pub kernel: String,
    pub cpus: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub quick: bool,
    /// Memory cgroup, loop device and dropped caches (false in quick mode).
    pub isolated: bool,
    pub mem_limit_bytes: Option<u64>,
    pub cache_bytes: u64,
    pub write_buffer_bytes: u64,
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub random_records: u64,
    pub seq_records: u64,
    pub reads: u64,
    pub batch_records: u64,
    pub seed: u64,
    pub durability: &'static str,
    /// Times every engine ran (`--rounds`).
    pub rounds: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    pub engine: EngineKind,
    pub version: &'static str,
    /// Whether the loop devices did direct I/O to their images.
    pub direct_io: Option<bool>,
    pub phases: Vec<PhaseReport>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseReport {
    pub phase: Option<Phase>,
    pub ok: bool,
    pub error: Option<String>,
    pub ops: u64,
    pub user_bytes: u64,
    pub open_seconds: f64,
    pub work_seconds: f64,
    pub close_seconds: f64,
    /// Insert phases: open + inserts + durable close. Read phases: the
    /// reads alone.
    pub timed_seconds: f64,
    pub ops_per_second: f64,
    /// Wall time of the whole child process.
    pub process_seconds: f64,
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub device: Option<DeviceStat>,
    /// Device bytes written per user byte inserted (insert phases).
    pub write_amplification: Option<f64>,
    /// Device bytes read per operation (read phases).
    pub device_read_bytes_per_op: Option<f64>,
    /// Peak of the memory cgroup: the process plus the page cache it
    /// touched (the limit caps this).
    pub peak_memory_bytes: Option<u64>,
    /// Peak resident set of the engine process alone.
    pub peak_rss_bytes: Option<u64>,
    pub oom_killed: bool,
    /// Bytes allocated to the store's files after the phase.
    pub store_bytes: u64,
}

impl PhaseReport {
    pub fn failed(phase: Phase, error: String) -> Self {
        Self {
            phase: Some(phase),
            error: Some(error),
            ..Self::default()
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Ratio {
    pub phase: Phase,
    pub engine: EngineKind,
    pub baseline: EngineKind,
    /// ops/s of `engine` over ops/s of `baseline`.
    pub ratio: Option<f64>,
    pub target: Option<f64>,
    pub met: Option<bool>,
}

/// Per engine, each workload's report from its median round by ops/s
/// (the lower middle one for an even count), among the rounds where it
/// succeeded; a workload that failed in every round keeps its first
/// failure. `rounds` holds every engine in the same order each round.
pub fn median_engines(rounds: &[Vec<EngineReport>]) -> Vec<EngineReport> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(e, report)| {
            let phases = report
                .phases
                .iter()
                .enumerate()
                .map(|(p, phase)| {
                    let mut ok: Vec<&PhaseReport> = rounds
                        .iter()
                        .map(|round| &round[e].phases[p])
                        .filter(|phase| phase.ok)
                        .collect();
                    ok.sort_by(|a, b| a.ops_per_second.total_cmp(&b.ops_per_second));
                    ok.get(ok.len().saturating_sub(1) / 2)
                        .map_or_else(|| phase.clone(), |&median| median.clone())
                })
                .collect();
            EngineReport {
                phases,
                ..report.clone()
            }
        })
        .collect()
}

/// wodfs against each baseline (with the targets), and fjall
/// against redb for context.
pub fn ratios(engines: &[EngineReport]) -> Vec<Ratio> {
    let mut pairs = Vec::new();
    for baseline in [EngineKind::Redb, EngineKind::Fjall] {
        pairs.push((EngineKind::Wodfs, baseline));
    }
    pairs.push((EngineKind::Fjall, EngineKind::Redb));

    let throughput = |engine: EngineKind, phase: Phase| {
        engines
            .iter()
            .find(|report| report.engine == engine)?
            .phases
            .iter()
            .find(|report| report.phase == Some(phase) && report.ok)
            .map(|report| report.ops_per_second)
    };
    let present = |engine: EngineKind| engines.iter().any(|report| report.engine == engine);

    let mut ratios = Vec::new();
    for phase in Phase::ALL {
        for &(engine, baseline) in &pairs {
            if !present(engine) || !present(baseline) {
                continue;
            }
            let ratio = match (throughput(engine, phase), throughput(baseline, phase)) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
            let target = TARGETS
                .iter()
                .find(|&&(p, b, _)| p == phase && b == baseline && engine == EngineKind::Wodfs)
                .map(|&(_, _, target)| target);
            let met = target.zip(ratio).map(|(target, ratio)| ratio >= target);
            ratios.push(Ratio {
                phase,
                engine,
                baseline,
                ratio,
                target,
                met,
            });
        }
    }
    ratios
}

pub fn markdown(report: &RunReport) -> String {
    let s = &report.settings;
    let mut out = String::new();
    let mem = s
        .mem_limit_bytes
        .map_or("none (quick)".to_string(), |bytes| {
            format!("{} MiB", bytes >> 20)
        });
    let _ = writeln!(
        out,
        "## engine-compare {}\n\nmemory limit {mem}, cache {} MiB, write buffer {} MiB, {} random + {} sequential \
         records of {}+{} bytes, {} point reads, {} records per commit, {}{}; total {:.0} s\n",
        report.started_utc,
        s.cache_bytes >> 20,
        s.write_buffer_bytes >> 20,
        group(s.random_records),
        group(s.seq_records),
        s.key_bytes,
        s.value_bytes,
        group(s.reads),
        group(s.batch_records),
        s.durability,
        if s.rounds > 1 {
            format!("; medians of {} rounds", s.rounds)
        } else {
            String::new()
        },
        report.total_seconds,
    );
    out.push_str(
        "| engine | workload | ops | time s | ops/s | cpu s | rss MiB | cg peak MiB | dev write B / user B \
         | dev read KiB / op | store MiB |\n",
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for engine in &report.engines {
        for phase in &engine.phases {
            let name = phase.phase.map_or("?", Phase::name);
            if !phase.ok {
                let error = phase.error.as_deref().unwrap_or("failed");
                let _ = writeln!(
                    out,
                    "| {} | {name} | failed: {} | | | | | | | | |",
                    engine.engine.name(),
                    error.replace('|', "/").replace('\n', " ")
                );
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {:.0} |",
                engine.engine.name(),
                group(phase.ops),
                phase.timed_seconds,
                group(phase.ops_per_second.round() as u64),
                phase.cpu_user_seconds + phase.cpu_system_seconds,
                phase
                    .peak_rss_bytes
                    .map_or("-".to_string(), |bytes| (bytes >> 20).to_string()),
                phase
                    .peak_memory_bytes
                    .map_or("-".to_string(), |bytes| (bytes >> 20).to_string()),
                optional(phase.write_amplification, 2),
                optional(
                    phase.device_read_bytes_per_op.map(|bytes| bytes / 1024.0),
                    1
                ),
                phase.store_bytes as f64 / (1u64 << 20) as f64,
            );
        }
    }
    if !report.ratios.is_empty() {
        out.push_str("\n| workload | ratio | value | target | met |\n");
        out.push_str("| --- | --- | ---: | ---: | --- |\n");
        for ratio in &report.ratios {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                ratio_label(ratio),
                times(ratio.ratio),
                ratio.target.map_or("-".to_string(), |t| format!(">= {t}x")),
                match ratio.met {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "-",
                },
            );
        }
    }
    if !report.rounds.is_empty() {
        rounds_markdown(&mut out, &report.rounds);
    }
    if !report.engines.iter().any(|e| e.engine == EngineKind::Wodfs) {
        out.push_str("\nwodfs not measured (build with `--features wodfs`); targets need it.\n");
    }
    out
}

/// Every round's ops/s and ratios, beside the tables of medians.
fn rounds_markdown(out: &mut String, rounds: &[Round]) {
    let head = |first: &str| {
        let cols: Vec<String> = (1..=rounds.len()).map(|r| format!("round {r}")).collect();
        format!(
            "| {first} | {} |\n| --- | --- |{}\n",
            cols.join(" | "),
            " ---: |".repeat(rounds.len())
        )
    };
    let _ = write!(
        out,
        "\nEvery round (the tables above take each workload's median round):\n\n{}",
        head("engine | workload")
    );
    for (e, engine) in rounds[0].engines.iter().enumerate() {
        for (p, phase) in engine.phases.iter().enumerate() {
            let cells: Vec<String> = rounds
                .iter()
                .map(|round| {
                    let phase = &round.engines[e].phases[p];
                    if phase.ok {
                        group(phase.ops_per_second.round() as u64)
                    } else {
                        "failed".to_string()
                    }
                })
                .collect();
            let name = phase.phase.map_or("?", Phase::name);
            let _ = writeln!(
                out,
                "| {} | {name} | {} |",
                engine.engine.name(),
                cells.join(" | ")
            );
        }
    }
    let _ = write!(out, "\n{}", head("workload | ratio"));
    for (i, ratio) in rounds[0].ratios.iter().enumerate() {
        let cells: Vec<String> = rounds
            .iter()
            .map(|round| times(round.ratios[i].ratio))
            .collect();
        let _ = writeln!(out, "| {} | {} |", ratio_label(ratio), cells.join(" | "));
    }
}

/// A ratio's first two table cells: workload, then engine/baseline.
fn ratio_label(ratio: &Ratio) -> String {
    format!(
        "{} | {}/{}",
        ratio.phase.name(),
        ratio.engine.name(),
        ratio.baseline.name()
    )
}

/// A ratio as "1.23x", or "-" when there is none.
fn times(ratio: Option<f64>) -> String {
    ratio.map_or("-".to_string(), |r| format!("{r:.2}x"))
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
}

/// 1234567 -> "1,234,567".
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The current UTC time as `YYYY-MM-DDTHH-MM-SSZ` (file-name safe).
pub fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_stamp(seconds)
}

pub fn utc_stamp(unix_seconds: u64) -> String {
    let days = unix_seconds / 86_400;
    let rest = unix_seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`, for non-negative day numbers).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_stamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_stamp(1_767_225_599), "2025-12-31T23-59-59Z");
    }

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(18_512_345), "18,512,345");
    }

    fn engine(engine: EngineKind, ops_per_second: [f64; 4]) -> EngineReport {
        EngineReport {
            engine,
            version: "test",
            direct_io: None,
            phases: Phase::ALL
                .iter()
                .zip(ops_per_second)
                .map(|(&phase, ops_per_second)| PhaseReport {
                    phase: Some(phase),
                    ok: true,
                    ops_per_second,
                    ..PhaseReport::default()
                })
                .collect(),
        }
    }

    /// Each workload's median round, the lower middle one for an even
    /// count, among the rounds where it succeeded.
    #[test]
    fn medians_per_workload_among_successful_rounds() {
        let wodfs = |ops: [f64; 4]| vec![engine(EngineKind::Wodfs, ops)];
        let mut rounds = vec![
            wodfs([1.0, 10.0, 100.0, 7.0]),
            wodfs([5.0, 30.0, 300.0, 8.0]),
            wodfs([3.0, 20.0, 200.0, 9.0]),
            wodfs([4.0, 40.0, 400.0, 6.0]),
        ];
        rounds[1][0].phases[0].ok = false;
        let medians = median_engines(&rounds);
        let ops: Vec<f64> = medians[0].phases.iter().map(|p| p.ops_per_second).collect();
        assert_eq!(ops, [3.0, 20.0, 200.0, 7.0]);
        for phase in &mut rounds.iter_mut().flat_map(|r| r[0].phases.iter_mut()) {
            phase.ok = false;
        }
        assert!(!median_engines(&rounds)[0].phases[0].ok);
    }

    #[test]
    fn ratios_carry_targets_for_wodfs_only() {
        let engines = [
            engine(EngineKind::Redb, [100.0, 1000.0, 1e6, 1e5]),
            engine(EngineKind::Fjall, [1000.0, 800.0, 2e6, 5e5]),
            engine(EngineKind::Wodfs, [2000.0, 400.0, 5e6, 4e5]),
        ];
        let ratios = ratios(&engines);
        let find = |phase, engine, baseline| {
            ratios
                .iter()
                .find(|r| r.phase == phase && r.engine == engine && r.baseline == baseline)
                .unwrap()
        };
        let r = find(Phase::RandomInsert, EngineKind::Wodfs, EngineKind::Redb);
        assert_eq!(
            (r.ratio, r.target, r.met),
            (Some(20.0), Some(10.0), Some(true))
        );
        let r = find(Phase::SeqInsert, EngineKind::Wodfs, EngineKind::Fjall);
        assert_eq!(r.met, Some(false));
        let r = find(Phase::PointRead, EngineKind::Fjall, EngineKind::Redb);
        assert_eq!((r.target, r.met), (None, None));
        assert_eq!(ratios.len(), 12);
    }

    #[test]
    fn ratios_without_wodfs_are_context_only() {
        let engines = [
            engine(EngineKind::Redb, [1.0; 4]),
            engine(EngineKind::Fjall, [2.0; 4]),
        ];
        let ratios = ratios(&engines);
        assert_eq!(ratios.len(), 4);
        assert!(ratios
            .iter()
            .all(|r| r.ratio == Some(2.0) && r.target.is_none()));
    }
}
