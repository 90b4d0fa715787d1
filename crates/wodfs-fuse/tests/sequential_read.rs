//! A cold sequential read through the mount: the kernel's 1 MiB READs are
//! answered by the read worker (`read_worker.rs`) when it is idle, else by
//! the request thread, and every byte comes back right, in order.

mod common;

use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::{mkfs, mount, Scratch};

#[test]
fn a_cold_sequential_read_returns_every_byte_with_the_worker_answering_some() {
    require_fuse!();
    let s = Scratch::new("seqread");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let path = m.mnt.join("big");
    let mib = 48u64;
    // Every 8-byte word holds its own offset: a block answered for the
    // wrong offset, or two replies swapped, cannot read back right.
    let f = std::fs::File::create(&path).unwrap();
    for i in 0..mib {
        let chunk: Vec<u8> = (0..(1u64 << 17))
            .flat_map(|w| ((i << 20) + w * 8).to_le_bytes())
            .collect();
        f.write_all_at(&chunk, i << 20).unwrap();
    }
    drop(f);
    m.unmount();

    // Cold: a new daemon with an empty node cache and no cached pages.
    let m = mount(&s.image(), &s.mnt(), false);
    // The daemon raises the readahead window on a thread of its own once
    // the mount answers, and a file takes the window in force when it is
    // opened: wait for it, or the kernel sends 128 KiB READs.
    wait_for_readahead(&m.mnt);
    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..mib {
        f.read_exact(&mut buf).unwrap();
        for (w, word) in buf.chunks_exact(8).enumerate() {
            let want = (i << 20) + w as u64 * 8;
            let got = u64::from_le_bytes(word.try_into().unwrap());
            assert_eq!(got, want, "word at offset {want}");
        }
    }
    assert_eq!(f.read(&mut buf).unwrap(), 0, "end of file");
    let reads = m.counters.reads.load(Relaxed);
    let handed_off = m.counters.reads_handed_off.load(Relaxed);
    assert!(reads >= mib, "{reads} READs for {mib} MiB");
    // How many go to the worker depends on timing (it takes one only
    // when idle); the first large READ always finds it idle.
    eprintln!("{handed_off} of {reads} READs answered by the worker");
    assert!(handed_off >= 1, "no READ answered by the worker");
    drop(f);
    m.unmount();
}

/// Waits until the mount's readahead window is the one the daemon sets.
fn wait_for_readahead(mnt: &Path) {
    let knob = wodfs_fuse::readahead::knob(std::fs::metadata(mnt).unwrap().dev());
    let want = wodfs_fuse::readahead::READAHEAD_KIB.to_string();
    let start = Instant::now();
    loop {
        let now = std::fs::read_to_string(&knob).unwrap_or_default();
        if now.trim() == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{knob} is {now:?}, not {want}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
