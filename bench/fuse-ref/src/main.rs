//! Reference FUSE file systems for the wodfs benchmark.
//!
//! * `fuse-ref nullfs MOUNTPOINT` keeps everything in memory: the ceiling
//!   any FUSE file system can reach on this machine.
//! * `fuse-ref passthrough BACKING_DIR MOUNTPOINT` forwards every operation
//!   to a directory of a kernel file system: what FUSE costs on top of it.
//!
//! Both negotiate the INIT flags and mount options wodfs uses
//! (`wodfs_fuse::init_flags`, `common.rs`; the writeback cache only with
//! `--writeback`, as wodfs's `-o writeback`), run in the foreground and
//! unmount on SIGTERM/SIGINT/SIGHUP.

mod common;
mod logger;
mod nullfs;
mod passthrough;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: fuse-ref nullfs [--threads N] [--poll-us US] [--writeback] MOUNTPOINT
       fuse-ref passthrough [--threads N] [--poll-us US] [--writeback] BACKING_DIR MOUNTPOINT
  --poll-us: poll /dev/fuse this long after a request (wodfs's -o poll; 0 off)
  --writeback: take the kernel's writeback cache (wodfs's -o writeback; off by default)";

fn main() -> ExitCode {
    logger::init();
    let mut args = std::env::args_os().skip(1);
    let Some(command) = args.next() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut threads = 1usize;
    let mut poll_us = wodfs_fuse::poll::DEFAULT_POLL_IDLE.as_micros() as u64;
    let mut writeback_cache = false;
    let mut positional: Vec<PathBuf> = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--threads" {
            match args.next().and_then(|n| n.to_str()?.parse().ok()) {
                Some(n) if n >= 1 => threads = n,
                _ => {
                    eprintln!("--threads needs a positive number\n{USAGE}");
                    return ExitCode::from(2);
                }
            }
        } else if arg == "--poll-us" {
            match args.next().and_then(|n| n.to_str()?.parse().ok()) {
                Some(us) => poll_us = us,
                None => {
                    eprintln!("--poll-us needs a number of microseconds\n{USAGE}");
                    return ExitCode::from(2);
                }
            }
        } else if arg == "--writeback" {
            writeback_cache = true;
        } else if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        } else {
            positional.push(PathBuf::from(arg));
        }
    }
    let poll_idle = Duration::from_micros(poll_us);
    let served = match (command.to_str(), positional.as_slice()) {
        (Some("nullfs"), [mountpoint]) => serve::serve(
            nullfs::NullFs::new(writeback_cache),
            mountpoint,
            "nullfs",
            threads,
            poll_idle,
        ),
        (Some("passthrough"), [backing, mountpoint]) => {
            match passthrough::Passthrough::new(backing, writeback_cache) {
                Ok(fs) => serve::serve(fs, mountpoint, "passthrough", threads, poll_idle),
                Err(error) => Err(error),
            }
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fuse-ref: {error}");
            ExitCode::FAILURE
        }
    }
}
