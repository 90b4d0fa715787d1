//! Write coalescing: consecutive writes to one file are gathered into one
//! engine write of up to [`COALESCE_BYTES`], so streams written in 4–128
//! KiB pieces (`cp`, `tar`, `rsync`) reach the engine as large batches.
//!
//! Invariants:
//! * At most one pending run per inode: bytes `[offset, offset + len)` not
//!   yet handed to the core, at the file's location (a name change writes
//!   or carries the runs first, so it is the file's current one); all runs
//!   together hold at most about [`PENDING_BYTES_MAX`].
//!   A run may hold no bytes: the continuation of a stream whose bytes so
//!   far are written, or the attributes of setattrs that came before the
//!   writes ([`PendingWrites::hold_attr`]).
//! * No request observes a state without the runs (sizes, times,
//!   contents, renames that change a location):
//!   - requests that change names, or read many inodes' attributes
//!     (MKDIR, READDIR, RENAME, UNLINK, STATFS, fsync, ...) write every
//!     run first, together, in as few batches as hold them
//!     ([`wodfs_fs::Fs::write_held_together`]); a READ, FLUSH or RELEASE
//!     (of a file with no run at a path) writes its own file's run alone,
//!     and GETXATTR and LISTXATTR none (runs hold no xattrs): the runs of
//!     small files overwritten between reads of others (TableFS) gather
//!     and make one batch instead of one each; a RENAME writes the
//!     renamed file's own run in its batch, at the new name
//!     ([`PendingWrites::rename`]), and a
//!     MKDIR, MKNOD or SYMLINK a lone run in its batch, ahead of the new
//!     name ([`PendingWrites::make`]); a CREATE, which reads and changes
//!     no run, is answered before the runs are written, and they are
//!     written before the next request is read
//!     ([`PendingWrites::make_answering_first`]);
//!   - requests that observe one inode's attributes (GETATTR, LOOKUP:
//!     pending bytes change no name) are answered from that inode's run
//!     ([`PendingWrites::attr_of`]): the attributes the core holds, plus
//!     the run, plus the setattrs it answered. The run keeps what it
//!     answered and writes it with its bytes, so the core gets what the
//!     kernel cached; the other runs are written. On an inode without a
//!     run they write none;
//!   - a SETATTR that leaves the size alone, of a file with bytes pending,
//!     joins the run the same way ([`PendingWrites::set_attr`]): tar and
//!     rsync set times, owner and mode of every file they write. Of a
//!     regular file without a run, it starts one that holds only the
//!     attributes, which the writes that follow continue
//!     ([`PendingWrites::hold_attr`]): rsync sets the mode of each new
//!     temporary before writing it;
//!   - a RELEASE of a file at a path leaves its run pending (rsync sets
//!     times and mode after closing; the next request writes it), see
//!     [`PendingWrites::held_at_path`]; WRITE, OPEN and FORGET write none.
//! * No run waits long: every `commit` interval the runs begun before the
//!   previous interval are written ([`PendingWrites::write_aged`], called
//!   by [`crate::run_ageing`]), so the log sync makes them durable even
//!   if no request follows.
//! * A flush that fails (it runs on behalf of some other request) keeps its
//!   errno for the inode; the next fsync, flush or release of that inode
//!   reports it, as the kernel reports a failed page writeback.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use wodfs_engine::IntMap;
use wodfs_fs::{
    Attr, Carried, Fs, FsError, FsPath, FsResult, HeldBytes, KillPriv, Kind, Loc, NewNode,
    RenameMode, Renamed, SetAttr, Timespec,
};

use crate::adapter::RequestCounters;

/// Largest run gathered before it is written.
pub const COALESCE_BYTES: usize = 1 << 20;

/// Room a new run starts with.
const RUN_START_BYTES: usize = 64 << 10;

/// Most bytes held in all runs together; past it every run is written
/// (many files written at once must not pin unbounded memory).
pub const PENDING_BYTES_MAX: usize = 64 << 20;

#[derive(Debug)]
struct Run {
    loc: Loc,
    offset: u64,
    data: Vec<u8>,
    kill_priv: KillPriv,
    /// The file's attributes after the run and the setattr calls answered
    /// from it ([`PendingWrites::set_attr`]), written with its bytes; `None`
    /// if none was: writing the run then makes them as a write does.
    attr: Option<Attr>,
    /// The age tick the run began in ([`PendingWrites::write_aged`]).
    born: u64,
}

impl Run {
    /// A run with nothing gathered yet, continued by a write at `offset`.
    fn empty(loc: Loc, offset: u64, kill_priv: KillPriv, born: u64) -> Run {
        Run {
            loc,
            offset,
            data: Vec::new(),
            kill_priv,
            attr: None,
            born,
        }
    }

    /// True if writing the run changes the file: it has bytes, or
    /// attributes it answered (a run started by a setattr holds only
    /// those until the writes come, see [`PendingWrites::hold_attr`]).
    fn holds_anything(&self) -> bool {
        !self.data.is_empty() || self.attr.is_some()
    }

    /// The run's bytes and the attributes it answered, to be written.
    fn held(&self) -> HeldBytes<'_> {
        HeldBytes {
            attr: self.attr.as_ref(),
            ..HeldBytes::new(self.offset, &self.data, self.kill_priv)
        }
    }
}

/// What a pending run answers for its file's attributes.
#[derive(Debug)]
pub enum FromRun {
    /// The file has no run: the core's attributes are current.
    NoRun,
    /// The attributes with the run (and the setattrs it took), which the
    /// run keeps and writes with its bytes.
    Answered(Attr),
    /// The run cannot answer (it changes the size, holds no bytes, or
    /// clears privileges as it is written): write the runs first.
    Cannot,
}

/// Pending runs by inode, and errors of failed flushes.
#[derive(Debug, Default)]
pub struct PendingWrites {
    runs: Mutex<IntMap<u64, Run>>,
    errors: Mutex<IntMap<u64, i32>>,
    counters: Arc<RequestCounters>,
    /// Counts the calls of [`PendingWrites::write_aged`].
    age_tick: AtomicU64,
}

impl PendingWrites {
    /// Empty, counting engine writes in `counters`.
    pub fn new(counters: Arc<RequestCounters>) -> PendingWrites {
        PendingWrites {
            counters,
            ..PendingWrites::default()
        }
    }

    /// Takes a WRITE: appends it to the inode's run if it continues it,
    /// otherwise writes the old run and starts a new one. Returns whether
    /// the write cleared set-user-ID or set-group-ID, which leaves the
    /// kernel's cached mode stale.
    pub fn write(
        &self,
        fs: &Fs,
        ino: u64,
        loc: impl FnOnce() -> FsResult<Loc>,
        offset: u64,
        data: &[u8],
        kill_priv: KillPriv,
    ) -> FsResult<bool> {
        let mut runs = self.runs.lock();
        if let Some(run) = runs.get_mut(&ino) {
            // The run's location is the file's (see the invariants): a
            // write that continues it need not build the path again.
            let continues = run.offset + run.data.len() as u64 == offset
                && run.kill_priv == kill_priv
                && run.data.len() + data.len() <= COALESCE_BYTES;
            if continues {
                let need = run.data.len() + data.len();
                if run.data.capacity() < need {
                    // Past a small file's room, a stream: room for a whole
                    // run at once, not a copy at every doubling.
                    let room = if need <= RUN_START_BYTES {
                        RUN_START_BYTES
                    } else {
                        COALESCE_BYTES
                    };
                    run.data.reserve_exact(room - run.data.len());
                }
                run.data.extend_from_slice(data);
                if let Some(attr) = &mut run.attr {
                    *attr = attr.written(offset, data.len() as u64, kill_priv, Timespec::now());
                }
                if run.data.len() == COALESCE_BYTES {
                    // The run stays, empty, for the rest of the stream.
                    let full = std::mem::replace(&mut run.data, Vec::with_capacity(COALESCE_BYTES));
                    let (at, attr) = (run.offset, run.attr.take());
                    run.offset += full.len() as u64;
                    let bytes = HeldBytes {
                        attr: attr.as_ref(),
                        ..HeldBytes::new(at, &full, kill_priv)
                    };
                    return self.write_bytes(fs, &run.loc, bytes).map(|_| false);
                }
                return Ok(false);
            }
            let old = runs.remove(&ino).expect("present");
            if old.holds_anything() {
                self.write_run(fs, &old)?;
            }
        }
        let loc = loc()?;
        if kill_priv != KillPriv::Keep {
            // The first write of an unprivileged run is the one that can
            // clear privileges: it is written now, so the caller can tell
            // the kernel, and the run continues after it, empty.
            let before = fs.getattr(&loc)?.perm;
            let bytes = HeldBytes::new(offset, data, kill_priv);
            let after = self.write_bytes(fs, &loc, bytes)?.perm;
            let end = offset + data.len() as u64;
            runs.insert(ino, Run::empty(loc, end, kill_priv, self.tick()));
            return Ok(after != before);
        }
        if data.len() >= COALESCE_BYTES / 2 {
            let bytes = HeldBytes::new(offset, data, kill_priv);
            return self.write_bytes(fs, &loc, bytes).map(|_| false);
        }
        // Room for the writes a small file is made of, so the run is not
        // grown (copied) as they arrive: the copies were 1.4 % of the
        // request thread in an untar (tar writes 10 KiB at a time).
        let mut gathered = Vec::with_capacity(data.len().max(RUN_START_BYTES));
        gathered.extend_from_slice(data);
        runs.insert(
            ino,
            Run {
                loc,
                offset,
                data: gathered,
                kill_priv,
                attr: None,
                born: self.tick(),
            },
        );
        // Room counts: many small runs hold more than their bytes.
        let held: usize = runs.values().map(|r| r.data.capacity()).sum();
        if held > PENDING_BYTES_MAX {
            drop(runs);
            self.flush_all(fs);
        }
        Ok(false)
    }

    /// The current age tick.
    fn tick(&self) -> u64 {
        self.age_tick.load(Ordering::Relaxed)
    }

    /// Writes the runs begun before the previous call, and starts a new
    /// age tick. Called every `commit` interval ([`crate::run_ageing`]), it
    /// bounds how long bytes wait here, where no log sync reaches them:
    /// between one and two intervals. Until session 56 a run that no
    /// request followed stayed pending for good (`echo x > f`, then a
    /// crash seconds later, lost the bytes however long the wait).
    pub fn write_aged(&self, fs: &Fs) {
        let tick = self.age_tick.fetch_add(1, Ordering::Relaxed);
        self.write_where(fs, &mut self.runs.lock(), |_, run| run.born < tick);
    }

    /// Writes every pending run (errors are kept per inode).
    pub fn flush_all(&self, fs: &Fs) {
        self.write_drained(fs, &mut self.runs.lock());
    }

    /// Writes the run of `ino`, if it has one, and no other: a READ
    /// observes its own file's bytes alone. The map stays locked until the
    /// run is written, so no other request thread sees the file without it.
    pub fn flush_one(&self, fs: &Fs, ino: u64) {
        let mut runs = self.runs.lock();
        if let Some(run) = runs.remove(&ino) {
            self.write_deferred(fs, ino, &run);
        }
    }

    /// Writes and removes every run of `runs` (the locked map).
    fn write_drained(&self, fs: &Fs, runs: &mut IntMap<u64, Run>) {
        self.write_where(fs, runs, |_, _| true);
    }

    /// Removes the runs of `runs` (the locked map) that `pick` picks and
    /// writes them on behalf of another request, in as few batches as
    /// hold them ([`Fs::write_held_together`]): the small files' runs that
    /// gathered while other files were read make one batch, not one each.
    /// A failure is kept for the inode's next fsync or release.
    fn write_where(
        &self,
        fs: &Fs,
        runs: &mut IntMap<u64, Run>,
        mut pick: impl FnMut(u64, &Run) -> bool,
    ) {
        let runs: Vec<(u64, Run)> = runs
            .extract_if(|&ino, run| pick(ino, run))
            .filter(|(_, run)| run.holds_anything())
            .collect();
        let held: Vec<(&Loc, HeldBytes<'_>)> =
            runs.iter().map(|(_, run)| (&run.loc, run.held())).collect();
        let batches = fs.write_held_together(&held, |i, e| self.keep_error(runs[i].0, e));
        self.counters
            .engine_writes
            .fetch_add(batches, Ordering::Relaxed);
    }

    /// Renames `old_dir/old_name` to `new_dir/new_name` after writing
    /// every other run. The renamed file's own run, if it has bytes
    /// pending at that path, is written in the rename's batch at the new
    /// name ([`Fs::rename_carrying`]): rsync writes each file under a
    /// temporary name, sets its times and mode, and renames it; the bytes
    /// were written at the temporary name and then copied by the move.
    pub fn rename(
        &self,
        fs: &Fs,
        old_dir: &FsPath,
        old_name: &[u8],
        new_dir: &FsPath,
        new_name: &[u8],
        mode: RenameMode,
    ) -> FsResult<Renamed> {
        let carried = old_dir.join(old_name).ok().and_then(|old| {
            let mut runs = self.runs.lock();
            let ino = runs.iter().find_map(|(&ino, run)| {
                let at_old = matches!(&run.loc, Loc::Path(p) if *p == old);
                (at_old && run.holds_anything()).then_some(ino)
            })?;
            runs.remove(&ino).map(|run| (ino, run))
        });
        self.flush_all(fs);
        match carried {
            Some((ino, run)) => self.carry(ino, &run, |held| {
                fs.rename_carrying(old_dir, old_name, new_dir, new_name, mode, held)
            }),
            None => fs.rename(old_dir, old_name, new_dir, new_name, mode),
        }
    }

    /// Creates `dir/name` ([`Fs::make`]) after writing the runs. A lone
    /// run of a whole small file goes into the creation's batch, ahead of
    /// it ([`Fs::make_carrying`]): tar and git's checkout write a file and
    /// create the next one, two batches per file before. The tail of a
    /// large file is written alone: as the next batch of a stream the
    /// engine logs it without its values (late binding), which it cannot
    /// tell in a batch that also creates a name (30 MiB more log in an
    /// untar of the kernel tree).
    pub fn make(&self, fs: &Fs, dir: &FsPath, name: &[u8], node: NewNode) -> FsResult<Attr> {
        let carried = {
            let mut runs = self.runs.lock();
            let lone = runs.len() == 1
                && runs
                    .values()
                    .all(|run| run.offset == 0 && run.holds_anything());
            lone.then(|| runs.drain().next().expect("one run"))
        };
        self.flush_all(fs);
        match carried {
            Some((ino, run)) => self.carry(ino, &run, |held| {
                fs.make_carrying(dir, name, node, &run.loc, held)
            }),
            None => fs.make(dir, name, node),
        }
    }

    /// Runs `make` (a creation, which neither reads nor changes a pending
    /// run) with every run held back, hands its outcome to `answer` (the
    /// reply), and only then writes the runs, holding them throughout so
    /// that no other request thread sees the file system without them.
    ///
    /// For CREATE: tar and git's checkout write a file, then create the
    /// next, and between the CREATE's answer and the first WRITE git
    /// inflates the new file's blob. Written before the answer, the
    /// previous file's bytes (carried into the creation's batch until
    /// session 43) kept git waiting; now its work and the write overlap
    /// on the two CPUs: a git clone of the benchmark's repository
    /// 1.10-1.27 → 1.02-1.14 s, the CREATE's latency 63 → 25 µs (an
    /// untar: no change measurable). The price is a batch per file more
    /// and the order in the log: the new name's record comes before the
    /// previous file's last bytes, so a log sync that falls between the
    /// two appends, and a crash before the next, keep the name and lose
    /// those bytes (which, not synced, were never promised; nor is the
    /// order of two files' unsynced changes).
    pub fn make_answering_first<T>(
        &self,
        fs: &Fs,
        make: impl FnOnce() -> T,
        answer: impl FnOnce(T),
    ) {
        let mut runs = self.runs.lock();
        answer(make());
        self.write_drained(fs, &mut runs);
    }

    /// Hands `run` of `ino` to `change`, a call that writes it along with
    /// a change of names (counted as one engine write), keeping a failed
    /// write for the inode's fsync or release; returns the change's own
    /// outcome.
    fn carry<T>(
        &self,
        ino: u64,
        run: &Run,
        change: impl FnOnce(HeldBytes<'_>) -> Carried<T>,
    ) -> FsResult<T> {
        self.counters.engine_writes.fetch_add(1, Ordering::Relaxed);
        let carried = change(run.held());
        if let Err(e) = carried.written {
            self.keep_error(ino, &e);
        }
        carried.done
    }

    /// Writes `run` of `ino` on behalf of another request, keeping a
    /// failure for the inode's next fsync or release.
    fn write_deferred(&self, fs: &Fs, ino: u64, run: &Run) {
        if !run.holds_anything() {
            return;
        }
        if let Err(e) = self.write_run(fs, run) {
            self.keep_error(ino, &e);
        }
    }

    /// Keeps the failure of a write of `ino` made on behalf of another
    /// request, for the inode's next fsync or release.
    fn keep_error(&self, ino: u64, e: &FsError) {
        log::error!("deferred write of inode {ino} failed: {e}");
        self.errors.lock().insert(ino, e.errno());
    }

    /// Answers a setattr of `ino` from its pending run, if it has one with
    /// bytes in it and the call leaves the size alone: the changes join
    /// the run and are written with its bytes, in one batch. tar sets the
    /// times, owner and mode of every file right after writing it: three
    /// batches, each looking the attributes up again, for one. Every other
    /// run is written first (they are rare here: a file's requests come
    /// together), which keeps the runs in the log in the order their
    /// files were last written.
    ///
    /// With no change in `set`, this answers a GETATTR or a LOOKUP: the
    /// attributes the file has with its run written, which the run then
    /// keeps.
    ///
    /// On [`FromRun::Cannot`] the caller writes the runs and sets or reads
    /// the attributes itself. A failure to write the run later is kept for
    /// the inode's fsync or release, as a failed write is.
    pub fn set_attr(&self, fs: &Fs, ino: u64, set: &SetAttr) -> FromRun {
        if set.changes_size() {
            return FromRun::Cannot;
        }
        let mut runs = self.runs.lock();
        let Some(run) = runs.get(&ino) else {
            return FromRun::NoRun;
        };
        if !run.holds_anything() || run.kill_priv != KillPriv::Keep {
            return FromRun::Cannot;
        }
        self.write_other_runs(fs, &mut runs, ino);
        let run = runs.get_mut(&ino).expect("kept");
        let now = Timespec::now();
        let mut attr = match run.attr.take() {
            Some(attr) => attr,
            None => match fs.getattr(&run.loc) {
                Ok(stored) => stored.written(run.offset, run.data.len() as u64, run.kill_priv, now),
                Err(_) => return FromRun::Cannot,
            },
        };
        set.apply_to(&mut attr, now);
        run.attr = Some(attr.clone());
        FromRun::Answered(attr)
    }

    /// Answers a setattr of `ino`, a regular file at a path with no run,
    /// by starting a run that holds only the resulting attributes, if the
    /// call leaves the size alone: the writes that follow continue the
    /// run and carry them into their batch. rsync creates each temporary
    /// and at once sets its mode (`fchmod`, in its `do_mkstemp`), before
    /// any byte: a batch of its own for every file it copies. With no
    /// write, the next request writes the run, as it writes any (one
    /// batch, as the setattr alone made). Every other run is written
    /// first, as [`PendingWrites::set_attr`] does.
    ///
    /// [`FromRun::NoRun`] if `ino` has a run (ask [`PendingWrites::set_attr`]);
    /// [`FromRun::Cannot`] if the call changes the size or the object is
    /// not a regular file at a path: the caller sets the attributes itself.
    pub fn hold_attr(&self, fs: &Fs, ino: u64, loc: Loc, set: &SetAttr) -> FromRun {
        if set.changes_size() || !matches!(loc, Loc::Path(_)) {
            return FromRun::Cannot;
        }
        let mut runs = self.runs.lock();
        if runs.contains_key(&ino) {
            return FromRun::NoRun;
        }
        let stored = match fs.getattr(&loc) {
            Ok(stored) if stored.kind == Kind::File => stored,
            _ => return FromRun::Cannot,
        };
        self.write_other_runs(fs, &mut runs, ino);
        let mut attr = stored.clone();
        set.apply_to(&mut attr, Timespec::now());
        let mut run = Run::empty(loc, stored.size, KillPriv::Keep, self.tick());
        run.attr = Some(attr.clone());
        runs.insert(ino, run);
        FromRun::Answered(attr)
    }

    /// Writes every run but that of `ino` (kept for its fsync or release
    /// if that fails).
    fn write_other_runs(&self, fs: &Fs, runs: &mut IntMap<u64, Run>, ino: u64) {
        self.write_where(fs, runs, |other, _| other != ino);
    }

    /// `stored`, the attributes the core holds for the file at `loc`, as
    /// they are with the file's pending bytes (and the setattrs they
    /// carry): from its run, which keeps them, or after writing every run
    /// if the run cannot answer.
    pub fn attr_of(&self, fs: &Fs, stored: Attr, loc: &Loc) -> FsResult<Attr> {
        match self.set_attr(fs, stored.ino, &SetAttr::default()) {
            FromRun::NoRun => Ok(stored),
            FromRun::Answered(attr) => Ok(attr),
            FromRun::Cannot => {
                self.flush_all(fs);
                fs.getattr(loc)
            }
        }
    }

    /// Writes every pending run, then reports (and forgets) a failed
    /// deferred write of `ino` (fsync: what was written before it is
    /// durable after it, whichever file it was written to).
    pub fn settle(&self, fs: &Fs, ino: u64) -> FsResult<()> {
        self.flush_all(fs);
        self.take_error(ino)
    }

    /// Writes the run of `ino` alone, then reports (and forgets) a failed
    /// deferred write of it (FLUSH, RELEASE: they report on their own
    /// file; the other runs wait to be written together).
    pub fn settle_own(&self, fs: &Fs, ino: u64) -> FsResult<()> {
        self.flush_one(fs, ino);
        self.take_error(ino)
    }

    /// Reports (and forgets) a failed deferred write of `ino`.
    pub fn take_error(&self, ino: u64) -> FsResult<()> {
        match self.errors.lock().remove(&ino) {
            Some(code) => Err(FsError::Posix(code)),
            None => Ok(()),
        }
    }

    /// True if `ino` has bytes pending at a path: its RELEASE may leave
    /// them pending, for the setattrs that follow a close to join (rsync
    /// closes each file it writes, then sets its times and its mode; git
    /// makes its objects read-only after closing them). Nothing observes
    /// a state between a RELEASE and the next request, which writes them.
    /// A file addressed by inode number may be an orphan, which releasing
    /// its last handle deletes: its bytes are written first.
    pub fn held_at_path(&self, ino: u64) -> bool {
        self.runs
            .lock()
            .get(&ino)
            .is_some_and(|run| run.holds_anything() && matches!(run.loc, Loc::Path(_)))
    }

    /// Writes a run (it must hold something).
    fn write_run(&self, fs: &Fs, run: &Run) -> FsResult<Attr> {
        self.write_bytes(fs, &run.loc, run.held())
    }

    /// Hands bytes to the core as one engine write (counted), with the
    /// attributes a run answered, if any.
    fn write_bytes(&self, fs: &Fs, loc: &Loc, bytes: HeldBytes<'_>) -> FsResult<Attr> {
        self.counters.engine_writes.fetch_add(1, Ordering::Relaxed);
        fs.write_then_set(loc, bytes)
    }
}
