//! What survives a simulated power cut: the crash-image half of the fault
//! model in `src/fault.rs`.

use wodfs_device::{Device, FaultConfig, FaultDevice, SECTOR_BYTES};

const DEVICE_BYTES: u64 = 64 * 1024;

fn device(seed: u64) -> FaultDevice {
    FaultDevice::new(DEVICE_BYTES, FaultConfig::with_seed(seed))
}

fn region(image: &[u8], offset: u64, len: usize) -> &[u8] {
    &image[offset as usize..offset as usize + len]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Applied,
    Dropped,
    Torn,
}

/// Classifies a write of `new` over zeroes, checking on the way that every
/// sector piece landed whole or not at all.
fn classify(image: &[u8], offset: u64, new: &[u8]) -> Seen {
    let mut landed = 0;
    let mut pieces = 0;
    let mut start = 0usize;
    while start < new.len() {
        let absolute = offset + start as u64;
        let end = new
            .len()
            .min(start + (SECTOR_BYTES - absolute % SECTOR_BYTES) as usize);
        let got = region(image, absolute, end - start);
        if got == &new[start..end] {
            landed += 1;
        } else {
            assert!(
                got.iter().all(|&b| b == 0),
                "sector piece at {absolute} is torn inside"
            );
        }
        pieces += 1;
        start = end;
    }
    match landed {
        0 => Seen::Dropped,
        n if n == pieces => Seen::Applied,
        _ => Seen::Torn,
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt | 1)
        .collect()
}

#[test]
fn reads_see_unsynced_writes() {
    let dev = device(1);
    dev.write_at(4096, b"not yet durable").unwrap();
    let mut buf = [0u8; 15];
    dev.read_at(4096, &mut buf).unwrap();
    assert_eq!(&buf, b"not yet durable");
    assert_eq!(dev.writes_in_epoch(), 1);
}

#[test]
fn synced_writes_are_in_every_crash_image() {
    for seed in 0..200 {
        let dev = device(seed);
        let synced = pattern(3000, 7);
        dev.write_at(1000, &synced).unwrap();
        dev.sync().unwrap();
        assert_eq!(dev.writes_in_epoch(), 0);
        // Unsynced writes elsewhere must not disturb the synced one.
        dev.write_at(8192, &pattern(2048, 9)).unwrap();
        let image = dev.crash_image();
        assert_eq!(region(&image, 1000, synced.len()), &synced[..]);
    }
}

#[test]
fn an_unsynced_write_is_applied_dropped_or_torn_at_sector_boundaries() {
    let mut seen = Vec::new();
    for seed in 0..300 {
        let dev = device(seed);
        // Unaligned on purpose: partial first and last sectors.
        let offset = 3 * SECTOR_BYTES + 100;
        let data = pattern(4 * SECTOR_BYTES as usize, 3);
        dev.write_at(offset, &data).unwrap();
        let outcome = classify(&dev.crash_image(), offset, &data);
        seen.push(outcome);
    }
    for outcome in [Seen::Applied, Seen::Dropped, Seen::Torn] {
        assert!(seen.contains(&outcome), "{outcome:?} never happened");
    }
}

#[test]
fn bytes_outside_the_epoch_never_change() {
    for seed in 0..50 {
        let dev = device(seed);
        dev.write_at(SECTOR_BYTES, &pattern(700, 5)).unwrap();
        let image = dev.crash_image();
        assert!(region(&image, 0, SECTOR_BYTES as usize)
            .iter()
            .all(|&b| b == 0));
        assert!(image[SECTOR_BYTES as usize + 700..].iter().all(|&b| b == 0));
    }
}

#[test]
fn overlapping_writes_in_one_epoch_can_land_in_either_order() {
    let mut older_won = false;
    let mut newer_won = false;
    for seed in 0..100 {
        let config = FaultConfig {
            crash_weight_dropped: 0,
            crash_weight_torn: 0,
            ..FaultConfig::with_seed(seed)
        };
        let dev = FaultDevice::new(DEVICE_BYTES, config);
        dev.write_at(0, &[1u8; 512]).unwrap();
        dev.write_at(0, &[2u8; 512]).unwrap();
        match dev.crash_image()[0] {
            1 => older_won = true,
            2 => newer_won = true,
            other => panic!("unexpected byte {other}"),
        }
    }
    assert!(older_won && newer_won);
}

#[test]
fn a_sync_orders_writes_across_epochs() {
    for seed in 0..100 {
        let config = FaultConfig {
            crash_weight_dropped: 0,
            crash_weight_torn: 0,
            ..FaultConfig::with_seed(seed)
        };
        let dev = FaultDevice::new(DEVICE_BYTES, config);
        dev.write_at(0, &[1u8; 512]).unwrap();
        dev.sync().unwrap();
        dev.write_at(0, &[2u8; 512]).unwrap();
        assert_eq!(dev.crash_image()[0], 2);
    }
}

fn history(dev: &FaultDevice) {
    for i in 0..20u64 {
        dev.write_at(i * 1000, &pattern(1500, i as u8)).unwrap();
        if i % 7 == 6 {
            dev.sync().unwrap();
        }
    }
}

#[test]
fn the_same_seed_and_history_give_the_same_image() {
    let first = device(42);
    let second = device(42);
    history(&first);
    history(&second);
    assert_eq!(first.crash_image(), second.crash_image());
    assert_eq!(first.crash_image(), first.crash_image());
    assert_eq!(first.crash_image(), first.crash_image_seeded(42));
}

#[test]
fn different_seeds_crash_differently() {
    let dev = device(0);
    history(&dev);
    let images: Vec<Vec<u8>> = (0..8).map(|seed| dev.crash_image_seeded(seed)).collect();
    assert!(images.iter().any(|image| image != &images[0]));
}

#[test]
fn a_crash_image_restarts_as_a_durable_device() {
    let dev = device(5);
    dev.write_at(0, b"synced").unwrap();
    dev.sync().unwrap();
    let restarted = FaultDevice::from_image(dev.crash_image(), FaultConfig::with_seed(6));
    assert_eq!(restarted.writes_in_epoch(), 0);
    let mut buf = [0u8; 6];
    restarted.read_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"synced");
    assert_eq!(restarted.crash_image(), dev.crash_image());
}
