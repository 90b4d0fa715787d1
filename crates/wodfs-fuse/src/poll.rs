//! Polling the FUSE device between requests instead of sleeping on it.
//!
//! A request from a single-threaded program (tar, grep, git) is a round
//! trip: the program's thread sleeps until the reply, the daemon's request
//! thread sleeps in `read(/dev/fuse)` until the next request. On this
//! 2-CPU guest the two run on different CPUs, and each sleep lets a CPU
//! halt; waking a halted virtual CPU is an exit to the hypervisor and back,
//! which costs more than most requests take to answer (`docs/fuse.md`,
//! "What a request costs here"). The guest kernel's own remedy for this,
//! `cpuidle-haltpoll`, is off here (no cpuidle driver).
//!
//! While requests keep coming, [`DevicePoll`] puts the device in
//! non-blocking mode: the request loop (fuser's, which retries a read that
//! finds nothing) then polls, so the request thread's CPU never halts and
//! a new request is picked up without a wakeup. A watcher thread turns the
//! device back to blocking reads once no request has arrived for one
//! `idle` period, so an idle daemon sleeps and costs nothing; the first
//! request after that turns polling on again (one `fcntl`).
//!
//! Polling must not take a CPU from anyone who wants it: each idle period
//! the watcher reads the request thread's run-queue wait, and if it was
//! kept from its CPU for an eighth of the period, polling stops for
//! `HOLD_OFF`, 50 ms (two busy `gzip` readers were 36 % slower without this).
//!
//! Polling only pays with one request thread: with several, every one of
//! them would poll, and on two CPUs they would take the CPUs from the
//! programs they serve. Both the mode switches and the polling are
//! invisible to the file system: a read that blocks and a read that is
//! retried return the same requests.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

/// How long the device is polled after the last request, unless the mount
/// says otherwise (`-o poll=MICROSECONDS`). Long enough to span what a
/// program does between two requests (tar between two files, git between
/// two objects), short enough that a burst's tail costs the CPU at most
/// twice this.
pub const DEFAULT_POLL_IDLE: Duration = Duration::from_micros(500);

/// A READ or WRITE at least this large neither starts nor prolongs polling
/// ([`DevicePoll::arrived_sized`]). tar writes 10 KiB at a time; sequential
/// streams arrive as 128 KiB to 1 MiB requests.
pub const BULK_BYTES: usize = 64 << 10;

/// Switches a FUSE device between polling and blocking reads as requests
/// come and go. Shared by the request thread ([`DevicePoll::arrived`]) and
/// the watcher ([`PollWatcher`]).
#[derive(Debug)]
pub struct DevicePoll {
    /// A duplicate of the session's descriptor: it shares the open file
    /// (and so the non-blocking flag) with the request loop, and keeps it
    /// open until the watcher is done with it. Set once the session exists
    /// ([`DevicePoll::attach`]); the file system it wraps exists before.
    device: OnceLock<OwnedFd>,
    /// `None`: polling is off for this mount.
    idle: Option<Duration>,
    /// Requests so far that poll; only the request thread writes it.
    arrivals: AtomicU64,
    /// Bulk READs and WRITEs so far, which do not.
    bulk: AtomicU64,
    /// Whether the device is in non-blocking mode. Read without the lock on
    /// every request; changed only under `switch`, together with the flag.
    polling: AtomicBool,
    /// Polling gave its CPU back to a contender; no polling until the
    /// watcher's hold-off ends.
    holding_off: AtomicBool,
    /// The thread that polls (the one calling [`DevicePoll::arrived`]), 0
    /// until it first does: the watcher reads its run-queue wait.
    request_thread: AtomicI32,
    switch: Mutex<Switch>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Switch {
    /// The watcher runs: without it nothing would turn polling off.
    started: bool,
    stopped: bool,
    /// Mode switches so far, for tests and the unmount log.
    turned_on: u64,
    /// Times polling stopped because its CPU was wanted.
    held_off: u64,
}

impl DevicePoll {
    /// Polling that stops after `idle` without requests; `None` turns it
    /// off (requests are still counted). Nothing happens until
    /// [`DevicePoll::attach`] and [`DevicePoll::start`].
    pub fn new(idle: Option<Duration>) -> Arc<DevicePoll> {
        Arc::new(DevicePoll {
            device: OnceLock::new(),
            idle: idle.filter(|d| !d.is_zero()),
            arrivals: AtomicU64::new(0),
            bulk: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            holding_off: AtomicBool::new(false),
            request_thread: AtomicI32::new(0),
            switch: Mutex::new(Switch::default()),
            changed: Condvar::new(),
        })
    }

    /// Gives it the session's descriptor (it keeps a duplicate). The device
    /// is left as it is, blocking, until the first request.
    pub fn attach(&self, device: BorrowedFd<'_>) -> io::Result<()> {
        let owned = device.try_clone_to_owned()?;
        self.device
            .set(owned)
            .map_err(|_| io::Error::other("FUSE device attached twice"))
    }

    /// Notes a request; called by the request thread before it answers
    /// one. Costs an atomic add and load unless the device was blocking.
    pub fn arrived(&self) {
        self.arrivals.fetch_add(1, Ordering::Relaxed);
        if self.idle.is_some() && !self.polling.load(Ordering::Relaxed) {
            self.start_polling();
        }
    }

    /// Notes a READ or WRITE of `bytes`. A bulk one (at least
    /// [`BULK_BYTES`]) is counted but neither starts polling nor keeps it
    /// going: it takes the daemon long enough that a wakeup is lost in it,
    /// and a stream of them (a sequential write) keeps the background
    /// threads busy compressing and writing, which a polling request thread
    /// would take CPU from (a 4 GiB write was 10-20 % slower polling).
    pub fn arrived_sized(&self, bytes: usize) {
        if bytes >= BULK_BYTES {
            self.bulk.fetch_add(1, Ordering::Relaxed);
        } else {
            self.arrived();
        }
    }

    /// Requests noted so far (bulk ones included).
    pub fn arrivals(&self) -> u64 {
        self.arrivals.load(Ordering::Relaxed) + self.bulk.load(Ordering::Relaxed)
    }

    /// How many times polling was turned on (once per burst of requests).
    pub fn bursts(&self) -> u64 {
        self.switch.lock().turned_on
    }

    /// How many times polling gave its CPU back to a contender.
    pub fn hold_offs(&self) -> u64 {
        self.switch.lock().held_off
    }

    /// Whether the device is in non-blocking (polling) mode now.
    pub fn is_polling(&self) -> bool {
        self.polling.load(Ordering::Relaxed)
    }

    #[cold]
    fn start_polling(&self) {
        if self.holding_off.load(Ordering::Relaxed) {
            return;
        }
        let mut switch = self.switch.lock();
        if !switch.started || switch.stopped || self.polling.load(Ordering::Relaxed) {
            return;
        }
        if self.request_thread.load(Ordering::Relaxed) == 0 {
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            self.request_thread.store(tid, Ordering::Relaxed);
        }
        let Some(device) = self.device.get() else {
            return;
        };
        match set_nonblocking(device.as_fd(), true) {
            Ok(()) => {
                self.polling.store(true, Ordering::Relaxed);
                switch.turned_on += 1;
                self.changed.notify_one();
            }
            // Polling is an optimization: without it, reads block.
            Err(e) => log::warn!("cannot poll the FUSE device: {e}"),
        }
    }

    /// The watcher's loop: wait for polling to start, then stop it after a
    /// full `idle` period without a request.
    fn watch(&self, idle: Duration) {
        let mut switch = self.switch.lock();
        let mut contention = Contention::default();
        loop {
            if switch.stopped {
                return;
            }
            if !self.polling.load(Ordering::Relaxed) {
                self.changed.wait(&mut switch);
                continue;
            }
            let seen = self.arrivals.load(Ordering::Relaxed);
            let waited_before = contention.runqueue_wait(self.request_thread());
            // Sleeps with the lock released; `stop` wakes it early.
            self.changed.wait_for(&mut switch, idle);
            if switch.stopped {
                return;
            }
            let waited = contention
                .runqueue_wait(self.request_thread())
                .zip(waited_before)
                .map(|(after, before)| Duration::from_nanos(after.saturating_sub(before)));
            if waited.is_some_and(|w| w > idle / CONTENDED_FRACTION) {
                // Another thread wants the polling CPU (a busy program,
                // the background threads): give it back for a while.
                self.stop_polling();
                switch.held_off += 1;
                self.holding_off.store(true, Ordering::Relaxed);
                self.changed.wait_for(&mut switch, HOLD_OFF);
                self.holding_off.store(false, Ordering::Relaxed);
            } else if self.arrivals.load(Ordering::Relaxed) == seen {
                self.stop_polling();
            }
        }
    }

    /// The request thread's id, once it has asked to poll.
    fn request_thread(&self) -> Option<i32> {
        Some(self.request_thread.load(Ordering::Relaxed)).filter(|&tid| tid != 0)
    }

    /// Back to blocking reads. Called with `switch` held.
    fn stop_polling(&self) {
        let Some(device) = self.device.get() else {
            return;
        };
        if let Err(e) = set_nonblocking(device.as_fd(), false) {
            // Left polling, the request thread would spin for good.
            log::error!("cannot make the FUSE device block again: {e}");
            return;
        }
        self.polling.store(false, Ordering::Relaxed);
    }

    /// Starts the watcher thread (none if polling is off). Without a
    /// watcher nothing polls: a thread that cannot be started costs the
    /// mount its polling, not its service.
    pub fn start(self: &Arc<Self>) -> PollWatcher {
        let thread = self.idle.and_then(|idle| {
            let poll = Arc::clone(self);
            let spawned = thread::Builder::new()
                .name("wodfs-poll".into())
                .spawn(move || poll.watch(idle));
            match spawned {
                Ok(thread) => {
                    self.switch.lock().started = true;
                    Some(thread)
                }
                Err(e) => {
                    log::warn!("no polling of the FUSE device: {e}");
                    None
                }
            }
        });
        PollWatcher {
            poll: Arc::clone(self),
            thread,
        }
    }
}

/// The running watcher; [`PollWatcher::stop`] (or drop) ends it and leaves
/// the device blocking.
#[derive(Debug)]
pub struct PollWatcher {
    poll: Arc<DevicePoll>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PollWatcher {
    /// Stops the watcher and turns polling off for good.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        {
            let mut switch = self.poll.switch.lock();
            switch.stopped = true;
            if self.poll.polling.load(Ordering::Relaxed) {
                self.poll.stop_polling();
            }
            self.poll.changed.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::error!("FUSE poll watcher panicked");
            }
        }
    }
}

impl Drop for PollWatcher {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Polling stops when the request thread waited on the run queue for more
/// than 1/`CONTENDED_FRACTION` of an idle period: the CPU it spins on is
/// wanted by another thread.
const CONTENDED_FRACTION: u32 = 8;

/// How long polling stays off after it gave its CPU back. Against two
/// programs busy on both CPUs (two `gzip`s reading their input from the
/// mount) polling without this was 36 % slower; the next try after a hold-
/// off costs one idle period of polling.
const HOLD_OFF: Duration = Duration::from_millis(50);

/// Reads a thread's run-queue wait from `/proc/self/task/TID/schedstat`
/// (its second field, nanoseconds runnable but not running). The file is
/// opened once and read again from offset 0.
#[derive(Debug, Default)]
struct Contention {
    schedstat: Option<(i32, File)>,
}

impl Contention {
    fn runqueue_wait(&mut self, tid: Option<i32>) -> Option<u64> {
        let tid = tid?;
        if self.schedstat.as_ref().is_none_or(|(t, _)| *t != tid) {
            let path = format!("/proc/self/task/{tid}/schedstat");
            self.schedstat = File::open(path).ok().map(|f| (tid, f));
        }
        let (_, file) = self.schedstat.as_ref()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let mut flags = fcntl_getfl(fd)?;
    flags.set(OFlags::NONBLOCK, on);
    fcntl_setfl(fd, flags)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    /// The contention test keeps every CPU busy, which would make the
    /// others' polling give way: one test at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// A socket standing in for the device (and its peer, kept open),
    /// polled after `idle`, with the watcher running; holds `SERIAL`.
    struct Started {
        _serial: parking_lot::MutexGuard<'static, ()>,
        dev: UnixStream,
        _peer: UnixStream,
        poll: Arc<DevicePoll>,
        watcher: PollWatcher,
    }

    fn started(idle: Duration) -> Started {
        let serial = SERIAL.lock();
        let (dev, peer) = UnixStream::pair().unwrap();
        let poll = DevicePoll::new(Some(idle));
        poll.attach(dev.as_fd()).unwrap();
        let watcher = poll.start();
        Started {
            _serial: serial,
            dev,
            _peer: peer,
            poll,
            watcher,
        }
    }

    fn nonblocking(fd: BorrowedFd<'_>) -> bool {
        fcntl_getfl(fd).unwrap().contains(OFlags::NONBLOCK)
    }

    /// Waits (up to 10 s) for `cond`; the watcher runs on its own clock.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn a_request_turns_polling_on_and_idleness_turns_it_off() {
        let s = started(Duration::from_millis(5));
        assert!(
            !nonblocking(s.dev.as_fd()),
            "blocking until the first request"
        );
        s.poll.arrived();
        assert!(
            nonblocking(s.dev.as_fd()),
            "the request's own thread turns polling on"
        );
        assert!(s.poll.is_polling());
        // The flag is the open file's: the caller's descriptor sees it.
        assert!(
            eventually(|| !nonblocking(s.dev.as_fd())),
            "idle: blocking again"
        );
        assert!(!s.poll.is_polling());
        // Again (after a hold-off, if waiting for a CPU caused one).
        assert!(eventually(|| {
            s.poll.arrived();
            nonblocking(s.dev.as_fd())
        }));
        assert!(s.poll.bursts() >= 2);
        s.watcher.stop();
        assert!(
            !nonblocking(s.dev.as_fd()),
            "stopping leaves the device blocking"
        );
        s.poll.arrived();
        assert!(!nonblocking(s.dev.as_fd()), "no polling after stop");
    }

    #[test]
    fn requests_closer_than_the_idle_period_keep_it_polling() {
        let s = started(Duration::from_millis(200));
        // 50 requests 10 ms apart: 500 ms, more than two idle periods.
        // Only a hold-off (this thread kept from its CPU on a loaded
        // machine) may interrupt it.
        for _ in 0..50 {
            s.poll.arrived();
            thread::sleep(Duration::from_millis(10));
            assert!(nonblocking(s.dev.as_fd()) || s.poll.hold_offs() > 0);
        }
        assert!(
            s.poll.bursts() <= 1 + s.poll.hold_offs(),
            "one switch per burst"
        );
        drop(s.watcher);
        assert!(!nonblocking(s.dev.as_fd()));
    }

    #[test]
    fn off_it_only_counts() {
        let _serial = SERIAL.lock();
        let (dev, _peer) = UnixStream::pair().unwrap();
        for idle in [None, Some(Duration::ZERO)] {
            let poll = DevicePoll::new(idle);
            poll.attach(dev.as_fd()).unwrap();
            let watcher = poll.start();
            poll.arrived();
            poll.arrived();
            assert!(!nonblocking(dev.as_fd()));
            assert_eq!((poll.arrivals(), poll.bursts()), (2, 0));
            watcher.stop();
        }
    }

    #[test]
    fn nothing_polls_before_the_watcher_runs() {
        let _serial = SERIAL.lock();
        let (dev, _peer) = UnixStream::pair().unwrap();
        let poll = DevicePoll::new(Some(Duration::from_millis(5)));
        poll.arrived();
        poll.attach(dev.as_fd()).unwrap();
        poll.arrived();
        assert!(!nonblocking(dev.as_fd()), "nobody would turn it off");
        assert!(poll.attach(dev.as_fd()).is_err());
    }

    #[test]
    fn bulk_reads_and_writes_do_not_poll() {
        let s = started(Duration::from_millis(5));
        s.poll.arrived_sized(BULK_BYTES);
        assert!(!nonblocking(s.dev.as_fd()));
        s.poll.arrived_sized(BULK_BYTES - 1);
        assert!(nonblocking(s.dev.as_fd()));
        // A stream of bulk requests alone lets polling end.
        assert!(eventually(|| {
            s.poll.arrived_sized(1 << 20);
            !nonblocking(s.dev.as_fd())
        }));
        assert_eq!(s.poll.bursts(), 1);
        assert!(s.poll.arrivals() >= 3);
        s.watcher.stop();
    }

    #[test]
    fn a_thread_s_runqueue_wait_is_read() {
        let _serial = SERIAL.lock();
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let mut contention = Contention::default();
        assert!(contention.runqueue_wait(Some(tid)).is_some());
        assert!(contention.runqueue_wait(None).is_none());
        assert!(contention.runqueue_wait(Some(i32::MAX)).is_none());
    }

    #[test]
    fn a_contended_cpu_stops_polling() {
        let s = started(Duration::from_millis(20));
        // This thread polls; a busy thread per CPU (and one more) keeps it
        // waiting on the run queue while it keeps requests coming.
        let cpus = thread::available_parallelism().map_or(2, |n| n.get());
        let done = Arc::new(AtomicBool::new(false));
        let hogs: Vec<_> = (0..=cpus)
            .map(|_| {
                let done = Arc::clone(&done);
                thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let held_off = eventually(|| {
            s.poll.arrived();
            let spin_until = Instant::now() + Duration::from_millis(1);
            while Instant::now() < spin_until {
                std::hint::spin_loop();
            }
            s.poll.hold_offs() > 0
        });
        done.store(true, Ordering::Relaxed);
        for hog in hogs {
            hog.join().unwrap();
        }
        assert!(held_off, "polling never gave way to busy threads");
        s.watcher.stop();
    }
}
