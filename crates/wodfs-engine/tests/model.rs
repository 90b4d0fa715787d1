//! Model-based tests: the tree against a `BTreeMap`, with tiny nodes so
//! splits, merges, flushes and evictions happen constantly, and
//! checkpoint + reopen + `verify()` inside the sequences.

use std::sync::Arc;

use proptest::prelude::*;
use wodfs_device::MemDevice;
use wodfs_engine::{Config, Op, Tree};

#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    Sync,
    Checkpoint,
    Reopen,
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>),
}

mod common;

use common::{apply as apply_model, Model};

/// Keys that look like paths, sharing prefixes so lifting matters.
fn key() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["/a/", "/a/b/", "/a/c/", "/d/", "/d/e/f/", "/z/"]),
        prop::collection::vec(
            prop::sample::select(vec![b'0', b'1', b'2', b'x', 0u8, 0xff]),
            0..6,
        ),
    )
        .prop_map(|(p, tail)| {
            let mut k = p.as_bytes().to_vec();
            k.extend(tail);
            k
        })
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..120)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (key(), value()).prop_map(|(key, value)| Op::Insert { key, value }),
        2 => key().prop_map(|key| Op::Delete { key }),
        3 => (key(), 0u32..150, prop::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(key, offset, data)| Op::Patch { key, offset, data }),
        1 => (key(), 0u32..100).prop_map(|(key, len)| Op::Truncate { key, len }),
        1 => (key(), key()).prop_filter_map("empty range", |(a, b)| {
            (a < b).then_some(Op::DeleteRange { lo: a, hi: b })
        }),
        1 => (prop::sample::select(vec!["/a/b/", "/a/c/", "/d/", "/q/"]),
              prop::sample::select(vec!["/a/c/", "/m/", "/d/e/", "/z/"]))
            .prop_filter_map("nested prefixes", |(f, t)| {
                let (f, t) = (f.as_bytes().to_vec(), t.as_bytes().to_vec());
                (!f.starts_with(&t) && !t.starts_with(&f)).then_some(Op::RangeMove { from: f, to: t })
            }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        30 => op().prop_map(Step::Op),
        2 => Just(Step::Sync),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Reopen),
        3 => key().prop_map(Step::Get),
        1 => (key(), key()).prop_map(|(a, b)| Step::Scan(a.min(b.clone()), b)),
    ]
}

fn check_all(tree: &Tree, model: &Model) {
    let got: Vec<(Vec<u8>, Vec<u8>)> = tree.range(&[], None).map(|r| r.unwrap()).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got, want, "full scan differs from the model");
    tree.verify().expect("verify");
}

fn run(steps: &[Step], cfg: Config) -> wodfs_engine::TreeStats {
    let dev = Arc::new(MemDevice::new(64 << 20));
    let mut tree = Tree::create(Box::new(dev.clone()), cfg.clone()).unwrap();
    let mut model = Model::new();
    // The states since the last sync or checkpoint, oldest first: a reopen
    // without a sync recovers one of them (the log's full buffers are
    // written out between syncs, so it may replay past the last sync).
    let mut since_sync = vec![Model::new()];
    let mut before_reopens = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match s {
            Step::Op(op) => {
                tree.write(std::slice::from_ref(op)).unwrap();
                apply_model(&mut model, op);
                since_sync.push(model.clone());
            }
            Step::Sync => {
                tree.sync().unwrap();
                since_sync = vec![model.clone()];
            }
            Step::Checkpoint => {
                tree.checkpoint().unwrap();
                since_sync = vec![model.clone()];
                check_all(&tree, &model);
            }
            Step::Reopen => {
                // Reopen without a sync: the store goes back to the last
                // sync or checkpoint, or to a state after it whose records
                // a write-out put on the device (log replay on open).
                before_reopens.push(tree.stats());
                drop(tree);
                tree = Tree::open(Box::new(dev.clone()), cfg.cache_bytes).unwrap();
                let got: Model = tree.range(&[], None).map(|r| r.unwrap()).collect();
                let at = since_sync.iter().position(|m| *m == got);
                assert!(
                    at.is_some(),
                    "reopen at step {i}: not a state since the last sync"
                );
                model = got;
                since_sync = vec![model.clone()];
                check_all(&tree, &model);
            }
            Step::Get(k) => {
                assert_eq!(
                    tree.get(k).unwrap(),
                    model.get(k).cloned(),
                    "get {k:?} at step {i}"
                );
            }
            Step::Scan(lo, hi) => {
                if lo < hi {
                    let got: Vec<_> = tree.range(lo, Some(hi)).map(|r| r.unwrap()).collect();
                    let want: Vec<_> = model
                        .range(lo.clone()..hi.clone())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(got, want, "scan at step {i}");
                }
            }
        }
        if i % 16 == 0 {
            tree.verify().expect("verify");
        }
    }
    check_all(&tree, &model);
    tree.checkpoint().unwrap();
    before_reopens.push(tree.stats());
    let stats = sum(&before_reopens);
    drop(tree);
    let tree = Tree::open(Box::new(dev), cfg.cache_bytes).unwrap();
    check_all(&tree, &model);
    stats
}

fn sum(all: &[wodfs_engine::TreeStats]) -> wodfs_engine::TreeStats {
    let mut t = wodfs_engine::TreeStats::default();
    for s in all {
        t.leaf_splits += s.leaf_splits;
        t.internal_splits += s.internal_splits;
        t.flushes += s.flushes;
        t.merges += s.merges;
        t.prunes += s.prunes;
        t.skip_downs += s.skip_downs;
        t.evictions += s.evictions;
        t.node_writes += s.node_writes;
    }
    t
}

fn tiny() -> Config {
    Config {
        cache_bytes: 16 << 10,
        ..Config::tiny()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn tree_matches_model_tiny_nodes(steps in prop::collection::vec(step(), 1..400)) {
        run(&steps, tiny());
    }

    #[test]
    fn tree_matches_model_compressed(steps in prop::collection::vec(step(), 1..200)) {
        run(&steps, Config { compression: wodfs_engine::Compression::Lz4, ..tiny() });
    }
}

#[test]
fn many_sequential_then_random_inserts_and_range_deletes() {
    let mut steps = Vec::new();
    for i in 0..3000u32 {
        steps.push(Step::Op(Op::Insert {
            key: format!("/seq/{i:08}").into_bytes(),
            value: vec![(i % 251) as u8; 40],
        }));
    }
    steps.push(Step::Checkpoint);
    for i in 0..3000u32 {
        let j = (i.wrapping_mul(2654435761)) % 3000;
        steps.push(Step::Op(Op::Patch {
            key: format!("/seq/{j:08}").into_bytes(),
            offset: 30,
            data: vec![1, 2, 3, 4],
        }));
    }
    steps.push(Step::Op(Op::DeleteRange {
        lo: b"/seq/00000500".to_vec(),
        hi: b"/seq/00002500".to_vec(),
    }));
    // New writes into the deleted region make its buffer the heaviest, so
    // the range delete is flushed down: it prunes covered children and
    // leaves small ones behind to merge.
    for i in 0..600u32 {
        steps.push(Step::Op(Op::Insert {
            key: format!("/seq/0000{}y", 1000 + (i.wrapping_mul(40503)) % 1500).into_bytes(),
            value: vec![7; 30],
        }));
    }
    steps.push(Step::Checkpoint);
    steps.push(Step::Reopen);
    steps.push(Step::Op(Op::RangeMove {
        from: b"/seq/".to_vec(),
        to: b"/moved/".to_vec(),
    }));
    steps.push(Step::Checkpoint);
    // Merges only happen between cached siblings (a merge never reads), so
    // this sequence gets a cache of a few dozen tiny nodes; the data is
    // still many times larger.
    let stats = run(
        &steps,
        Config {
            cache_bytes: 208 << 10,
            ..tiny()
        },
    );
    eprintln!("{stats:?}");
    // The sequence must exercise the machinery, or it proves nothing.
    assert!(stats.leaf_splits > 50, "{stats:?}");
    assert!(stats.internal_splits > 5, "{stats:?}");
    assert!(stats.flushes > 50, "{stats:?}");
    assert!(stats.merges > 0, "{stats:?}");
    assert!(stats.prunes > 0, "{stats:?}");
    assert!(stats.skip_downs > 0, "{stats:?}");
    assert!(stats.evictions > 0, "{stats:?}");
}
