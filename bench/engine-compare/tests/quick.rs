//! Keeps the benchmark from rotting: runs `--quick` (tiny sizes, no root,
//! no cgroup) for every engine built in and checks that every workload ran
//! and verified its data.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn quick_run_completes_for_every_engine() {
    let out_dir = scratch_dir("out");
    let work_dir = scratch_dir("work");
    let output = Command::new(env!("CARGO_BIN_EXE_engine-compare"))
        .arg("--quick")
        // Two rounds: the medians, and every round beside them.
        .arg("--rounds")
        .arg("2")
        .arg("--out")
        .arg(&out_dir)
        .arg("--work-dir")
        .arg(&work_dir)
        .output()
        .expect("run engine-compare");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "engine-compare --quick failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("| redb | random-insert |"), "{stdout}");

    let reports: Vec<_> = std::fs::read_dir(&out_dir)
        .expect("read the out dir")
        .map(|entry| entry.expect("dir entry").path())
        .collect();
    assert_eq!(reports.len(), 1, "{reports:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reports[0]).expect("read the report"))
            .expect("parse the report");

    let mut expected = vec!["redb", "fjall"];
    if cfg!(feature = "wodfs") {
        expected.push("wodfs");
    }
    let engines = report["engines"].as_array().expect("engines");
    let names: Vec<_> = engines
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    assert_eq!(names, expected);
    for engine in engines {
        let phases = engine["phases"].as_array().expect("phases");
        assert_eq!(phases.len(), 4);
        for phase in phases {
            assert_eq!(phase["ok"], true, "{phase}");
            assert!(phase["ops"].as_u64().unwrap() > 0, "{phase}");
            assert!(phase["ops_per_second"].as_f64().unwrap() > 0.0, "{phase}");
        }
    }
    assert!(!report["ratios"].as_array().expect("ratios").is_empty());
    let rounds = report["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2);
    for round in rounds {
        assert_eq!(
            round["engines"].as_array().expect("engines").len(),
            expected.len()
        );
    }
    assert!(stdout.contains("Every round"), "{stdout}");

    // The run removed its scratch stores.
    assert_eq!(std::fs::read_dir(&work_dir).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(out_dir);
    let _ = std::fs::remove_dir_all(work_dir);
}

fn scratch_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "engine-compare-test-{}-{label}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch dir");
    dir
}
