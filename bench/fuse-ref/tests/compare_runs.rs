//! bench/compare.py on two made-up runs: it flags a wodfs step that got
//! slower by itself and after nullfs's change, and a grown resident peak;
//! not a step whose slowdown nullfs shared, nor one that only looks slower
//! because nullfs got faster, nor a step too short to judge.

mod bench_scripts;

use std::path::PathBuf;

use bench_scripts::{python3_present, run_json, run_script, scratch_dir};

/// One result row as bench/run.py writes it (the fields compare.py reads).
fn row(fs: &str, step: &str, wall_s: f64, peak_mib: u64) -> String {
    let peak = if fs == "wodfs" || fs == "nullfs" {
        (peak_mib << 20).to_string()
    } else {
        "null".to_string()
    };
    format!(
        r#"{{"workload": "w", "step": "{step}", "fs": "{fs}", "wall_s": {wall_s}, "daemon_peak_rss_bytes": {peak}}}"#
    )
}

#[test]
fn compare_flags_what_wodfs_lost_and_nothing_else() {
    if !python3_present() {
        return;
    }
    let dir = scratch_dir("compare-runs");
    // (file system, step, wall s before, after, peak MiB before, after)
    let steps = [
        ("wodfs", "regressed", 10.0, 20.0, 300, 300),
        ("nullfs", "regressed", 5.0, 5.0, 50, 50),
        ("wodfs", "machine-slower", 10.0, 15.0, 300, 300),
        ("nullfs", "machine-slower", 5.0, 7.5, 50, 50),
        ("wodfs", "nullfs-faster", 10.0, 11.0, 300, 300),
        ("nullfs", "nullfs-faster", 5.0, 2.5, 50, 50),
        ("wodfs", "short", 0.01, 0.04, 30, 30),
        ("wodfs", "grew", 10.0, 10.0, 300, 500),
    ];
    let before = run_json(
        &steps
            .iter()
            .map(|&(fs, step, wall, _, peak, _)| row(fs, step, wall, peak))
            .collect::<Vec<_>>(),
    );
    let after = run_json(
        &steps
            .iter()
            .map(|&(fs, step, _, wall, _, peak)| row(fs, step, wall, peak))
            .collect::<Vec<_>>(),
    );
    let (a, b) = (dir.join("before.json"), dir.join("after.json"));
    std::fs::write(&a, before).unwrap();
    std::fs::write(&b, after).unwrap();
    let compare = |x: &PathBuf, y: &PathBuf| run_script("compare.py", &[x, y]);
    let out = compare(&a, &b);
    let same = compare(&a, &a);
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "regressions found: {text}");
    assert!(
        text.contains("| w | regressed | wall s | 10.00 | 20.00 | 1.00× | **2.00×** |"),
        "{text}"
    );
    assert!(
        text.contains("| w | grew | peak MiB | 300.00 | 500.00 |"),
        "{text}"
    );
    for quiet in ["machine-slower", "nullfs-faster", "short"] {
        assert!(!text.contains(quiet), "{quiet} flagged: {text}");
    }
    assert_eq!(same.status.code(), Some(0), "a run against itself");
}
