//! The plain devices: file, memory and counting.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use wodfs_device::{
    CountingDevice, Device, FaultConfig, FaultDevice, FileDevice, IoCounts, MemDevice,
};

/// A unique path under the system temp directory, removed on drop.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let file = format!("wodfs-device-{}-{unique}-{name}.img", std::process::id());
        Self(std::env::temp_dir().join(file))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn round_trip(dev: &dyn Device) {
    dev.write_at(4090, b"across a page boundary").unwrap();
    dev.sync().unwrap();
    let mut buf = [0u8; 22];
    dev.read_at(4090, &mut buf).unwrap();
    assert_eq!(&buf, b"across a page boundary");
    // Random reads see the same bytes, including writes made after the
    // page was cached.
    let mut random = [0u8; 22];
    dev.read_random_at(4090, &mut random).unwrap();
    assert_eq!(random, buf);
    dev.write_at(4096, b"new").unwrap();
    dev.read_random_at(4090, &mut random).unwrap();
    assert_eq!(&random, b"acrossnewpage boundary");
    dev.write_at(4096, b" a ").unwrap();
    dev.sync().unwrap();
}

fn rejects_out_of_range(dev: &dyn Device) {
    let size = dev.size_bytes();
    let error = dev.write_at(size - 2, &[0; 3]).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
    assert!(dev.read_at(size, &mut [0; 1]).is_err());
    assert!(dev.read_at(u64::MAX - 1, &mut [0; 4]).is_err());
    assert!(dev.read_random_at(size, &mut [0; 1]).is_err());
    assert!(dev.read_random_at(u64::MAX - 1, &mut [0; 4]).is_err());
    dev.read_at(size, &mut []).unwrap();
    dev.write_at(size - 1, &[1]).unwrap();
}

#[test]
fn file_device_round_trips_and_reopens() {
    let path = TempPath::new("round-trip");
    {
        let dev = FileDevice::create(&path.0, 1 << 20).unwrap();
        assert_eq!(dev.size_bytes(), 1 << 20);
        round_trip(&dev);
        // A fresh image reads as zeroes.
        let mut buf = [0xFFu8; 64];
        dev.read_at(100_000, &mut buf).unwrap();
        assert_eq!(buf, [0; 64]);
    }
    let reopened = FileDevice::open(&path.0).unwrap();
    assert_eq!(reopened.size_bytes(), 1 << 20);
    let mut buf = [0u8; 22];
    reopened.read_at(4090, &mut buf).unwrap();
    assert_eq!(&buf, b"across a page boundary");
}

#[test]
fn file_device_create_truncates_an_existing_image() {
    let path = TempPath::new("truncate");
    FileDevice::create(&path.0, 8192)
        .unwrap()
        .write_at(0, b"old")
        .unwrap();
    let dev = FileDevice::create(&path.0, 4096).unwrap();
    assert_eq!(dev.size_bytes(), 4096);
    let mut buf = [0xFFu8; 3];
    dev.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, [0; 3]);
}

#[test]
fn file_device_rejects_out_of_range_io() {
    let path = TempPath::new("range");
    rejects_out_of_range(&FileDevice::create(&path.0, 65536).unwrap());
}

#[test]
fn file_device_open_fails_for_a_missing_path() {
    let path = TempPath::new("missing");
    let error = FileDevice::open(&path.0).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
}

#[test]
fn mem_device_round_trips_and_exports_its_bytes() {
    let dev = MemDevice::new(65536);
    round_trip(&dev);
    rejects_out_of_range(&dev);
    let copy = MemDevice::from_bytes(dev.to_bytes());
    assert_eq!(copy.size_bytes(), 65536);
    assert_eq!(copy.to_bytes(), dev.to_bytes());
}

#[test]
fn counting_device_counts_requests_and_bytes() {
    let dev = CountingDevice::new(MemDevice::new(8192));
    dev.write_at(0, &[1; 100]).unwrap();
    dev.write_at(100, &[2; 28]).unwrap();
    let before = dev.counts();
    dev.read_at(0, &mut [0; 64]).unwrap();
    dev.sync().unwrap();
    assert_eq!(
        before,
        IoCounts {
            writes: 2,
            write_bytes: 128,
            ..IoCounts::default()
        }
    );
    assert_eq!(
        dev.counts().since(&before),
        IoCounts {
            reads: 1,
            read_bytes: 64,
            syncs: 1,
            ..IoCounts::default()
        }
    );
    // Failed requests were still issued, so they count.
    assert!(dev.read_at(8192, &mut [0; 1]).is_err());
    assert_eq!(dev.counts().reads, 2);
    // A random read is a read, and is also counted as random.
    let mut two = [0u8; 2];
    dev.read_random_at(99, &mut two).unwrap();
    assert_eq!(two, [1, 2]);
    let counts = dev.counts();
    assert_eq!((counts.reads, counts.random_reads), (3, 1));
    assert_eq!(counts.read_bytes, 64 + 1 + 2);
    dev.reset();
    assert_eq!(dev.counts(), IoCounts::default());
    assert_eq!(dev.inner().to_bytes()[100], 2);
}

#[test]
fn counting_device_forwards_annotations() {
    let dev = CountingDevice::new(Arc::new(FaultDevice::new(4096, FaultConfig::with_seed(1))));
    dev.annotate("flush.leaf");
    dev.inner().cut_power();
    assert_eq!(dev.inner().phase_at_power_cut(), Some("flush.leaf"));
    assert_eq!(dev.size_bytes(), 4096);
}

#[test]
fn devices_work_behind_arc_and_box() {
    let shared: Arc<dyn Device> = Arc::new(MemDevice::new(8192));
    round_trip(&shared);
    let boxed: Box<dyn Device> = Box::new(MemDevice::new(8192));
    round_trip(&boxed);
}

#[test]
fn an_image_can_be_opened_by_one_device_at_a_time() {
    let path = std::env::temp_dir().join(format!("wodfs-device-lock-{}.img", std::process::id()));
    let first = wodfs_device::FileDevice::create(&path, 1 << 20).unwrap();
    let err = wodfs_device::FileDevice::open(&path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ResourceBusy, "{err}");
    // create must not wipe an image in use either.
    let err = wodfs_device::FileDevice::create(&path, 1 << 20).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ResourceBusy, "{err}");
    drop(first);
    wodfs_device::FileDevice::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
}

/// Direct writes through the bounce buffer: writes of every shape
/// (inside one sector, across sectors, longer than the 1 MiB bounce
/// buffer, at the device's end), mixed with buffered writes, read back
/// through the page cache as a model of the bytes says, and the bytes
/// outside each direct write are kept (read-modify-write).
#[test]
fn file_device_direct_writes_match_a_model_and_the_page_cache() {
    let path = TempPath::new("direct");
    let size = 4 << 20;
    let dev = FileDevice::create(&path.0, size).unwrap();
    // The temp directory of the machines this runs on (ext4) has direct
    // I/O; a file system without it would make the device fall back to
    // the page cache, and this test says so rather than pass unchecked.
    let unit = dev
        .direct_io_unit()
        .expect("the temp directory's file system has no direct I/O");
    assert!(unit == 512 || unit == 4096, "unit {unit}");
    let mut model = vec![0u8; size as usize];
    let mut seed = 0x5EEDu64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let shapes = [1, 7, 512, 513, 4095, 4096, 4097, 70_000, (1 << 20) + 3000];
    for round in 0..300u64 {
        let len = shapes[(round % shapes.len() as u64) as usize];
        let offset = match round % 17 {
            0 => size - len,
            1 => next(size / 512 - len.div_ceil(512)) * 512,
            _ => next(size - len),
        };
        let data: Vec<u8> = (0..len).map(|i| (i ^ round) as u8 | 1).collect();
        if next(3) == 0 {
            dev.write_at(offset, &data).unwrap();
        } else {
            dev.write_direct_at(offset, &data).unwrap();
        }
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        let read_len = shapes[next(shapes.len() as u64) as usize];
        let at = next(size - read_len);
        let mut got = vec![0u8; read_len as usize];
        dev.read_at(at, &mut got).unwrap();
        assert!(
            got == model[at as usize..(at + read_len) as usize],
            "round {round}: read {read_len} at {at} differs"
        );
    }
    dev.sync().unwrap();
    drop(dev);
    let buffered = FileDevice::open_buffered(&path.0).unwrap();
    assert_eq!(buffered.direct_io_unit(), None);
    let mut all = vec![0u8; size as usize];
    buffered.read_at(0, &mut all).unwrap();
    assert!(
        all == model,
        "the image differs from the model after reopening"
    );
}

/// A vectored read fills its pieces with exactly the bytes one read of
/// their total would give, on a file (`preadv`, more pieces than one call
/// takes) and through the default of the other devices; the counting
/// device counts it as one read; a read past the end is an error.
#[test]
fn a_vectored_read_fills_its_pieces_in_order() {
    let image: Vec<u8> = (0..64 << 10)
        .map(|i: u32| (i * 7 + i / 251) as u8)
        .collect();
    let path = TempPath::new("vectored");
    let file = FileDevice::create(&path.0, 1 << 20).unwrap();
    let mem = MemDevice::new(1 << 20);
    let counting = CountingDevice::new(MemDevice::new(1 << 20));
    let devices: [&dyn Device; 3] = [&file, &mem, &counting];
    for dev in devices {
        dev.write_at(4096, &image).unwrap();
        // 1,500 pieces of 1-40 bytes, some empty: more than IOV_MAX.
        let lens: Vec<usize> = (0..1500).map(|i| (i * 13) % 41).collect();
        let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
        let total: usize = lens.iter().sum();
        for random in [false, true] {
            let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            dev.read_vectored_at(4096 + 100, &mut pieces, random)
                .unwrap();
            assert_eq!(bufs.concat(), image[100..100 + total]);
        }
        let mut past = [vec![0u8; 10], vec![0u8; 10]];
        let mut pieces: Vec<&mut [u8]> = past.iter_mut().map(|b| b.as_mut_slice()).collect();
        assert!(dev
            .read_vectored_at((1 << 20) - 15, &mut pieces, false)
            .is_err());
    }
    let c = counting.counts();
    // Two reads and the failed one (attempts count, as with read_at).
    assert_eq!((c.reads, c.random_reads), (3, 1), "{c:?}");
}

/// Whole nodes read for a stream go past the page cache (direct I/O,
/// through a pooled bounce buffer, in pieces when longer than it) and
/// `read_with` hands over a borrowed buffer: both must return exactly the
/// bytes written, at unaligned offsets, including bytes still only in the
/// page cache (written, not synced: the kernel writes them back before a
/// direct read of their range).
#[test]
fn large_stream_reads_return_what_was_written() {
    const SIZE: u64 = 16 << 20;
    let image: Vec<u8> = (0..10u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let path = TempPath::new("stream");
    let buffered = FileDevice::create(&path.0, SIZE).unwrap();
    // An image file reads streams through the page cache; a block device
    // goes direct. Force the direct path on a second image to test it too.
    assert!(!buffered.direct_large_io());
    let direct_path = TempPath::new("stream-direct");
    let mut direct = FileDevice::create(&direct_path.0, SIZE).unwrap();
    direct.set_direct_large_io(true);
    assert_eq!(direct.direct_large_io(), direct.direct_io_unit().is_some());
    let mem = MemDevice::new(SIZE);
    let counting = CountingDevice::new(MemDevice::new(SIZE));
    let devices: [&dyn Device; 4] = [&buffered, &direct, &mem, &counting];
    for dev in devices {
        // Cached pages of a range a stream write then covers (direct
        // where the device says so) must not be read back stale.
        dev.write_at(777 + 4096, &[0xA5; 8192]).unwrap();
        let mut before = [0u8; 8192];
        dev.read_at(777 + 4096, &mut before).unwrap();
        assert_eq!(before, [0xA5; 8192]);
        dev.write_stream_at(777, &image).unwrap();
        let mut after = vec![0u8; 8192];
        dev.read_at(777 + 4096, &mut after).unwrap();
        assert!(after == image[4096..4096 + 8192]);
        // Pieces of odd sizes, 9.5 MiB in all: longer than one bounce
        // buffer, so the direct path goes in several reads.
        let lens: Vec<usize> = (0..40).map(|i| 200_000 + i * 3_001).collect();
        let total: usize = lens.iter().sum();
        assert!(total > 9 << 20 && total < image.len() - 1000);
        let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
        let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        dev.read_vectored_at(777 + 1000, &mut pieces, false)
            .unwrap();
        assert!(bufs.concat() == image[1000..1000 + total]);

        let (at, len) = (5_000_001usize, 4_200_000usize);
        let mut seen = Vec::new();
        dev.read_with(777 + at as u64, len, &mut |bytes| {
            seen.extend_from_slice(bytes)
        })
        .unwrap();
        assert!(seen == image[at..at + len]);
        assert!(dev
            .read_with(SIZE - 10, 20, &mut |_| panic!("past the end"))
            .is_err());
        // Kept by the caller: the bytes, at an odd offset and length, and
        // again after the buffers went back to the pool and were reused.
        for _ in 0..3 {
            let owned = dev.read_owned(777 + at as u64 + 3, len - 5).unwrap();
            assert!(owned.bytes() == &image[at + 3..at + len - 2]);
            let small = dev.read_owned(777 + 100, 10).unwrap();
            assert_eq!(small.bytes(), &image[100..110]);
        }
        assert!(dev.read_owned(SIZE - 10, 20).is_err());
    }
    let c = counting.counts();
    assert_eq!(c.stream_write_bytes, image.len() as u64);
    // The two checks of the overwritten range, the vectored read, the
    // read_with and the failed one, six read_owned and the failed one;
    // read_with and read_owned read no window past their bytes, so they
    // count as random.
    assert_eq!((c.reads, c.random_reads), (12, 9), "{c:?}");
}

/// A padded write (a node image at the start of an extent of whole
/// blocks) writes its bytes, may write zeros from their end to the next
/// multiple of the padding unit, and changes nothing past it, on every
/// device: through the page cache (zeros to the page's end), direct (a
/// stream's large write on a device that takes those direct: zeros to the
/// sector's end), in memory (zeros to the unit) and behind the counting
/// device, which counts only the caller's bytes. Writes that already end
/// on the unit, and one at the device's end, are written as they are.
#[test]
fn padded_writes_zero_the_rest_of_their_block_and_nothing_more() {
    const SIZE: u64 = 8 << 20;
    const BLOCK: u64 = 4096;
    let path = TempPath::new("padded");
    let buffered = FileDevice::create(&path.0, SIZE).unwrap();
    let direct_path = TempPath::new("padded-direct");
    let mut direct = FileDevice::create(&direct_path.0, SIZE).unwrap();
    direct.set_direct_large_io(true);
    let mem = MemDevice::new(SIZE);
    let counting = CountingDevice::new(MemDevice::new(SIZE));
    let devices: [&dyn Device; 4] = [&buffered, &direct, &mem, &counting];
    // (offset, length, stream): small and large (direct when streamed),
    // ending mid-sector, mid-block, on a block, and at the device's end.
    let writes = [
        (0, 100, false),
        (BLOCK, 5000, false),
        (4 * BLOCK, 2 * BLOCK, false),
        (8 * BLOCK, 300_001, true),
        (128 * BLOCK, 300_000 + 512, true),
        (256 * BLOCK, (1 << 20) + 7, false),
        (SIZE - 1000, 1000, false),
    ];
    for dev in devices {
        // Bytes everywhere first, so zeros show where padding went.
        let ones = vec![0xEEu8; SIZE as usize];
        dev.write_at(0, &ones).unwrap();
        let mut model = ones;
        for (i, &(offset, len, stream)) in writes.iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|k| (k as u8) ^ (i as u8) | 1).collect();
            dev.write_padded_at(offset, &data, BLOCK, stream).unwrap();
            let end = (offset + len) as usize;
            model[offset as usize..end].copy_from_slice(&data);
            let padded = (end as u64).next_multiple_of(BLOCK).min(SIZE) as usize;
            // Zeros or as it was: 0x00 stands for either below.
            model[end..padded].fill(0);
        }
        let mut all = vec![0u8; SIZE as usize];
        dev.read_at(0, &mut all).unwrap();
        let first_diff = all
            .iter()
            .zip(&model)
            .position(|(&got, &want)| got != want && !(want == 0 && got == 0xEE));
        assert_eq!(first_diff, None, "{dev:?}");
        // A write that is not a stream's pads through the page cache to
        // the page's end, in memory to the unit's.
        assert_eq!(all[100..4096], [0; 3996], "{dev:?}");
        assert!(dev
            .write_padded_at(SIZE - 10, &[1; 20], BLOCK, false)
            .is_err());
    }
    let c = counting.counts();
    let caller_bytes: u64 = writes.iter().map(|w| w.1).sum();
    let streamed: u64 = writes.iter().filter(|w| w.2).map(|w| w.1).sum();
    assert_eq!(c.write_bytes, SIZE + caller_bytes + 20, "{c:?}");
    assert_eq!(c.stream_write_bytes, streamed, "{c:?}");
}
