//! A stream's unbound values are bound in rounds bounded by bytes as well
//! as by count: 4 KiB file blocks reach the count (8,192) only at 32 MiB,
//! and that much unbound data in dirty leaves went past the dirty budget,
//! so write-back wrote those leaves and binding read them back.

use wodfs_device::MemDevice;
use wodfs_engine::{Config, Op, Tree};

const BLOCK: usize = 4096;

#[test]
fn a_stream_of_file_blocks_is_bound_before_a_twelfth_of_the_cache_waits() {
    let cfg = Config {
        cache_bytes: 48 << 20,
        ..Config::default()
    };
    let tree = Tree::create(Box::new(MemDevice::new(512 << 20)), cfg).unwrap();
    let batch_blocks = 256u32;
    let mut most = 0;
    for b in 0..40u32 {
        let ops: Vec<Op> = (0..batch_blocks)
            .map(|i| Op::Insert {
                key: format!("/f/{:08}", b * batch_blocks + i).into_bytes(),
                value: vec![(b ^ i) as u8; BLOCK],
            })
            .collect();
        tree.write(&ops).unwrap();
        most = most.max(tree.unbound_pending());
    }
    // No background thread: the writer binds once the values reach a
    // twelfth of the cache (4 MiB), so at most that plus one batch waits.
    let limit = ((48 << 20) / 12 + BLOCK * batch_blocks as usize) / BLOCK;
    assert!(
        most >= batch_blocks as usize,
        "the stream was not late-bound"
    );
    assert!(
        most <= limit,
        "{most} unbound inserts waited (limit {limit})"
    );
    tree.sync().unwrap();
    assert_eq!(tree.unbound_pending(), 0);
    let last = format!("/f/{:08}", 40 * batch_blocks - 1).into_bytes();
    assert_eq!(
        tree.get(&last).unwrap(),
        Some(vec![(39 ^ 255) as u8; BLOCK])
    );
    tree.verify().unwrap();
}
