//! When the write coalescer hands a file's held bytes (its run) to the
//! engine. A READ writes its own file's run only, GETXATTR none; the runs
//! that gather meanwhile are written together, in one batch, by the next
//! request that needs them all; and a run nobody asks for is handed over
//! within two age intervals (`run_ageing.rs`).

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::{body, mkfs, mount, mount_with, open_image, Scratch};
use wodfs_schema::FsPath;

/// Overwrites the start of the existing file `path` with `bytes`: LOOKUP,
/// OPEN, GETXATTR (security.capability), WRITE, RELEASE, as TableFS's
/// small-file queries do.
fn overwrite(path: &std::path::Path, bytes: &[u8]) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(bytes, 0)
        .unwrap();
}

#[test]
fn runs_wait_through_other_files_reads_and_are_written_as_one_batch() {
    require_fuse!();
    let s = Scratch::new("pending-runs-batch");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let mnt = m.mnt.clone();
    let name = |i: usize| mnt.join(format!("f{i}"));
    for i in 0..40 {
        std::fs::write(name(i), body(512, i as u32)).unwrap();
    }
    // Cold, as TableFS queries them: the kernel asks for every file's
    // `security.capability` (files created through this mount are
    // answered from the inode table, before any run is considered).
    m.unmount();
    let m = mount(&s.image(), &s.mnt(), false);
    let writes_before = m.counters.engine_writes.load(Relaxed);
    let batches_before = m.fs.tree().stats().batches;

    // Overwrite the first twenty, reading one of the others after each.
    for i in 0..20 {
        overwrite(&name(i), &body(512, 1000 + i as u32));
        assert_eq!(
            std::fs::read(name(20 + i)).unwrap(),
            body(512, 20 + i as u32)
        );
    }
    assert_eq!(
        m.fs.tree().stats().batches,
        batches_before,
        "reads of other files and the kernel's GETXATTRs wrote runs"
    );

    // A STATFS needs every run: one batch holds the twenty.
    m.settled();
    assert_eq!(m.counters.engine_writes.load(Relaxed), writes_before + 1);
    // The access times the reads noted go first, as a batch of their own.
    assert!(m.fs.tree().stats().batches <= batches_before + 2);

    // A READ of a file with a run writes that run (and reads it back).
    overwrite(&name(1), &body(512, 8));
    m.settled();
    overwrite(&name(0), &body(512, 7));
    let writes_before = m.counters.engine_writes.load(Relaxed);
    assert_eq!(std::fs::read(name(0)).unwrap(), body(512, 7));
    assert_eq!(m.counters.engine_writes.load(Relaxed), writes_before + 1);
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    for i in 0..40 {
        let seed = match i {
            0 => 7,
            1 => 8,
            2..=19 => 1000 + i as u32,
            _ => i as u32,
        };
        assert_eq!(std::fs::read(name(i)).unwrap(), body(512, seed), "f{i}");
    }
    m.unmount();
}

#[test]
fn a_run_nobody_asks_for_is_handed_to_the_engine_within_two_intervals() {
    require_fuse!();
    let s = Scratch::new("pending-runs-age");
    mkfs(&s.image(), 1 << 30);
    let interval = Duration::from_millis(100);
    let m = mount_with(
        Box::new(open_image(&s.image())),
        &s.mnt(),
        false,
        interval.as_millis() as u64,
    );
    let path = m.mnt.join("f");
    std::fs::write(&path, body(3000, 1)).unwrap();
    m.settled();
    overwrite(&path, &body(3000, 2));
    let written = Instant::now();
    let writes_before = m.counters.engine_writes.load(Relaxed);

    // No request follows; the engine gets the bytes by age alone.
    while m.counters.engine_writes.load(Relaxed) == writes_before {
        assert!(
            written.elapsed() < 50 * interval,
            "the run was not handed over"
        );
        std::thread::sleep(interval / 10);
    }
    let fs_path = FsPath::parse("/f").unwrap();
    let (attr, loc) = m.fs.resolve(&fs_path).unwrap();
    assert_eq!(attr.size, 3000);
    assert_eq!(m.fs.read(&loc, 0, 3000).unwrap(), body(3000, 2));
    m.unmount();
}
