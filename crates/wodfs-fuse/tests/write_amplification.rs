//! Device bytes written for a sequential stream through the mount: a file
//! written in 128 KiB pieces reaches the engine as 1 MiB batches, which
//! take the late-binding path (the log names the data, the data is written
//! once, in tree nodes). So the device sees well under twice the data.

mod common;

use std::io::Write;
use std::sync::Arc;

use common::{mkfs, mount_device, Scratch};
use wodfs_device::{CountingDevice, FileDevice};

#[test]
fn a_sequential_stream_is_written_about_once() {
    require_fuse!();
    let s = Scratch::new("wamp");
    mkfs(&s.image(), 1 << 30);
    let dev = Arc::new(CountingDevice::new(FileDevice::open(s.image()).unwrap()));
    let m = mount_device(Box::new(Arc::clone(&dev)), &s.mnt(), false);
    let before = dev.counts();
    let total: u64 = 64 << 20;
    let mut x = 0x853c49e6748fea9bu64;
    let piece: Vec<u8> = (0..128 << 10)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut f = std::fs::File::create(m.mnt.join("stream")).unwrap();
    for i in 0..total / piece.len() as u64 {
        let mut p = piece.clone();
        p[..8].copy_from_slice(&i.to_le_bytes());
        f.write_all(&p).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    m.unmount();
    let written = dev.counts().since(&before).write_bytes;
    let ratio = written as f64 / total as f64;
    eprintln!("{written} device bytes for {total} bytes of data: {ratio:.2}x");
    assert!(
        ratio < 1.6,
        "write amplification {ratio:.2}x for a sequential stream"
    );
}
