//! Runs the benchmark harness (bench/run.py) in --quick mode, so the
//! harness and its workloads cannot rot. It uses the binaries of this
//! build and its own work and output directories, so it can run beside a
//! real benchmark. The file systems are the kernel ones and the two
//! references; `BENCH_QUICK_FS` (e.g. `ext4,nullfs,passthrough,wodfs`)
//! changes the list, so wodfs's own failures do not fail this crate.

use std::path::{Path, PathBuf};
use std::process::Command;

const FUSE_REF: &str = env!("CARGO_BIN_EXE_fuse-ref");
const FSBENCH: &str = env!("CARGO_BIN_EXE_fsbench");

fn skip_reason() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".to_string());
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root (the harness attaches loop devices and mounts)".to_string());
    }
    if Command::new("python3").arg("--version").output().is_err() {
        return Some("python3 is missing".to_string());
    }
    None
}

/// Runs `bench/run.py ARGS` with this build's binaries, its work and
/// output directories under `scratch` (not /tmp: loop images need a file
/// system that supports O_DIRECT); whether it succeeded.
fn run_harness(args: &[&str], scratch: &Path) -> bool {
    let bin_dir = Path::new(FUSE_REF).parent().unwrap();
    assert_eq!(Path::new(FSBENCH).parent().unwrap(), bin_dir);
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new("python3")
        .arg(bench.join("run.py"))
        .args(args)
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--workdir")
        .arg(scratch.join("work"))
        .arg("--out")
        .arg(scratch.join("out"))
        .status()
        .unwrap();
    eprintln!("bench/run.py {}: {status}", args.join(" "));
    status.success()
}

/// A scratch directory `/var/tmp/fuse-ref-NAME-PID` for a harness run, or
/// `None` (and why, on stderr) where the harness cannot run.
fn scratch_or_skip(name: &str) -> Option<PathBuf> {
    if let Some(reason) = skip_reason() {
        eprintln!("skipped: {reason}");
        return None;
    }
    Some(PathBuf::from(format!(
        "/var/tmp/fuse-ref-{name}-{}",
        std::process::id()
    )))
}

#[test]
fn harness_quick_mode_runs_every_workload() {
    let Some(scratch) = scratch_or_skip("harness") else {
        return;
    };
    let file_systems = std::env::var("BENCH_QUICK_FS")
        .unwrap_or_else(|_| "ext4,btrfs,xfs,nullfs,passthrough".to_string());
    // `--missing fail`: a workload whose tool or input this machine lacks
    // fails the test instead of being skipped (scripts/test.sh installs
    // them), so no workload can rot unseen.
    let ok = run_harness(
        &["--quick", "--missing", "fail", "--fs", &file_systems],
        &scratch,
    );
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(ok, "bench/run.py --quick failed");
}

#[test]
fn harness_repeat_keeps_each_steps_median_run() {
    let Some(scratch) = scratch_or_skip("repeat") else {
        return;
    };
    let ok = run_harness(
        &[
            "--quick",
            "--repeat",
            "3",
            "--fs",
            "ext4,nullfs",
            "--workload",
            "unlink",
        ],
        &scratch,
    );
    assert!(ok, "bench/run.py --repeat 3 failed");
    // Every step of both file systems ran three times, and the record kept
    // is the median of the three (checked in Python: the report is JSON).
    let check = r###"
import json, pathlib, sys
run = json.loads(next(pathlib.Path(sys.argv[1]).glob("*.json")).read_text())
assert run["meta"]["repeat"] == 3
assert run["meta"]["rounds"] == {"unlink": 3}, run["meta"]["rounds"]
assert len(run["repeated_results"]) == 3 * len(run["results"]), "three runs of every step"
assert {r["fs"] for r in run["results"]} == {"ext4", "nullfs"}
for r in run["results"]:
    values = sorted(r["repeats"])
    assert len(values) == 3 and r["value"] == values[1], r
    # A FUSE daemon's resident peak is recorded; a kernel file system has none.
    rss = r["daemon_peak_rss_bytes"]
    assert (rss is not None and rss > 0) if r["fs"] == "nullfs" else rss is None, r
# ... and the markdown has a table of it, with a column for nullfs only.
md = next(pathlib.Path(sys.argv[1]).glob("*.md")).read_text()
table = md.split("## FUSE daemon resident peak (MiB, VmHWM)")[1].split("\n## ")[0]
assert "| workload | step | nullfs |" in table, table
assert "| unlink | unlink-4K | " in table, table
assert "## Every repetition (unlink 3 rounds;" in md, md
# A full run raises a workload to its own ROUNDS; a quick one does not.
sys.path.insert(0, sys.argv[2])
from harness import repeats
from workloads import git, unlink, tablefs
assert repeats.rounds_of(git, 1, quick=False) == git.ROUNDS > 1
assert repeats.rounds_of(unlink, 5, quick=False) == 5
assert repeats.rounds_of(tablefs, 1, quick=False) == 1
assert repeats.rounds_of(git, 1, quick=True) == 1
"###;
    let checked = Command::new("python3")
        .arg("-c")
        .arg(check)
        .arg(scratch.join("out"))
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .status()
        .unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(checked.success(), "the repeated report is wrong");
}
