//! Tight loops for the benchmark harness (bench/run.py), where a Python
//! loop would cost as much as the file system call it measures. Each
//! subcommand prints one JSON object on stdout; tokubench also prints
//! progress lines `progress <seconds> <files>` on stderr.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

const USAGE: &str = "usage:
  fsbench seqwrite FILE BYTES BLOCK_BYTES          write, then fsync
  fsbench randwrite FILE COUNT WRITE_BYTES SEED    pwrite at random offsets, one fsync
  fsbench tokubench DIR FILES FILE_BYTES FANOUT THREADS INTERVAL_MS
  fsbench tablefs-create DIR COUNT FILE_BYTES
  fsbench tablefs-query DIR COUNT OPS FILE_BYTES SEED";

/// xorshift64*: deterministic, dependency-free, plenty for offsets.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next() % bound
        }
    }
}

/// Non-zero, non-repeating-looking bytes, so no layer can skip zeros.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| (rng.next() >> 32) as u8 | 1).collect()
}

fn parse<T: std::str::FromStr>(args: &[String], index: usize) -> io::Result<T> {
    args.get(index)
        .and_then(|arg| arg.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, USAGE))
}

fn seqwrite(file: &Path, bytes: u64, block: usize) -> io::Result<String> {
    let start = Instant::now();
    let mut out = File::create(file)?;
    let buf = pattern(block, 1);
    let mut left = bytes;
    while left > 0 {
        let take = left.min(block as u64) as usize;
        out.write_all(&buf[..take])?;
        left -= take as u64;
    }
    out.sync_all()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(format!("{{\"bytes\": {bytes}, \"seconds\": {seconds}}}"))
}

fn randwrite(file: &Path, count: u64, write_bytes: usize, seed: u64) -> io::Result<String> {
    let start = Instant::now();
    let out = OpenOptions::new().read(true).write(true).open(file)?;
    let size = out.metadata()?.len();
    let mut rng = Rng::new(seed);
    let buf = pattern(write_bytes, seed);
    let span = size.saturating_sub(write_bytes as u64);
    for _ in 0..count {
        out.write_all_at(&buf, rng.below(span + 1))?;
    }
    out.sync_all()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(format!(
        "{{\"writes\": {count}, \"bytes\": {}, \"seconds\": {seconds}}}",
        count * write_bytes as u64
    ))
}

/// The directory of file `index` in a balanced tree: the base-`fanout`
/// digits of `index / fanout`, most significant first, `depth` levels.
fn toku_dir(root: &Path, index: u64, fanout: u64, depth: u32) -> PathBuf {
    let mut digits = Vec::with_capacity(depth as usize);
    let mut rest = index / fanout;
    for _ in 0..depth {
        digits.push(rest % fanout);
        rest /= fanout;
    }
    let mut dir = root.to_path_buf();
    for digit in digits.iter().rev() {
        dir.push(format!("d{digit}"));
    }
    dir
}

fn tokubench(
    root: &Path,
    files: u64,
    file_bytes: usize,
    fanout: u64,
    threads: u64,
    interval: Duration,
) -> io::Result<String> {
    // Enough directory levels that no directory holds more than `fanout`
    // files or subdirectories.
    let mut depth = 0u32;
    let mut capacity = fanout;
    while capacity < files {
        capacity = capacity.saturating_mul(fanout);
        depth += 1;
    }
    let done = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let reporter = {
        let done = Arc::clone(&done);
        let finished = Arc::clone(&finished);
        thread::spawn(move || {
            while !finished.load(Ordering::Relaxed) {
                thread::sleep(interval);
                eprintln!(
                    "progress {:.3} {}",
                    start.elapsed().as_secs_f64(),
                    done.load(Ordering::Relaxed)
                );
            }
        })
    };
    let per_thread = files.div_ceil(threads);
    let mut workers = Vec::new();
    for worker in 0..threads {
        let root = root.to_path_buf();
        let done = Arc::clone(&done);
        let first = worker * per_thread;
        let end = files.min(first + per_thread);
        workers.push(thread::spawn(move || -> io::Result<()> {
            let body = pattern(file_bytes, worker + 7);
            let mut current: Option<PathBuf> = None;
            for index in first..end {
                let dir = toku_dir(&root, index, fanout, depth);
                if current.as_ref() != Some(&dir) {
                    fs::create_dir_all(&dir)?;
                    current = Some(dir.clone());
                }
                let mut file = File::create(dir.join(format!("f{}", index % fanout)))?;
                file.write_all(&body)?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    let mut outcome = Ok(());
    for worker in workers {
        match worker.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => outcome = Err(error),
            Err(_) => outcome = Err(io::Error::other("worker panicked")),
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    finished.store(true, Ordering::Relaxed);
    let _ = reporter.join();
    outcome?;
    eprintln!("progress {seconds:.3} {files}");
    Ok(format!(
        "{{\"files\": {files}, \"depth\": {depth}, \"seconds\": {seconds}}}"
    ))
}

fn table_name(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("f{index:08}"))
}

fn tablefs_create(dir: &Path, count: u64, file_bytes: usize) -> io::Result<String> {
    let body = pattern(file_bytes, 3);
    let start = Instant::now();
    for index in 0..count {
        let mut file = File::create(table_name(dir, index))?;
        if !body.is_empty() {
            file.write_all(&body)?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(format!("{{\"ops\": {count}, \"seconds\": {seconds}}}"))
}

/// Random queries over the files: half reads (stat, or read the whole file
/// when files have contents), half writes (chmod or utime alternately, or
/// overwrite the whole file).
fn tablefs_query(
    dir: &Path,
    count: u64,
    ops: u64,
    file_bytes: usize,
    seed: u64,
) -> io::Result<String> {
    let mut rng = Rng::new(seed);
    let body = pattern(file_bytes, 5);
    let mut buf = vec![0u8; file_bytes];
    let start = Instant::now();
    let (mut reads, mut writes) = (0u64, 0u64);
    for op in 0..ops {
        let path = table_name(dir, rng.below(count));
        let write = rng.next() & 1 == 1;
        match (write, file_bytes) {
            (false, 0) => {
                fs::symlink_metadata(&path)?;
            }
            (false, _) => {
                File::open(&path)?.read_exact(&mut buf)?;
            }
            (true, 0) if op % 2 == 0 => {
                let mode = if rng.next() & 1 == 1 { 0o644 } else { 0o600 };
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
            }
            (true, 0) => {
                File::options()
                    .write(true)
                    .open(&path)?
                    .set_modified(SystemTime::now())?;
            }
            (true, _) => {
                OpenOptions::new()
                    .write(true)
                    .open(&path)?
                    .write_all_at(&body, 0)?;
            }
        }
        if write {
            writes += 1;
        } else {
            reads += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(format!(
        "{{\"ops\": {ops}, \"reads\": {reads}, \"writes\": {writes}, \"seconds\": {seconds}}}"
    ))
}

fn run(args: &[String]) -> io::Result<String> {
    let path = |index: usize| -> io::Result<PathBuf> {
        args.get(index)
            .map(PathBuf::from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, USAGE))
    };
    match args.first().map(String::as_str) {
        Some("seqwrite") => seqwrite(&path(1)?, parse(args, 2)?, parse(args, 3)?),
        Some("randwrite") => {
            randwrite(&path(1)?, parse(args, 2)?, parse(args, 3)?, parse(args, 4)?)
        }
        Some("tokubench") => tokubench(
            &path(1)?,
            parse(args, 2)?,
            parse(args, 3)?,
            parse(args, 4)?,
            parse(args, 5)?,
            Duration::from_millis(parse(args, 6)?),
        ),
        Some("tablefs-create") => tablefs_create(&path(1)?, parse(args, 2)?, parse(args, 3)?),
        Some("tablefs-query") => tablefs_query(
            &path(1)?,
            parse(args, 2)?,
            parse(args, 3)?,
            parse(args, 4)?,
            parse(args, 5)?,
        ),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, USAGE)),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("fsbench: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toku_dirs_hold_at_most_fanout_entries() {
        let root = Path::new("/r");
        assert_eq!(toku_dir(root, 0, 128, 2), Path::new("/r/d0/d0"));
        assert_eq!(toku_dir(root, 127, 128, 2), Path::new("/r/d0/d0"));
        assert_eq!(toku_dir(root, 128, 128, 2), Path::new("/r/d0/d1"));
        assert_eq!(toku_dir(root, 128 * 128, 128, 2), Path::new("/r/d1/d0"));
    }

    #[test]
    fn rng_stays_below_the_bound() {
        let mut rng = Rng::new(42);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
    }
}
