//! Batches packed into the log's LZ4 stream (`wal/packing.rs`), end to
//! end: what is logged shrinks where batches repeat one another, and
//! recovery reads back every batch across stream restarts (checkpoints,
//! opens after a crash), whatever mix of packed and plain records the log
//! holds.

use std::sync::Arc;

use wodfs_device::{FaultConfig, FaultDevice};
use wodfs_engine::{Config, LogEnd, Tree};

fn cfg() -> Config {
    Config {
        cache_bytes: 1 << 20,
        log_bytes: 4 << 20,
        ..Config::tiny()
    }
}

/// Random bytes, which a sample judges incompressible: logged plain.
fn random(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// Printable random characters: about 6.5 bits a byte, no repeats within.
fn printable(n: usize, seed: u64) -> Vec<u8> {
    random(n, seed).iter().map(|b| b' ' + b % 95).collect()
}

/// The value of key `i`: most start with the same 2 KiB of printable
/// characters (files written alike), one in five is random bytes.
fn value(i: u32, common: &[u8]) -> Vec<u8> {
    if i % 5 == 4 {
        random(6000, u64::from(i) + 1)
    } else {
        let mut v = common.to_vec();
        v.extend_from_slice(format!("-{i}").as_bytes());
        v
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("/mail/{:03}/{i:06}", i % 37).into_bytes()
}

#[test]
fn repeated_values_are_logged_small_and_every_batch_recovers_across_restarts() {
    let common = printable(2048, 7);
    // Three rounds, each ended by a crash (the device as last synced) and
    // an open that replays the log: a stream starts at creation and at
    // each open, and a checkpoint in rounds 0 and 2 restarts one too.
    let mut dev = Arc::new(FaultDevice::new(32 << 20, FaultConfig::with_seed(5)));
    let mut tree = Tree::create(Box::new(dev.clone()), cfg()).unwrap();
    for round in 0..3u32 {
        let before = tree.log_bytes_written();
        for i in round * 300..(round + 1) * 300 {
            tree.insert(&key(i), &value(i, &common)).unwrap();
            if i % 50 == 0 {
                tree.sync().unwrap();
            }
            if i == round * 300 + 150 && round != 1 {
                tree.checkpoint().unwrap();
            }
        }
        tree.sync().unwrap();
        // 240 printable values of about 2 KiB repeat the first one; 60
        // random ones of 6,000 bytes are logged as they are.
        let logged = tree.log_bytes_written() - before;
        let random_bytes = 60 * 6000;
        assert!(
            logged < random_bytes + 240 * 300,
            "round {round}: {logged} log bytes for {} bytes of values",
            240 * 2048 + random_bytes
        );
        let image = dev.crash_image();
        drop(tree);
        dev = Arc::new(FaultDevice::from_image(image, FaultConfig::with_seed(6)));
        tree = Tree::open(Box::new(dev.clone()), cfg().cache_bytes).unwrap();
        assert_eq!(tree.log_end(), LogEnd::Clean, "round {round}");
        // Round 1 has no checkpoint: its crash replays round 0's batches
        // after its checkpoint (one stream) and then round 1's (another,
        // started by the open): two streams in one replay.
        let replayed = tree.stats().replayed_records;
        let want = if round == 1 { 449 } else { 149 };
        assert_eq!(replayed, want, "round {round}");
        for i in 0..(round + 1) * 300 {
            assert_eq!(tree.get(&key(i)).unwrap(), Some(value(i, &common)), "{i}");
        }
    }
    tree.verify().unwrap();
}
