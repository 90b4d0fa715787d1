//! Interrupts (SIGINT, SIGTERM, SIGHUP) during a run.
//!
//! The harness holds loop devices, mounts and a cgroup that must not
//! outlive it. The signals are blocked in every harness thread and a
//! watcher thread waits for them: it kills the running child and raises a
//! flag, the harness returns an error at its next check, and the guards
//! clean up as the stack unwinds. `std::process::Command` resets the
//! signal mask in the children it spawns, so children die of these signals
//! as usual.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread;

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::Pid;

#[derive(Debug, Default)]
struct State {
    interrupted: AtomicBool,
    /// The running child's pid, 0 when none.
    child: AtomicI32,
}

#[derive(Debug, Clone)]
pub struct Interrupts {
    state: Arc<State>,
}

impl Interrupts {
    /// Blocks the signals in the calling thread (and so in every thread it
    /// spawns later) and starts the watcher. Call before spawning threads.
    pub fn install() -> Result<Self> {
        let mut signals = SigSet::empty();
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            signals.add(signal);
        }
        signals.thread_block().context("block signals")?;
        let state = Arc::new(State::default());
        let watched = Arc::clone(&state);
        thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                while let Ok(signal) = signals.wait() {
                    eprintln!("engine-compare: {signal}, cleaning up");
                    watched.interrupted.store(true, Ordering::SeqCst);
                    let pid = watched.child.load(Ordering::SeqCst);
                    if pid > 0 {
                        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                }
            })
            .context("spawn the signal watcher")?;
        Ok(Self { state })
    }

    pub fn track_child(&self, pid: u32) {
        let pid = i32::try_from(pid).unwrap_or(0);
        self.state.child.store(pid, Ordering::SeqCst);
        // A signal that came just before the child was tracked.
        if self.interrupted() && pid > 0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    pub fn untrack_child(&self) {
        self.state.child.store(0, Ordering::SeqCst);
    }

    pub fn interrupted(&self) -> bool {
        self.state.interrupted.load(Ordering::SeqCst)
    }

    pub fn check(&self) -> Result<()> {
        if self.interrupted() {
            bail!("interrupted");
        }
        Ok(())
    }
}
