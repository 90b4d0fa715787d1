//! bench/targets.py over several made-up runs: it tallies, per target, in
//! how many runs the target was met and each run's verdict in order; a
//! target no run measured is a dash, never a miss.

mod bench_scripts;

use std::path::{Path, PathBuf};

use bench_scripts::{python3_present, run_json, run_script, scratch_dir};

/// The random 4-byte writes of one run: wodfs's time and bytes against
/// ext4's (the fields targets.py reads).
fn random_writes(wodfs_s: f64, wodfs_bytes: u64) -> String {
    let row = |fs: &str, value: f64, bytes: u64| {
        format!(
            r#"{{"workload": "seqio", "step": "random-write", "fs": "{fs}", "unit": "s", "better": "lower", "value": {value}, "dev_write_bytes": {bytes}}}"#
        )
    };
    run_json(&[
        row("wodfs", wodfs_s, wodfs_bytes),
        row("ext4", 1.0, 40 << 20),
    ])
}

#[test]
fn several_runs_are_tallied_per_target() {
    if !python3_present() {
        return;
    }
    let dir = scratch_dir("targets-tally");
    // Time met in the first and third run, bytes met in the first only.
    let runs = [(0.3, 1 << 20), (0.7, 1 << 20), (0.4, 8 << 20)];
    let paths: Vec<PathBuf> = runs
        .iter()
        .enumerate()
        .map(|(i, &(s, bytes))| {
            let path = dir.join(format!("run{i}.json"));
            std::fs::write(&path, random_writes(s, bytes)).unwrap();
            path
        })
        .collect();
    let all: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let out = run_script("targets.py", &all);
    let single = run_script("targets.py", &all[..1]);
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.starts_with("| target | met in | per run |"), "{text}");
    assert!(
        text.contains(
            "| 10,000 random 4-byte writes + fsync: time ≤ 0.5× best kernel FS | 2 of 3 | ✓ ✗ ✓ |"
        ),
        "{text}"
    );
    assert!(
        text.contains("| same: device bytes written ≤ 0.1× best kernel FS | 2 of 3 | ✓ ✓ ✗ |"),
        "{text}"
    );
    assert!(
        text.contains("| git git-clone: ≥ 0.7× nullfs and ≥ 1× passthrough | 0 of 3 | – – – |"),
        "{text}"
    );
    // One run still gets the table of measured ratios.
    let one = String::from_utf8_lossy(&single.stdout);
    assert!(one.contains("0.3"), "{one}");
    assert!(one.starts_with("| target | measured | met |"), "{one}");
}
