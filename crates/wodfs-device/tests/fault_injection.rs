//! Power cuts, injected errors and bit flips: the request half of the
//! fault model in `src/fault.rs`.

use std::io;

use wodfs_device::{Device, FaultConfig, FaultDevice, FaultKind, PowerCut};

const DEVICE_BYTES: u64 = 16 * 1024;

fn read(dev: &FaultDevice, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    dev.read_at(offset, &mut buf).unwrap();
    buf
}

fn assert_power_cut(result: io::Result<()>) {
    let error = result.expect_err("the device should have lost power");
    assert!(PowerCut::is_cause_of(&error), "not a power cut: {error}");
    assert_eq!(error.kind(), io::ErrorKind::Other);
}

fn always_applied(seed: u64) -> FaultConfig {
    FaultConfig {
        crash_weight_dropped: 0,
        crash_weight_torn: 0,
        ..FaultConfig::with_seed(seed)
    }
}

#[test]
fn a_scheduled_power_cut_stops_everything_and_records_the_phase() {
    let config = FaultConfig {
        power_cut_after_writes: Some(3),
        ..always_applied(1)
    };
    let dev = FaultDevice::new(DEVICE_BYTES, config);
    dev.annotate("wal.append");
    dev.write_at(0, &[1; 512]).unwrap();
    dev.write_at(512, &[2; 512]).unwrap();
    dev.annotate("checkpoint.superblock");
    assert!(!dev.power_is_cut());
    assert_eq!(dev.phase_at_power_cut(), None);

    assert_power_cut(dev.write_at(1024, &[3; 512]));
    assert!(dev.power_is_cut());
    dev.annotate("after.the.cut");
    assert_power_cut(dev.write_at(1536, &[4; 512]));
    assert_power_cut(dev.sync());
    assert_power_cut(dev.read_at(0, &mut [0; 512]));

    assert_eq!(dev.phase_at_power_cut(), Some("checkpoint.superblock"));
    assert_eq!(dev.writes_issued(), 3);
    assert_eq!(dev.writes_in_epoch(), 2);
    let image = dev.crash_image();
    assert_eq!(&image[..512], &[1; 512]);
    assert_eq!(&image[512..1024], &[2; 512]);
    assert!(image[1024..].iter().all(|&b| b == 0));
}

#[test]
fn cut_power_works_at_any_moment() {
    let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(2));
    dev.write_at(0, b"kept").unwrap();
    dev.sync().unwrap();
    dev.annotate("idle");
    dev.cut_power();
    dev.cut_power();
    assert_eq!(dev.phase_at_power_cut(), Some("idle"));
    assert_power_cut(dev.read_at(0, &mut [0; 4]));
    assert_eq!(&dev.crash_image()[..4], b"kept");
}

#[test]
fn an_armed_power_cut_counts_from_now() {
    let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(3));
    for _ in 0..5 {
        dev.write_at(0, &[9; 8]).unwrap();
    }
    dev.arm_power_cut(1);
    dev.write_at(8, &[9; 8]).unwrap();
    assert_power_cut(dev.write_at(16, &[9; 8]));
    assert_eq!(dev.writes_issued(), 7);
}

#[test]
fn a_failed_write_changes_nothing() {
    for kind in [FaultKind::Eio, FaultKind::Enospc] {
        let config = FaultConfig {
            fail_write_at: Some((2, kind)),
            ..always_applied(4)
        };
        let dev = FaultDevice::new(DEVICE_BYTES, config);
        dev.write_at(0, &[1; 16]).unwrap();
        let error = dev.write_at(16, &[2; 16]).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(kind.raw_os_error()));
        assert!(!PowerCut::is_cause_of(&error));
        assert_eq!(read(&dev, 16, 16), vec![0; 16]);
        assert_eq!(dev.writes_in_epoch(), 1);
        assert!(dev.crash_image()[16..32].iter().all(|&b| b == 0));
        // The fault is one-shot: the device works again afterwards.
        dev.write_at(16, &[3; 16]).unwrap();
        assert_eq!(read(&dev, 16, 16), vec![3; 16]);
    }
}

#[test]
fn a_failed_read_leaves_the_buffer_alone() {
    let config = FaultConfig {
        fail_read_at: Some((1, FaultKind::Eio)),
        ..FaultConfig::with_seed(5)
    };
    let dev = FaultDevice::new(DEVICE_BYTES, config);
    dev.write_at(0, &[7; 4]).unwrap();
    let mut buf = [0xAA; 4];
    let error = dev.read_at(0, &mut buf).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert_eq!(buf, [0xAA; 4]);
    assert_eq!(read(&dev, 0, 4), vec![7; 4]);
    assert_eq!(dev.reads_issued(), 2);
}

#[test]
fn a_failed_sync_makes_nothing_durable() {
    let config = FaultConfig {
        fail_sync_at: Some((1, FaultKind::Eio)),
        crash_weight_applied: 0,
        crash_weight_torn: 0,
        ..FaultConfig::with_seed(6)
    };
    let dev = FaultDevice::new(DEVICE_BYTES, config);
    dev.write_at(0, &[5; 512]).unwrap();
    let error = dev.sync().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert_eq!(dev.writes_in_epoch(), 1);
    assert_eq!(dev.syncs_issued(), 1);
    // Every unsynced write is dropped in a crash, and the failed sync made
    // nothing durable, so the image is still all zeroes.
    assert!(dev.crash_image().iter().all(|&b| b == 0));
    dev.sync().unwrap();
    assert_eq!(dev.writes_in_epoch(), 0);
    assert_eq!(&dev.crash_image()[..512], &[5; 512]);
}

#[test]
fn armed_faults_count_from_now_and_can_be_disarmed() {
    let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(7));
    dev.write_at(0, &[1]).unwrap();
    dev.arm_write_fault(0, FaultKind::Enospc);
    let error = dev.write_at(0, &[2]).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(read(&dev, 0, 1), vec![1]);

    dev.arm_read_fault(1, FaultKind::Eio);
    dev.read_at(0, &mut [0]).unwrap();
    assert!(dev.read_at(0, &mut [0]).is_err());

    dev.arm_sync_fault(0, FaultKind::Eio);
    assert!(dev.sync().is_err());
    dev.sync().unwrap();

    dev.arm_write_fault(0, FaultKind::Eio);
    dev.arm_read_fault(0, FaultKind::Eio);
    dev.arm_sync_fault(0, FaultKind::Eio);
    dev.arm_power_cut(0);
    dev.disarm_faults();
    dev.write_at(0, &[3]).unwrap();
    dev.read_at(0, &mut [0]).unwrap();
    dev.sync().unwrap();
    assert!(!dev.power_is_cut());
}

#[test]
fn out_of_range_requests_are_rejected() {
    let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(8));
    let past_end = dev.write_at(DEVICE_BYTES - 1, &[0; 2]).unwrap_err();
    assert_eq!(past_end.kind(), io::ErrorKind::UnexpectedEof);
    assert!(dev.read_at(u64::MAX, &mut [0; 1]).is_err());
    assert_eq!(dev.writes_in_epoch(), 0);
}

#[test]
fn a_bit_flip_shows_in_reads_and_in_every_crash_image() {
    for seed in 0..30 {
        let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(seed));
        dev.write_at(100, &[0xF0]).unwrap();
        dev.sync().unwrap();
        dev.flip_bit(100, 0);
        assert_eq!(read(&dev, 100, 1), vec![0xF1]);
        assert_eq!(dev.crash_image()[100], 0xF1);

        // A flip under an unsynced write survives whatever the crash does.
        dev.write_at(2048, &[0x00; 512]).unwrap();
        dev.flip_bit(2048 + 10, 7);
        assert_eq!(read(&dev, 2058, 1), vec![0x80]);
        assert_eq!(dev.crash_image()[2058], 0x80);
    }
}

#[test]
fn random_bit_flips_are_seeded_and_stay_in_range() {
    let first = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(9));
    let second = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(9));
    for _ in 0..50 {
        let (offset, bit) = first.flip_random_bit_in(4096..8192);
        assert!((4096..8192).contains(&offset));
        assert!(bit < 8);
        assert_eq!(second.flip_random_bit_in(4096..8192), (offset, bit));
    }
    assert_eq!(first.crash_image(), second.crash_image());
}

#[test]
fn flipping_bits_does_not_change_how_a_history_crashes() {
    let plain = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(10));
    let flipped = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(10));
    for dev in [&plain, &flipped] {
        dev.write_at(0, &[1; 4096]).unwrap();
        dev.write_at(8192, &[2; 4096]).unwrap();
    }
    let (offset, bit) = flipped.flip_random_bit_in(12288..16384);
    let mut expected = plain.crash_image();
    expected[offset as usize] ^= 1 << bit;
    assert_eq!(flipped.crash_image(), expected);
}

#[test]
fn the_device_is_usable_from_many_threads() {
    let dev = FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(11));
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let dev = &dev;
            scope.spawn(move || {
                for i in 0..100u64 {
                    dev.write_at(u64::from(t) * 4096 + i, &[t]).unwrap();
                }
            });
        }
    });
    assert_eq!(dev.writes_issued(), 400);
    dev.sync().unwrap();
    assert_eq!(read(&dev, 3 * 4096, 100), vec![3; 100]);
}
