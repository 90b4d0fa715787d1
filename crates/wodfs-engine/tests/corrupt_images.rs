//! Committed damaged images (`tests/images/`), each with the outcome it
//! must give: a clear error naming what and where, never a panic, never
//! damaged data returned as data. `WODFS_WRITE_IMAGES=1` regenerates them
//! from a deterministic healthy image.

use std::path::PathBuf;

use wodfs_device::MemDevice;
use wodfs_engine::{fuzz, Config, Error, Tree};

const IMAGE_BYTES: u64 = 160 << 10;

fn cfg() -> Config {
    Config {
        log_bytes: 16 << 10,
        cache_bytes: 64 << 10,
        ..Config::tiny()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("/file/{i:04}").into_bytes()
}

fn healthy() -> Vec<u8> {
    let dev = std::sync::Arc::new(MemDevice::new(IMAGE_BYTES));
    let tree = Tree::create(Box::new(dev.clone()), cfg()).unwrap();
    for i in 0..120 {
        tree.insert(&key(i), &[b'a' + (i % 26) as u8; 24]).unwrap();
    }
    tree.checkpoint().unwrap();
    tree.insert(b"/later", b"second checkpoint").unwrap();
    tree.close().unwrap();
    dev.to_bytes()
}

fn flip(img: &mut [u8], at: u64) {
    img[at as usize] ^= 0x10;
}

/// The damaged variants, by file name.
fn variants() -> Vec<(&'static str, Vec<u8>)> {
    let good = healthy();
    let nodes = fuzz::node_extents(&good);
    let leaf = nodes
        .iter()
        .find(|n| n.2 == 0 && n.3.len() > 1)
        .expect("a multi-partition leaf");
    let internal = nodes.iter().find(|n| n.2 > 0).expect("an internal node");
    let newest_slot = |img: &[u8]| -> u64 {
        let g =
            |s: usize| u64::from_le_bytes(img[s * 4096 + 12..s * 4096 + 20].try_into().unwrap());
        if g(0) > g(1) {
            0
        } else {
            4096
        }
    };
    let mut v = vec![("healthy", good.clone())];
    v.push(("zeros", vec![0u8; IMAGE_BYTES as usize]));
    v.push((
        "foreign",
        (0..IMAGE_BYTES)
            .map(|i| ((i * 2654435761) >> 13) as u8)
            .collect(),
    ));
    v.push(("truncated", good[..good.len() / 2].to_vec()));
    let mut x = good.clone();
    flip(&mut x, 40);
    flip(&mut x, 4096 + 40);
    v.push(("both-superblocks-bad", x));
    let mut x = good.clone();
    let s = newest_slot(&x);
    flip(&mut x, s + 50);
    v.push(("newest-superblock-torn", x));
    let mut x = good.clone();
    let tbl = u64::from_le_bytes(
        good[newest_slot(&good) as usize + 82..newest_slot(&good) as usize + 90]
            .try_into()
            .unwrap(),
    );
    flip(&mut x, tbl + 20);
    v.push(("block-table-bad", x));
    let mut x = good.clone();
    flip(&mut x, internal.0 + 30);
    v.push(("internal-header-bad", x));
    let mut x = good.clone();
    let (poff, plen) = leaf.3[1];
    flip(&mut x, leaf.0 + u64::from(poff) + u64::from(plen) / 2);
    v.push(("leaf-partition-bad", x));
    let mut x = good.clone();
    let s = newest_slot(&x) as usize;
    x[s + 8..s + 12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c_of(&x[s..s + 106]);
    x[s + 106..s + 110].copy_from_slice(&crc.to_le_bytes());
    let o = if s == 0 { 4096 } else { 0 };
    x[o + 8..o + 12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c_of(&x[o..o + 106]);
    x[o + 106..o + 110].copy_from_slice(&crc.to_le_bytes());
    v.push(("future-version", x));
    v
}

/// crc32c (Castagnoli), bitwise: the test does not trust the engine's own.
fn crc32c_of(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/images")
}

fn load(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(format!("{name}.wodfs"))).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn open(img: Vec<u8>) -> Result<Tree, Error> {
    Tree::open(Box::new(MemDevice::from_bytes(img)), 64 << 10)
}

fn scan(tree: &Tree) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
    tree.range(&[], None).collect()
}

#[test]
fn committed_images_are_current() {
    if std::env::var("WODFS_WRITE_IMAGES").is_ok() {
        std::fs::create_dir_all(dir()).unwrap();
        for (name, img) in variants() {
            std::fs::write(dir().join(format!("{name}.wodfs")), img).unwrap();
        }
    }
    // The generator is deterministic: the committed healthy image is what
    // this build writes, so format changes show up here.
    let (committed, fresh) = (load("healthy"), healthy());
    let first_diff = committed.iter().zip(&fresh).position(|(a, b)| a != b);
    assert!(
        committed.len() == fresh.len() && first_diff.is_none(),
        "format changed (first difference at byte {first_diff:?}): regenerate the images with WODFS_WRITE_IMAGES=1 and log the change in docs/format.md"
    );
}

#[test]
fn healthy_image_reads_back() {
    let tree = open(load("healthy")).unwrap();
    tree.verify().unwrap();
    let all = scan(&tree).unwrap();
    assert_eq!(all.len(), 121);
    assert_eq!(tree.get(&key(7)).unwrap(), Some(vec![b'h'; 24]));
}

#[test]
fn not_an_image() {
    for name in ["zeros", "foreign"] {
        let e = open(load(name)).unwrap_err();
        assert!(matches!(e, Error::NotWodfs(_)), "{name}: {e}");
    }
}

#[test]
fn truncated_image_is_refused() {
    let e = open(load("truncated")).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
}

#[test]
fn both_superblocks_damaged() {
    let e = open(load("both-superblocks-bad")).unwrap_err();
    assert!(e.is_corruption(), "{e}");
}

#[test]
fn torn_newest_superblock_falls_back_to_the_older_checkpoint() {
    let tree = open(load("newest-superblock-torn")).unwrap();
    tree.verify().unwrap();
    assert_eq!(
        scan(&tree).unwrap().len(),
        120,
        "the first checkpoint, without /later"
    );
    assert_eq!(tree.get(b"/later").unwrap(), None);
}

#[test]
fn damaged_block_table() {
    let e = open(load("block-table-bad")).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Corrupt {
                what: "block table",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn damaged_node_header_is_an_error_with_its_address() {
    let img = load("internal-header-bad");
    let nodes = fuzz::node_extents(&load("healthy"));
    let bad = nodes.iter().find(|n| n.2 > 0).unwrap().0;
    let err = match open(img) {
        Err(e) => e,
        Ok(tree) => scan(&tree).unwrap_err(),
    };
    match err {
        Error::Corrupt { addr, .. } => assert_eq!(addr, bad),
        e => panic!("{e}"),
    }
}

#[test]
fn damaged_partition_is_an_error_never_data() {
    let tree = open(load("leaf-partition-bad")).unwrap();
    let e = scan(&tree).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Corrupt {
                what: "partition",
                ..
            }
        ),
        "{e}"
    );
    assert!(tree.verify().is_err());
    // Keys in other leaves still read.
    let readable = (0..120).filter(|i| tree.get(&key(*i)).is_ok()).count();
    assert!(readable > 0 && readable < 120, "{readable}");
}

#[test]
fn future_format_version() {
    let e = open(load("future-version")).unwrap_err();
    assert!(
        matches!(e, Error::UnsupportedVersion { found: 99, .. }),
        "{e}"
    );
}
