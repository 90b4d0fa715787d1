//! `wodfs fsck` (and `wodfs stat`) on damaged file-system images: each
//! damage gives fsck(8)'s exit code and a message naming the problem, and
//! never a panic. The images are generated here from one small file system
//! (a few MiB, too big to commit) and damaged at places found with the
//! engine's own image walker (`wodfs_engine::fuzz::node_extents`), the one
//! the engine's committed-image test uses.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{text, wodfs, Tmp};

use wodfs_device::MemDevice;
use wodfs_engine::Config;
use wodfs_fs::{Fs, FsPath, Kind, NewNode};

const IMAGE_BYTES: u64 = 8 << 20;
/// Superblock fields (docs/format.md): version, generation, table offset.
const SB_VERSION: usize = 8;
const SB_GENERATION: usize = 12;
const SB_TABLE_OFFSET: usize = 82;
const SB_CRC_END: usize = 106;
const SLOT_BYTES: usize = 4096;

/// A file system with a few directories and files, two checkpoints deep.
fn healthy() -> Vec<u8> {
    let cfg = Config {
        node_bytes: 64 << 10,
        partition_bytes: 8 << 10,
        cache_bytes: 1 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    };
    let dev = Arc::new(MemDevice::new(IMAGE_BYTES));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), cfg, 0, 0).unwrap();
    for d in 0..4u32 {
        let name = format!("d{d}");
        fs.make(&FsPath::root(), name.as_bytes(), dir_node())
            .unwrap();
        let dir = FsPath::root().join(name.as_bytes()).unwrap();
        for f in 0..40u32 {
            let name = format!("f{f:03}");
            fs.make(&dir, name.as_bytes(), NewNode::new(Kind::File, 0o644))
                .unwrap();
            let (_, loc) = fs.lookup(&dir, name.as_bytes()).unwrap();
            // Incompressible-ish content so leaves fill up and split.
            let data: Vec<u8> = (0..6000u32)
                .map(|i| (i.wrapping_mul(2654435761) >> (f % 7 + 8)) as u8)
                .collect();
            fs.write(&loc, 0, &data, false).unwrap();
        }
        fs.checkpoint().unwrap();
    }
    drop(fs);
    dev.to_bytes()
}

fn dir_node() -> NewNode {
    NewNode::new(Kind::Dir, 0o755)
}

fn u64_at(img: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(img[at..at + 8].try_into().unwrap())
}

/// Byte offset of the superblock slot with the higher generation.
fn newest_slot(img: &[u8]) -> usize {
    if u64_at(img, SB_GENERATION) > u64_at(img, SLOT_BYTES + SB_GENERATION) {
        0
    } else {
        SLOT_BYTES
    }
}

/// Rewrites a superblock slot's checksum after an edit, so the edit is
/// what the reader meets rather than a checksum mismatch.
fn reseal(img: &mut [u8], slot: usize) {
    let crc = crc32c::crc32c(&img[slot..slot + SB_CRC_END]);
    img[slot + SB_CRC_END..slot + SB_CRC_END + 4].copy_from_slice(&crc.to_le_bytes());
}

struct Case {
    name: &'static str,
    image: Vec<u8>,
    /// fsck(8) exit code: 0 clean, 4 errors left, 8 operational error.
    code: i32,
    /// Words the output must contain (lower case).
    says: &'static [&'static str],
}

fn cases() -> Vec<Case> {
    let good = healthy();
    let nodes = wodfs_engine::fuzz::node_extents(&good);
    let leaf = nodes
        .iter()
        .find(|n| n.2 == 0 && n.3.len() > 1)
        .expect("a leaf with several partitions");
    let internal = nodes.iter().find(|n| n.2 > 0).expect("an internal node");
    let newest = newest_slot(&good);
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut x = good.clone();
        f(&mut x);
        x
    };
    vec![
        Case {
            name: "healthy",
            image: good.clone(),
            code: 0,
            says: &["0 errors"],
        },
        Case {
            name: "zero-length",
            image: Vec::new(),
            code: 4,
            says: &["empty", "not a wodfs image"],
        },
        Case {
            name: "shorter-than-a-superblock",
            image: good[..100].to_vec(),
            code: 4,
            says: &["not a wodfs image"],
        },
        Case {
            name: "truncated",
            image: good[..good.len() / 2].to_vec(),
            code: 4,
            says: &["truncated"],
        },
        Case {
            name: "wrong-magic",
            image: edit(&|x| {
                x[..8].copy_from_slice(b"EXT4-SB!");
                x[SLOT_BYTES..SLOT_BYTES + 8].copy_from_slice(b"EXT4-SB!");
            }),
            code: 4,
            says: &["not a wodfs image"],
        },
        Case {
            name: "both-superblocks-flipped",
            image: edit(&|x| {
                x[50] ^= 0x40;
                x[SLOT_BYTES + 50] ^= 0x40;
            }),
            code: 4,
            says: &["corrupt superblock"],
        },
        Case {
            // The older checkpoint is whole, so the image opens as it was
            // one checkpoint earlier: consistent, hence clean.
            name: "newest-superblock-flipped",
            image: edit(&|x| x[newest + 60] ^= 0x01),
            code: 0,
            says: &["0 errors"],
        },
        Case {
            name: "future-version",
            image: edit(&|x| {
                for slot in [0, SLOT_BYTES] {
                    x[slot + SB_VERSION..slot + SB_VERSION + 4]
                        .copy_from_slice(&99u32.to_le_bytes());
                    reseal(x, slot);
                }
            }),
            code: 8,
            says: &["unsupported format version 99"],
        },
        Case {
            name: "block-table-flipped",
            image: edit(&|x| {
                let table = u64_at(x, newest + SB_TABLE_OFFSET) as usize;
                x[table + 20] ^= 0x08;
            }),
            code: 4,
            says: &["corrupt", "block table"],
        },
        Case {
            name: "internal-node-header-flipped",
            image: edit(&|x| x[internal.0 as usize + 30] ^= 0x10),
            code: 4,
            says: &["corrupt", "node header"],
        },
        Case {
            name: "leaf-partition-flipped",
            image: edit(&|x| {
                let (off, len) = leaf.3[1];
                x[(leaf.0 + u64::from(off) + u64::from(len) / 2) as usize] ^= 0x10;
            }),
            code: 4,
            says: &["tree damaged", "partition"],
        },
        Case {
            name: "leaf-zeroed",
            image: edit(&|x| {
                let (start, end) = (leaf.0 as usize, leaf.0 as usize + 4096);
                x[start..end].fill(0);
            }),
            code: 4,
            says: &["corrupt"],
        },
    ]
}

#[test]
fn fsck_names_each_damage_with_its_exit_code() {
    let dir = Tmp::new("names");
    let mut failures = Vec::new();
    for case in cases() {
        let img = dir.0.join(format!("{}.img", case.name));
        std::fs::write(&img, &case.image).unwrap();
        let o = wodfs(&[Path::new("fsck"), &img]);
        let out = text(&o);
        let lower = out.to_lowercase();
        let missing: Vec<_> = case.says.iter().filter(|w| !lower.contains(*w)).collect();
        if o.status.code() != Some(case.code) || !missing.is_empty() || out.contains("panicked") {
            failures.push(format!(
                "{}: exit {:?} (want {}), missing {missing:?}:\n{out}",
                case.name,
                o.status.code(),
                case.code
            ));
        }
        // fsck is the tool that finds damage: it must not send the user
        // to itself.
        if out.contains("run wodfs fsck") {
            failures.push(format!("{}: fsck refers to itself:\n{out}", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn stat_refuses_damaged_images_in_one_line() {
    let dir = Tmp::new("stat");
    for case in cases().into_iter().filter(|c| c.code != 0) {
        let img = dir.0.join(format!("stat-{}.img", case.name));
        std::fs::write(&img, &case.image).unwrap();
        let o = wodfs(&[Path::new("stat"), &img]);
        let out = text(&o);
        assert!(!out.contains("panicked"), "{}: {out}", case.name);
        // Damage below the root may only show when a node is read, which
        // `stat` need not do; damage it meets must be an error.
        if !o.status.success() {
            assert_eq!(out.trim().lines().count(), 1, "{}: {out}", case.name);
        }
    }
}

#[test]
fn fsck_of_something_that_is_no_image_is_an_operational_error() {
    let dir = Tmp::new("noimage");
    // A directory cannot be checked at all: fsck(8)'s "operational error".
    let o = wodfs(&[Path::new("fsck"), &dir.0]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
    assert!(text(&o).contains("directory"), "{}", text(&o));
    let o = wodfs(&[Path::new("fsck"), &dir.0.join("missing")]);
    assert_eq!(o.status.code(), Some(8), "{}", text(&o));
}
