//! Model-based tests: random operation sequences (with checkpoint and
//! reopen inside them) give the same results and the same namespace as
//! `wodfs_schema::model::Namespace`, and fsck stays clean.

mod common;

use std::sync::Arc;

use common::{apply_fs, apply_model, extract, new_fs, op_strategy, FsOp};
use proptest::prelude::*;
use wodfs_device::Device;
use wodfs_schema::model::Namespace;

fn run(ops: &[FsOp]) -> Result<(), TestCaseError> {
    let (mem, mut fs) = new_fs(64 << 20);
    let dev: Arc<dyn Device> = mem;
    let mut ns = Namespace::new();
    for (i, op) in ops.iter().enumerate() {
        let want = apply_model(&mut ns, op);
        let got = apply_fs(&mut fs, &dev, op);
        prop_assert_eq!(got, want, "op {} {:?}", i, op);
        if let Err(e) = fs.check_attr_cache() {
            prop_assert!(false, "after op {} {:?}: {}", i, op, e);
        }
    }
    let seen = extract(&fs);
    // The walk filled the attribute cache; it must agree with the tree.
    prop_assert!(fs.check_attr_cache().expect("cache check") > 0);
    prop_assert!(
        seen == ns,
        "namespace differs: {:?}",
        seen.first_difference(&ns)
    );
    let report = fs.fsck().expect("fsck");
    prop_assert!(report.errors.is_empty(), "fsck: {:?}", report.errors);
    fs.tree().verify().expect("tree verify");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_match_the_model(ops in proptest::collection::vec(op_strategy(), 1..100)) {
        run(&ops)?;
    }
}

#[test]
fn rename_over_a_hard_link_and_reopen() {
    use FsOp::*;
    let ops = vec![
        Create("/a".into()),
        Write("/a".into(), 0, vec![7; 5000]),
        Link("/a".into(), "/b".into()),
        Reopen,
        Rename("/b".into(), "/a".into(), 0),
        Mkdir("/d".into()),
        Rename("/a".into(), "/d/a".into(), 0),
        Reopen,
        Write("/d/a".into(), 4095, vec![1, 2, 3]),
    ];
    run(&ops).unwrap();
}
