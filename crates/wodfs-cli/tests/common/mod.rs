//! Shared by the `wodfs` command's tests: running the binary and a
//! scratch directory that cleans up after itself.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `wodfs` binary built for these tests.
pub fn wodfs<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wodfs"))
        .args(args)
        .output()
        .unwrap()
}

/// Standard output and error together.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh directory under the system's temporary directory, removed on
/// drop (after a lazy unmount of `mnt` inside it, in case a test mounted
/// there and failed).
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(name: &str) -> Tmp {
        let d = std::env::temp_dir().join(format!("wodfs-cli-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    /// The path of `name` inside, as a string.
    pub fn p(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if self.0.join("mnt").exists() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.0.join("mnt"))
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
