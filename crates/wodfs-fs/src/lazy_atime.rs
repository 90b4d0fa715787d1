//! Access times written in batches: a read that moves a file's atime
//! (relatime rules, or every read with `strictatime`) notes the new time
//! here, and the notes reach the tree together, as one batch.
//!
//! Written one read at a time, each atime was a batch of its own: the
//! namespace lock, a log record and the engine's write lock per file. In
//! a cold `grep -r` of the kernel tree after an untar (every file's first
//! read moves its atime) that was 12 % of the request thread, and a
//! batch waiting for the engine's write lock behind a read-ahead thread,
//! which holds the read lock while it reads a leaf, stalled the read it
//! came from for milliseconds: FUSE READ took 47.8 µs on average against
//! 27.8 with `-o noatime`.
//!
//! Until they are written, the notes stand in for the stored atimes
//! wherever attributes are read ([`crate::Fs::getattr`], lookups,
//! listings). They are written before any other batch of the file system
//! (so every change is ordered after the atimes read before it, and a
//! rename or unlink finds them stored), before fsync, sync and the
//! checkpoint of an unmount, and by the read that finds [`MAX_PENDING`]
//! held or the oldest [`MAX_AGE`] old. A crash loses the notes not yet
//! written, as Linux's `lazytime` may lose atimes kept in memory: atimes
//! are not data. (Reads that stop leave their notes for the next change,
//! fsync, sync or unmount.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wodfs_engine::{Op, SeededState};

use crate::attr::{Attr, Timespec};
use crate::loc::Loc;

/// Notes held before they are written: a batch of this many patches is
/// about 70 KiB of log.
const MAX_PENDING: usize = 1024;

/// The longest a note waits for the next read to write it.
const MAX_AGE: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(crate) struct PendingAtimes {
    inner: Mutex<Inner>,
    /// Notes held; read without the lock by every attribute lookup.
    held: AtomicUsize,
}

#[derive(Debug, Default)]
struct Inner {
    /// By attribute key.
    notes: HashMap<Vec<u8>, Note, SeededState>,
    /// When the oldest note was taken.
    since: Option<Instant>,
}

#[derive(Debug)]
struct Note {
    loc: Loc,
    /// The attributes as stored: the patch is made against them.
    stored: Attr,
    atime: Timespec,
}

impl PendingAtimes {
    /// Notes that `loc`'s atime is now `atime`; `stored` is its record as
    /// the tree holds it, unless a note for it is held already. Returns
    /// whether the notes are due to be written.
    pub fn note(&self, loc: &Loc, stored: &Attr, atime: Timespec) -> bool {
        let mut s = self.inner.lock();
        let now = Instant::now();
        let since = *s.since.get_or_insert(now);
        s.notes
            .entry(loc.meta_key())
            .and_modify(|n| n.atime = atime)
            .or_insert_with(|| Note {
                loc: loc.clone(),
                stored: stored.clone(),
                atime,
            });
        self.held.store(s.notes.len(), Ordering::Release);
        s.notes.len() >= MAX_PENDING || now.duration_since(since) >= MAX_AGE
    }

    /// Are notes held? Read without the lock.
    pub fn any(&self) -> bool {
        self.held.load(Ordering::Acquire) > 0
    }

    /// `attr`, read from the tree or the attribute cache under `key`, with
    /// the atime a held note gives it.
    pub fn overlay(&self, key: &[u8], attr: &mut Attr) {
        if !self.any() {
            return;
        }
        if let Some(n) = self.inner.lock().notes.get(key) {
            attr.atime = n.atime;
        }
    }

    /// Takes every note, as the operations that store them.
    pub fn take_ops(&self) -> Vec<Op> {
        if !self.any() {
            return Vec::new();
        }
        let notes = {
            let mut s = self.inner.lock();
            s.since = None;
            self.held.store(0, Ordering::Release);
            std::mem::take(&mut s.notes)
        };
        let mut ops = Vec::with_capacity(notes.len());
        for n in notes.into_values() {
            let mut new = n.stored.clone();
            new.atime = n.atime;
            crate::fs::update_attr(&n.loc, &n.stored, &new, &mut ops);
        }
        ops
    }
}
