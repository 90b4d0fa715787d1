//! A cgroup v1 memory cgroup that holds one engine process at a time.
//!
//! The limit counts the process's anonymous memory and the page cache it
//! touches, so an engine cannot hide a larger working set in the kernel's
//! cache. The harness creates one cgroup per run; each child moves itself
//! in before it opens a store ([`join`]), and the cgroup is removed when
//! the guard drops.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

#[derive(Debug)]
pub struct MemCgroup {
    path: PathBuf,
}

impl MemCgroup {
    pub fn create(name: &str, limit_bytes: u64) -> Result<Self> {
        let path = Path::new(MEMORY_ROOT).join(name);
        fs::create_dir(&path).with_context(|| {
            format!(
                "create memory cgroup {} (needs root and cgroup v1 memory at {MEMORY_ROOT})",
                path.display()
            )
        })?;
        let cgroup = Self { path };
        cgroup.write("memory.limit_in_bytes", &limit_bytes.to_string())?;
        Ok(cgroup)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Restarts the peak-usage counter, so each phase reports its own peak.
    pub fn reset_peak(&self) -> Result<()> {
        self.write("memory.max_usage_in_bytes", "0")
    }

    pub fn peak_bytes(&self) -> Result<u64> {
        Ok(self.read("memory.max_usage_in_bytes")?.trim().parse()?)
    }

    /// How many processes the kernel OOM-killed in this cgroup.
    pub fn oom_kills(&self) -> Result<u64> {
        let control = self.read("memory.oom_control")?;
        Ok(control
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0))
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.path.join(file);
        fs::write(&path, value).with_context(|| format!("write {value} to {}", path.display()))
    }

    fn read(&self, file: &str) -> Result<String> {
        let path = self.path.join(file);
        fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The children have exited; their page cache charges move to the
        // parent cgroup on rmdir.
        if let Err(e) = fs::remove_dir(&self.path) {
            eprintln!("engine-compare: cannot remove {}: {e}", self.path.display());
        }
    }
}

/// Moves the calling process into the cgroup at `path`.
pub fn join(path: &Path) -> Result<()> {
    let procs = path.join("cgroup.procs");
    fs::write(&procs, std::process::id().to_string())
        .with_context(|| format!("join {}", procs.display()))
}
