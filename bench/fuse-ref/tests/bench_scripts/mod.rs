//! What the tests of bench/'s Python scripts share: made-up runs written to
//! a scratch directory, and the script run on them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// False, and says the test is skipped, where python3 is missing.
pub fn python3_present() -> bool {
    let present = Command::new("python3").arg("--version").output().is_ok();
    if !present {
        eprintln!("skipped: python3 is missing");
    }
    present
}

/// A report as bench/run.py writes it, with `rows` as its results.
pub fn run_json(rows: &[String]) -> String {
    format!(r#"{{"meta": {{}}, "results": [{}]}}"#, rows.join(", "))
}

/// A fresh directory for this process's `tag` under the system's temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `python3 bench/SCRIPT ARGS...`.
pub fn run_script(script: &str, args: &[&Path]) -> Output {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(script);
    Command::new("python3")
        .arg(path)
        .args(args)
        .output()
        .unwrap()
}
