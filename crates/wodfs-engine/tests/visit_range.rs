//! `Tree::visit_range` (entries lent as slices) gives exactly what
//! `Tree::range` gives, over windows where buffered messages apply (the
//! merging path) and where none do (entries straight from cached leaves),
//! and stops when asked.

mod common;

use common::{apply, incompressible, small_nodes, Model, Rng};
use wodfs_device::MemDevice;
use wodfs_engine::{Op, Tree};

fn key(k: u64) -> Vec<u8> {
    format!("/v/{:03}/{:05}", k % 7, k).into_bytes()
}

fn visited(tree: &Tree, lo: &[u8], hi: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    tree.visit_range(lo, hi, |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        out.len() < limit
    })
    .unwrap();
    out
}

fn check_windows(tree: &Tree, model: &Model, rng: &mut Rng) {
    for _ in 0..40 {
        let (a, b) = (key(rng.below(20_000)), key(rng.below(20_000)));
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let hi = (rng.below(5) > 0).then_some(hi);
        let want: Vec<_> = model
            .range(lo.clone()..)
            .take_while(|(k, _)| hi.as_ref().is_none_or(|h| *k < h))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ranged: Vec<_> = tree.range(&lo, hi.as_deref()).map(|r| r.unwrap()).collect();
        assert!(ranged == want, "range() differs from the model");
        let all = visited(tree, &lo, hi.as_deref(), usize::MAX);
        assert!(all == want, "visit_range() differs from the model");
        let limit = 1 + rng.below(50) as usize;
        let some = visited(tree, &lo, hi.as_deref(), limit);
        assert_eq!(some.len(), want.len().min(limit), "stopping early");
        assert!(some[..] == want[..some.len()]);
    }
}

#[test]
fn visit_range_matches_range_with_and_without_buffered_messages() {
    // `WODFS_VISIT_SEEDS` runs more seeds.
    for seed in 0..common::env_u64("WODFS_VISIT_SEEDS", 2) {
        one_seed(11 + seed);
    }
}

fn one_seed(seed: u64) {
    let tree = Tree::create(Box::new(MemDevice::new(256 << 20)), small_nodes()).unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::new();
    for chunk in 0..40 {
        let ops: Vec<Op> = (0..250)
            .map(|i| Op::Insert {
                key: key(chunk * 500 + i * 2),
                value: incompressible(&mut rng, 100 + (i as usize % 300)),
            })
            .collect();
        for op in &ops {
            apply(&mut model, op);
        }
        tree.write(&ops).unwrap();
    }
    tree.checkpoint().unwrap();
    // Settled data: most windows take the lending path.
    check_windows(&tree, &model, &mut rng);
    // Fresh messages of every kind stay buffered above the leaves: the
    // windows that meet them take the merging path.
    for _ in 0..300 {
        let k = key(rng.below(20_000));
        let op = match rng.below(4) {
            0 => Op::Delete { key: k },
            1 => Op::Patch {
                key: k,
                offset: 3,
                data: vec![7; 5],
            },
            2 => {
                // A few keys from `k` on.
                let mut hi = k.clone();
                hi.push(b'~');
                Op::DeleteRange { lo: k, hi }
            }
            _ => Op::Insert {
                key: k,
                value: vec![1; 40],
            },
        };
        apply(&mut model, &op);
        tree.write(&[op]).unwrap();
    }
    assert!(tree.verify().unwrap().buffered_points > 0);
    check_windows(&tree, &model, &mut rng);
}
