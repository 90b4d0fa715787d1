//! `wodfs mount IMAGE DIR [-f] [-o opts]`.
//!
//! By default the command starts a daemon (itself again, with `-f`, in a
//! new session, logging to a file) and waits until the mount exists or
//! has failed, so errors still reach the terminal as one line.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use wodfs_fs::FsOptions;
use wodfs_fuse::MountOptions;

use crate::args::MountOpts;
use crate::image::{open_fs, Fail};

const USAGE: &str = "usage: wodfs mount IMAGE DIR [-f] [-o opt,...]";
const DAEMON_ENV: &str = "WODFS_DAEMON";

/// Runs `mount`.
pub fn run(args: &[String]) -> Result<(), Fail> {
    let mut foreground = false;
    let mut opts = MountOpts::default();
    let mut raw_opts = Vec::new();
    let mut pos = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-f" | "--foreground" => foreground = true,
            "-o" => {
                let v = it.next().ok_or_else(|| Fail::new(USAGE))?;
                opts.apply(v).map_err(Fail::new)?;
                raw_opts.push(v.clone());
            }
            // mount(8) passes these to helpers: no fake mounts, no mtab.
            "-n" | "-s" | "-v" => {}
            s if s.starts_with("-o") => {
                opts.apply(&s[2..]).map_err(Fail::new)?;
                raw_opts.push(s[2..].to_string());
            }
            s if s.starts_with('-') => {
                return Err(Fail::new(format!("unknown option {s}\n{USAGE}")))
            }
            s => pos.push(s.to_string()),
        }
    }
    if opts.remount {
        return remount(pos.last().ok_or_else(|| Fail::new(USAGE))?, &raw_opts);
    }
    let [image, dir] = pos.as_slice() else {
        return Err(Fail::new(USAGE));
    };
    let image = std::fs::canonicalize(image)
        .map_err(|e| Fail::new(format!("{image}: {}", short_io(&e))))?;
    let dir =
        std::fs::canonicalize(dir).map_err(|e| Fail::new(format!("{dir}: {}", short_io(&e))))?;
    if !dir.is_dir() {
        return Err(Fail::new(format!("{}: not a directory", dir.display())));
    }
    if is_mount_point(&dir) {
        return Err(Fail::new(format!(
            "{}: busy (already a mount point)",
            dir.display()
        )));
    }
    if std::env::var_os(DAEMON_ENV).is_some() {
        return daemon(&image, &dir, &opts);
    }
    if foreground {
        return serve(&image, &dir, &opts, || {});
    }
    spawn_daemon(&image, &dir, &raw_opts)
}

/// A remount changes mount flags only (ro/rw): the kernel does it, the
/// daemon keeps serving; mount(8) calls us for it as a helper. Going
/// read-only fails with EBUSY while the kernel still waits for the daemon
/// to answer an asynchronous RELEASE of a just-closed file (it holds the
/// inode until then), so a busy remount is retried for up to 2 s.
fn remount(dir: &str, raw_opts: &[String]) -> Result<(), Fail> {
    let mut last = String::new();
    for _ in 0..20 {
        let out = Command::new("mount")
            .arg("-i")
            .arg("-o")
            .arg(raw_opts.join(","))
            .arg(dir)
            .output()
            .map_err(|e| Fail::new(format!("cannot run mount(8): {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        last = String::from_utf8_lossy(&out.stderr).trim().to_string();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Err(Fail::new(format!("{dir}: remount failed: {last}")))
}

fn short_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => e.to_string(),
    }
}

fn serve(image: &Path, dir: &Path, opts: &MountOpts, ready: impl FnOnce()) -> Result<(), Fail> {
    let fs_opts = FsOptions {
        relatime: opts.relatime,
        strictatime: opts.strictatime,
        ..FsOptions::default()
    };
    let fs = open_fs(image, opts.cache_bytes, fs_opts)?;
    let mopts = MountOptions {
        fs_name: image.display().to_string(),
        writeback_cache: opts.writeback,
        read_only: opts.read_only,
        dev: opts.dev,
        suid: opts.suid,
        noexec: opts.noexec,
        checkpoint_secs: opts.checkpoint_secs,
        log_sync_ms: opts.commit_ms,
        run_age_ms: opts.commit_ms,
        threads: opts.threads,
        poll_idle: Some(Duration::from_micros(opts.poll_us)),
        counters: Default::default(),
    };
    log::info!(
        "mounting {} on {} ({})",
        image.display(),
        dir.display(),
        crate::image::log_io_mode()
    );
    let served = wodfs_fuse::serve(Arc::new(fs), dir, &mopts, ready)
        .map_err(|e| Fail::new(format!("{}: cannot mount: {e}", dir.display())));
    #[cfg(feature = "heap-count")]
    log::info!(
        "heap peak {} MiB ({} MiB live at exit)",
        count_alloc::peak() >> 20,
        count_alloc::live() >> 20
    );
    served
}

/// The daemon side: new session, report readiness on stdout (a pipe to
/// the parent), then serve.
fn daemon(image: &Path, dir: &Path, opts: &MountOpts) -> Result<(), Fail> {
    let _ = rustix::process::setsid();
    let r = serve(image, dir, opts, || {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready");
        let _ = out.flush();
    });
    if let Err(f) = &r {
        log::error!("{}", f.msg);
        let _ = writeln!(std::io::stdout(), "{}", f.msg);
    }
    r
}

/// Where the daemon of `image` logs.
pub fn log_path(image: &Path) -> PathBuf {
    let name = image
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "wodfs".into());
    let system = PathBuf::from("/var/log/wodfs");
    let dir = if std::fs::create_dir_all(&system).is_ok() && writable(&system) {
        system
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/tmp".into());
        let d = home.join(".local/state/wodfs");
        let _ = std::fs::create_dir_all(&d);
        d
    };
    dir.join(format!("{name}.log"))
}

fn writable(dir: &Path) -> bool {
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok()
}

fn spawn_daemon(image: &Path, dir: &Path, raw_opts: &[String]) -> Result<(), Fail> {
    let log = log_path(image);
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Fail::new(format!("{}: cannot open log: {e}", log.display())))?;
    let exe = std::env::current_exe().map_err(|e| Fail::new(format!("cannot find myself: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount").arg(image).arg(dir).arg("-f");
    for o in raw_opts {
        cmd.arg("-o").arg(o);
    }
    let mut child = cmd
        .env(DAEMON_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .current_dir("/")
        .spawn()
        .map_err(|e| Fail::new(format!("cannot start the daemon: {e}")))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    match line.trim_end() {
        "ready" => Ok(()),
        "" => {
            let status = child.wait().ok();
            Err(Fail::new(format!(
                "the daemon exited ({status:?}); see {}",
                log.display()
            )))
        }
        msg => {
            let _ = child.wait();
            Err(Fail::new(msg.to_string()))
        }
    }
}

/// True if `dir` is listed as a mount point in /proc/self/mountinfo.
fn is_mount_point(dir: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = dir.to_string_lossy();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .map(unescape_mountinfo)
            .is_some_and(|m| m == want)
    })
}

fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}
