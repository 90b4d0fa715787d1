//! Fuzzing every decoder of on-disk bytes, a fixed number of iterations per
//! run, from a committed corpus (`tests/corpus/<decoder>/`) plus samples
//! taken from a freshly built image. Any input that panics is a bug: save
//! it into the corpus as a regression. `WODFS_FUZZ_ITERS` raises the count
//! for a long soak; `WODFS_WRITE_CORPUS=1` refreshes the seed files.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use wodfs_device::MemDevice;
use wodfs_engine::{fuzz, Config, Tree};

type Decoder = fn(&[u8]) -> bool;

const DECODERS: [(&str, Decoder); 4] = [
    ("superblock", fuzz::superblock),
    ("block_table", fuzz::block_table),
    ("node_header", fuzz::node_header),
    ("partition", fuzz::partition),
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A small image with leaves, internal nodes, buffered messages of every
/// kind, compression: every structure the decoders see.
fn sample_image() -> Vec<u8> {
    let dev = Arc::new(MemDevice::new(2 << 20));
    let cfg = Config {
        compression: wodfs_engine::Compression::Lz4,
        ..Config::tiny()
    };
    let tree = Tree::create(Box::new(dev.clone()), cfg).unwrap();
    for i in 0..400u32 {
        tree.insert(format!("/dir/{:04}", i * 7 % 400).as_bytes(), &[b'v'; 30])
            .unwrap();
    }
    for i in 0..40u32 {
        tree.patch(format!("/dir/{:04}", i * 3).as_bytes(), 5, b"pp")
            .unwrap();
        tree.truncate_value(format!("/dir/{:04}", i * 5).as_bytes(), 9)
            .unwrap();
        tree.delete(format!("/dir/{:04}", i * 11).as_bytes())
            .unwrap();
    }
    tree.delete_range(b"/dir/0100", b"/dir/0150").unwrap();
    tree.close().unwrap();
    dev.to_bytes()
}

fn corpus_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name)
}

fn mutate(r: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut d = input.to_vec();
    for _ in 0..1 + r.below(4) {
        match r.below(6) {
            0 if !d.is_empty() => {
                let i = r.below(d.len());
                d[i] ^= 1 << r.below(8);
            }
            1 if !d.is_empty() => {
                let i = r.below(d.len());
                d[i] = [0, 1, 0x7f, 0x80, 0xff][r.below(5)];
            }
            2 => d.truncate(r.below(d.len() + 1)),
            3 => {
                let i = r.below(d.len() + 1);
                d.insert(i, r.next() as u8);
            }
            4 if d.len() > 4 => {
                // Overwrite a little-endian word with a large value.
                let i = r.below(d.len() - 4);
                d[i..i + 4].copy_from_slice(&(u32::MAX - r.below(3) as u32).to_le_bytes());
            }
            _ if !d.is_empty() => {
                let i = r.below(d.len());
                d.remove(i);
            }
            _ => {}
        }
    }
    d
}

#[test]
fn decoders_never_panic_on_mutated_input() {
    let iters = common::env_u64("WODFS_FUZZ_ITERS", 20_000) as usize;
    let samples = fuzz::image_samples(&sample_image());
    let write = std::env::var("WODFS_WRITE_CORPUS").is_ok();
    for (name, decode) in DECODERS {
        let mut seeds: Vec<Vec<u8>> = samples
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
            .collect();
        assert!(!seeds.is_empty(), "no samples for {name}");
        for s in &seeds {
            assert!(decode(s), "{name}: a healthy sample does not decode");
        }
        let dir = corpus_dir(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds.iter().take(4).enumerate() {
                std::fs::write(dir.join(format!("seed-{i}.bin")), s).unwrap();
            }
        }
        let committed: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| std::fs::read(e.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            !committed.is_empty(),
            "no committed corpus for {name} in {dir:?}"
        );
        seeds.extend(committed);
        let mut r = Rng(0x5eed ^ name.len() as u64);
        for i in 0..iters {
            let base = &seeds[i % seeds.len()];
            let input = mutate(&mut r, base);
            let _ = std::panic::catch_unwind(|| decode(&input)).unwrap_or_else(|_| {
                panic!("{name} decoder panicked on mutation {i}; input: {input:?}")
            });
        }
    }
}
