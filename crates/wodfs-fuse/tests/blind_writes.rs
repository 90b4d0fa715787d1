//! Blind writes through the mount: 10,000 cold 4-byte writes into a large
//! file reach the daemon as WRITE requests only (no READ of the page, as
//! the kernel's writeback cache would do) and read no tree node.

mod common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;

use common::{mkfs, mount, Scratch};

#[test]
fn ten_thousand_cold_small_writes_read_nothing() {
    require_fuse!();
    let s = Scratch::new("blind");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let path = m.mnt.join("big");
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let f = std::fs::File::create(&path).unwrap();
    for i in 0..64u64 {
        f.write_all_at(&chunk, i << 20).unwrap();
    }
    drop(f);
    m.unmount();

    // Cold: a new daemon with an empty node cache.
    let m = mount(&s.image(), &s.mnt(), false);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(b"warm", 0).unwrap();
    let reads_before = m.counters.reads.load(Relaxed);
    let st = m.fs.tree().stats();
    let nodes_before = st.partition_reads + st.node_reads + st.header_reads;
    let mut x = 0x9e3779b97f4a7c15u64;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f.write_all_at(b"abcd", x % ((64 << 20) - 4)).unwrap();
    }
    f.sync_all().unwrap();
    let st = m.fs.tree().stats();
    let nodes_after = st.partition_reads + st.node_reads + st.header_reads;
    assert_eq!(
        m.counters.reads.load(Relaxed) - reads_before,
        0,
        "FUSE READ requests"
    );
    assert!(m.counters.writes.load(Relaxed) >= 10_000);
    assert_eq!(
        nodes_after - nodes_before,
        0,
        "tree nodes read by blind writes"
    );
    drop(f);
    m.unmount();
}

#[test]
fn small_sequential_writes_are_coalesced_into_large_batches() {
    require_fuse!();
    let s = Scratch::new("coalesce");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), false);
    let path = m.mnt.join("stream");
    let piece: Vec<u8> = (0..16384u32).map(|i| (i % 241) as u8).collect();
    let mut f = std::fs::File::create(&path).unwrap();
    for _ in 0..256 {
        std::io::Write::write_all(&mut f, &piece).unwrap();
    }
    drop(f);
    assert!(m.counters.writes.load(Relaxed) >= 256);
    let batches = m.counters.engine_writes.load(Relaxed);
    assert!(
        batches <= 5,
        "4 MiB in 16 KiB pieces took {batches} engine writes"
    );
    let back = std::fs::read(&path).unwrap();
    assert_eq!(back.len(), 4 << 20);
    assert!(back.chunks(16384).all(|c| c == piece.as_slice()));
    m.unmount();
}
