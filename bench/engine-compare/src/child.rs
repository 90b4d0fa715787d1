//! The child side of the harness: one workload on one store, inside the
//! memory cgroup. The harness reads the result from the single stdout line
//! that starts with [`RESULT_PREFIX`]; anything else an engine prints is
//! passed through.

use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cgroup;
use crate::workload::{self, Spec, Timing};

pub const RESULT_PREFIX: &str = "engine-compare-result ";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub spec: Spec,
    /// The memory cgroup to join before the store is opened.
    pub cgroup: Option<PathBuf>,
}

pub fn main(request_json: &str) -> Result<()> {
    let request: Request = serde_json::from_str(request_json).context("parse child request")?;
    if let Some(path) = &request.cgroup {
        cgroup::join(path)?;
    }
    let mut timing = workload::run(&request.spec)?;
    timing.peak_rss_bytes = peak_rss_bytes();
    println!("{RESULT_PREFIX}{}", serde_json::to_string(&timing)?);
    Ok(())
}

/// The process's peak resident set (`VmHWM`): the engine's own memory,
/// where the cgroup's peak also counts the page cache it touched.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Finds the result line in a child's stdout.
pub fn parse_result(stdout: &str) -> Result<Timing> {
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix(RESULT_PREFIX))
        .context("the child printed no result")?;
    serde_json::from_str(line).context("parse child result")
}
