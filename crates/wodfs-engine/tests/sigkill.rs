//! A check on the simulator's assumptions with a real process: a child
//! writes to an image file and syncs now and then, printing each
//! acknowledged prefix; the parent kills it with SIGKILL at a random moment,
//! reopens the image and applies the crash oracle (the store equals the
//! model after some prefix no shorter than the last acknowledged one).
//!
//! The child is this same test binary, re-executed with `WODFS_SIGKILL_CHILD`
//! set, running `child_workload`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{apply, Model, Rng};
use wodfs_device::FileDevice;
use wodfs_engine::{Config, Op, Tree};

/// How far past the last acknowledged prefix the parent searches: the
/// child syncs every eight operations on average.
const SEARCH_PAST_ACK: u64 = 50_000;

fn cfg() -> Config {
    Config {
        node_bytes: 64 << 10,
        partition_bytes: 8 << 10,
        fanout: 8,
        cache_bytes: 1 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    }
}

fn op(r: &mut Rng) -> Op {
    let k = format!("/f{:02}/{:05}", r.below(8), r.below(3000)).into_bytes();
    match r.below(10) {
        0..=5 => Op::Insert {
            key: k,
            value: vec![r.below(256) as u8; 10 + r.below(300) as usize],
        },
        6 => Op::Delete { key: k },
        7 | 8 => Op::Patch {
            key: k,
            offset: r.below(200) as u32,
            data: vec![r.below(256) as u8; 8],
        },
        _ => {
            let d = r.below(8);
            Op::DeleteRange {
                lo: format!("/f{d:02}/{:05}", r.below(1500)).into_bytes(),
                hi: format!("/f{d:02}/{:05}", 1500 + r.below(1500)).into_bytes(),
            }
        }
    }
}

/// The child: writes, syncs every few operations, prints "acked N" after
/// each sync returns. Runs only when re-executed by the parent.
#[test]
fn child_workload() {
    let Ok(path) = std::env::var("WODFS_SIGKILL_CHILD") else {
        return;
    };
    let seed: u64 = std::env::var("WODFS_SIGKILL_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let tree = Tree::create(
        Box::new(FileDevice::create(&path, 256 << 20).unwrap()),
        cfg(),
    )
    .unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(out, "created").unwrap();
    out.flush().unwrap();
    let mut r = Rng(seed);
    // Runs until the parent kills it.
    for i in 1.. {
        tree.write(&[op(&mut r)]).unwrap();
        if r.below(8) == 0 {
            tree.sync().unwrap();
            writeln!(out, "acked {i}").unwrap();
            out.flush().unwrap();
        }
        if i % 5000 == 0 {
            tree.checkpoint().unwrap();
        }
    }
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let runs: u64 = common::env_u64("WODFS_SIGKILL_RUNS", 8);
    let exe = std::env::current_exe().unwrap();
    for run in 0..runs {
        let seed = 1000 + run;
        let path =
            std::env::temp_dir().join(format!("wodfs-sigkill-{}-{run}.img", std::process::id()));
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "child_workload",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WODFS_SIGKILL_CHILD", &path)
            .env("WODFS_SIGKILL_SEED", seed.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the image to exist, then let the child run for a
        // seed-dependent while before the kill.
        let mut lines = Vec::new();
        loop {
            let l = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("child started");
            // libtest prints "test child_workload ... " without a newline.
            let created = l.ends_with("created");
            lines.push(l);
            if created {
                break;
            }
        }
        let mut r = Rng(seed);
        let run_for = Duration::from_millis(50 + r.below(1500));
        let start = Instant::now();
        while start.elapsed() < run_for {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(5)) {
                lines.push(l);
            }
        }
        // SIGKILL: no destructor, no flush, nothing.
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        let acked: u64 = lines
            .iter()
            .filter_map(|l| l.split("acked ").nth(1).and_then(|n| n.trim().parse().ok()))
            .max()
            .unwrap_or(0);
        let tree = Tree::open(
            Box::new(FileDevice::open(&path).unwrap()),
            cfg().cache_bytes,
        )
        .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        tree.verify().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let got: Model = tree.range(&[], None).map(|r| r.unwrap()).collect();
        // Replay the model to find a matching prefix >= acked.
        let mut r = Rng(seed);
        let mut model = Model::new();
        let mut matched = acked == 0 && got.is_empty();
        for i in 1..=acked + SEARCH_PAST_ACK {
            apply(&mut model, &op(&mut r));
            r.below(8);
            if i >= acked && model == got {
                matched = true;
                break;
            }
        }
        assert!(
            matched,
            "seed {seed}: recovered state is no prefix at or after acked op {acked}"
        );
        let _ = std::fs::remove_file(&path);
    }
}
