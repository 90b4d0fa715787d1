//! Mounting, serving, periodic checkpoints, and clean unmounting on
//! SIGTERM/SIGINT/SIGHUP.

use std::io;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use fuser::{MountOption, SessionACL};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use wodfs_engine::BackgroundConfig;
use wodfs_fs::Fs;

use crate::adapter::{AdapterOptions, RequestCounters, WodFuse};
use crate::notify::KernelNotifier;
use crate::pending::PendingWrites;
use crate::poll::DEFAULT_POLL_IDLE;
use crate::polled::mount_polled;
use crate::run_ageing::RunAgeing;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Source name shown in mountinfo (the image path).
    pub fs_name: String,
    /// Negotiate the kernel writeback cache.
    pub writeback_cache: bool,
    /// Mount read-only.
    pub read_only: bool,
    /// Honour device nodes (`-o dev`); off (nodev) by default.
    pub dev: bool,
    /// Honour set-user-ID and set-group-ID bits (`-o suid`); off (nosuid)
    /// by default.
    pub suid: bool,
    /// Refuse to execute programs (`-o noexec`).
    pub noexec: bool,
    /// Seconds between background checkpoints.
    pub checkpoint_secs: u64,
    /// Milliseconds between background log flushes: the most a crash
    /// loses of writes nobody fsynced (plus what the kernel still caches,
    /// and `run_age_ms`).
    pub log_sync_ms: u64,
    /// Milliseconds between hand-overs of the write coalescer's older
    /// runs to the engine ([`crate::run_ageing`]): written bytes wait
    /// there at most two of them. The `wodfs` command sets it to
    /// `log_sync_ms` (`commit=`).
    pub run_age_ms: u64,
    /// Request-loop threads.
    pub threads: usize,
    /// Poll the FUSE device until this long after the last request instead
    /// of sleeping on it (`poll.rs`); `None` or zero: never poll. Only
    /// with one request thread.
    pub poll_idle: Option<Duration>,
    /// Request counters the adapter updates.
    pub counters: Arc<RequestCounters>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            fs_name: "wodfs".into(),
            writeback_cache: false,
            read_only: false,
            dev: false,
            suid: false,
            noexec: false,
            checkpoint_secs: 60,
            log_sync_ms: 1000,
            run_age_ms: 1000,
            threads: 1,
            poll_idle: Some(DEFAULT_POLL_IDLE),
            counters: Arc::default(),
        }
    }
}

fn fuser_config(opts: &MountOptions) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fs_name.clone()),
        // As root, `MountOption::Subtype` is not passed to mount(2).
        MountOption::CUSTOM("subtype=wodfs".into()),
        MountOption::DefaultPermissions,
        if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    // fuser mounts nodev,nosuid unless these are present.
    if opts.dev {
        config.mount_options.push(MountOption::Dev);
    }
    if opts.suid {
        config.mount_options.push(MountOption::Suid);
    }
    if opts.noexec {
        config.mount_options.push(MountOption::NoExec);
    }
    config.acl = SessionACL::All;
    config.n_threads = Some(opts.threads.max(1));
    config
}

/// Mounts `fs` on `mountpoint` and serves it until it is unmounted (by
/// `umount`, `fusermount3 -u` or a termination signal), then checkpoints.
/// While mounted, the engine's background thread flushes the log every
/// `log_sync_ms` and checkpoints every `checkpoint_secs`.
/// `ready` runs once the mount exists (the CLI detaches from its parent
/// there).
pub fn serve(
    fs: Arc<Fs>,
    mountpoint: &Path,
    opts: &MountOptions,
    ready: impl FnOnce(),
) -> io::Result<()> {
    let pending = Arc::new(PendingWrites::new(Arc::clone(&opts.counters)));
    let kernel = KernelNotifier::default();
    let adapter = WodFuse::new(
        Arc::clone(&fs),
        AdapterOptions {
            writeback_cache: opts.writeback_cache,
            counters: Arc::clone(&opts.counters),
            kernel: kernel.clone(),
        },
        Arc::clone(&pending),
    );
    let (mut session, device_poll) =
        mount_polled(adapter, mountpoint, &fuser_config(opts), opts.poll_idle)?;
    kernel.connect(session.notifier());
    let ra_mount = mountpoint.to_path_buf();
    // Runs once the request loop below has answered INIT.
    let readahead = thread::Builder::new()
        .name("readahead".into())
        .spawn(move || crate::readahead::raise_readahead(&ra_mount))?;
    ready();
    let mut unmounter = session.unmount_callable();
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let signals_handle = signals.handle();
    let mnt = mountpoint.to_path_buf();
    let sig_fs = Arc::clone(&fs);
    let watcher = thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                log::info!("signal {signal}: checkpoint and unmount {}", mnt.display());
                if let Err(e) = sig_fs.checkpoint() {
                    log::error!("checkpoint failed: {e}");
                }
                if let Err(error) = unmounter.unmount() {
                    log::warn!("unmount failed ({error}); detaching lazily");
                    if let Err(e) = Command::new("umount").arg("-l").arg(&mnt).status() {
                        log::error!("lazy unmount failed: {e}");
                    }
                }
            }
        })?;
    let background = fs.tree().start_background(BackgroundConfig {
        log_sync_every: Duration::from_millis(opts.log_sync_ms.max(1)),
        checkpoint_every: Duration::from_secs(opts.checkpoint_secs.max(1)),
        ..BackgroundConfig::default()
    });
    // Writers' back-pressure is paid on its own thread, so the request
    // thread is never stopped for long (`wodfs_fs::BackPressureWorker`).
    let back_pressure = fs.start_back_pressure_worker();
    let poll_watcher = device_poll.start();
    let run_ageing = RunAgeing::start(
        Arc::clone(&pending),
        Arc::clone(&fs),
        Duration::from_millis(opts.run_age_ms.max(1)),
    )?;
    let served = session.run();
    run_ageing.stop();
    poll_watcher.stop();
    log::info!(
        "{} requests; the device was polled in {} bursts, {} of them cut short for a busy CPU",
        device_poll.arrivals(),
        device_poll.bursts(),
        device_poll.hold_offs()
    );
    let _ = readahead.join();
    pending.flush_all(&fs);
    back_pressure.stop();
    signals_handle.close();
    let _ = watcher.join();
    if let Err(e) = background.stop() {
        log::error!("background log sync/checkpoint failed: {e}");
    }
    fs.checkpoint()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let stats = fs.tree().stats();
    let (log_syncs, log_write_outs) = fs.tree().log_syncs_and_write_outs();
    log::info!(
        "unmounted; checkpoint written. {} batches. Device writes since mount: log {} MiB ({} syncs, {} write-outs), nodes {} MiB ({} nodes; {} MiB more in {} nodes written and dropped as stale; {} checkpoints)",
        stats.batches,
        fs.tree().log_bytes_written() >> 20,
        log_syncs,
        log_write_outs,
        stats.node_bytes_written >> 20,
        stats.node_writes,
        stats.stale_bytes_written >> 20,
        stats.stale_writes,
        stats.checkpoints
    );
    log::info!(
        "device reads since mount: {} node headers, {} partitions, {} whole nodes ({} of {} asked read ahead for flushes), {} buffer segments; {} flushes, {} skip-downs, {} evictions",
        stats.header_reads,
        stats.partition_reads,
        stats.node_reads,
        stats.flush_reads_ahead,
        stats.flush_read_ahead_asks,
        stats.segment_reads,
        stats.flushes,
        stats.skip_downs,
        stats.evictions
    );
    served
}
