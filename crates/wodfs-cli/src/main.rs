//! `wodfs`: make, mount, check and inspect wodfs file systems.
//!
//! ```text
//! wodfs mkfs IMAGE [--size 8G] [--node-kib 4096] [--log-mib N] [--force]
//! wodfs mount IMAGE DIR [-f] [-o opt,...]
//! wodfs sync DIR
//! wodfs stat IMAGE
//! wodfs fsck IMAGE
//! ```

mod allocator;
mod args;
mod cmd_fsck;
mod cmd_info;
mod cmd_mkfs;
mod cmd_mount;
mod cmd_sync;
mod image;
mod logger;

use std::process::ExitCode;

use image::Fail;

const USAGE: &str = "usage: wodfs mkfs IMAGE [--size 8G] [--node-kib 4096] [--log-mib N] [--force]
       wodfs mount IMAGE DIR [-f] [-o opt,...]
            options: writeback, ro, cache=SIZE, commit=SECS, checkpoint=SECS,
                     threads=N, poll=US, noatime, strictatime, dev, suid,
                     noexec
       wodfs sync DIR
       wodfs stat IMAGE
       wodfs fsck IMAGE";

fn main() -> ExitCode {
    allocator::configure();
    logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let done = match cmd.as_str() {
        "mkfs" => cmd_mkfs::run(rest).map(|_| 0),
        "mount" => cmd_mount::run(rest).map(|_| 0),
        "sync" => cmd_sync::run(rest).map(|_| 0),
        "stat" => cmd_info::run(rest).map(|_| 0),
        "fsck" => cmd_fsck::run(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(0)
        }
        // mount.fuse3 style: `wodfs IMAGE DIR -o …`.
        _ if rest.first().is_some_and(|d| !d.starts_with('-')) => cmd_mount::run(&args).map(|_| 0),
        other => Err(Fail {
            msg: format!("unknown command {other:?}\n{USAGE}"),
            code: 2,
        }),
    };
    match done {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("wodfs: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}
