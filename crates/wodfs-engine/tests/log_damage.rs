//! A bit flipped in a durable log record is detected: replay stops at that
//! record and `Tree::log_end()` names its device address (by content alone
//! a damaged record cannot be told from a write torn by a crash, so it is
//! reported, not fatal); nothing before it is lost or altered.

use std::sync::Arc;

use wodfs_device::{FaultConfig, FaultDevice, MemDevice};
use wodfs_engine::{Config, LogEnd, Tree};

fn cfg() -> Config {
    Config {
        cache_bytes: 1 << 20,
        log_bytes: 256 << 10,
        ..Config::tiny()
    }
}

#[test]
fn a_flipped_bit_in_the_log_is_reported_with_its_address() {
    let dev = Arc::new(FaultDevice::new(8 << 20, FaultConfig::with_seed(3)));
    let tree = Tree::create(Box::new(dev.clone()), cfg()).unwrap();
    // Each record: 16-byte frame + payload of about 3 + 12 + 2 + 100 bytes.
    for i in 0..100u32 {
        tree.insert(format!("/key/{i:05}").as_bytes(), &[i as u8; 100])
            .unwrap();
        tree.sync().unwrap();
    }
    drop(tree);
    // Clean reopen first: the whole log replays and ends cleanly.
    let image = dev.crash_image();
    let clean = Tree::open(
        Box::new(MemDevice::from_bytes(image.clone())),
        cfg().cache_bytes,
    )
    .unwrap();
    assert_eq!(clean.log_end(), LogEnd::Clean);
    assert_eq!(clean.stats().replayed_records, 100);
    drop(clean);
    // Flip a bit in the payload of the 60th record (log region starts at 8192).
    let mut image = image;
    let log_offset = 8192usize;
    let record_bytes = {
        // Find record 60 by walking the frames' lengths.
        let mut pos = 0usize;
        for _ in 0..60 {
            let len = u32::from_le_bytes(
                image[log_offset + pos + 8..log_offset + pos + 12]
                    .try_into()
                    .unwrap(),
            );
            pos += 16 + len as usize;
        }
        pos
    };
    image[log_offset + record_bytes + 16 + 20] ^= 0x04;
    let tree = Tree::open(Box::new(MemDevice::from_bytes(image)), cfg().cache_bytes).unwrap();
    match tree.log_end() {
        LogEnd::Damaged { addr, .. } => assert_eq!(addr, (log_offset + record_bytes) as u64),
        other => panic!("damage not reported: {other:?}"),
    }
    assert_eq!(tree.stats().replayed_records, 60);
    for i in 0..60u32 {
        assert_eq!(
            tree.get(format!("/key/{i:05}").as_bytes()).unwrap(),
            Some(vec![i as u8; 100])
        );
    }
    assert_eq!(tree.get(b"/key/00060").unwrap(), None);
    tree.verify().unwrap();
}
