//! Our fsx: random operations on one file through the mount (pwrite,
//! pread, truncate, punch hole, zero range, fallocate, copy_file_range
//! within the file, mmap-free), checked against an in-memory model of the
//! file after every read and in full before and after an unmount and
//! remount every 1,500 operations.

mod common;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use common::{mkfs, mount, Scratch};

const FILE_BYTES_MAX: u64 = 3 << 20;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[allow(unsafe_code)]
fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor with integer arguments.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[allow(unsafe_code)]
fn copy_range(f: &File, from: u64, to: u64, len: u64) -> std::io::Result<u64> {
    let (mut a, mut b) = (from as i64, to as i64);
    // SAFETY: the offsets are locals that outlive the call; one valid fd.
    let r = unsafe {
        libc::copy_file_range(
            f.as_raw_fd(),
            &mut a,
            f.as_raw_fd(),
            &mut b,
            len as usize,
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r as u64)
}

fn check_all(f: &File, model: &[u8], step: usize) {
    assert_eq!(
        f.metadata().unwrap().len(),
        model.len() as u64,
        "size at step {step}"
    );
    let mut got = vec![0u8; model.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    if got != model {
        let at = got.iter().zip(model).position(|(a, b)| a != b).unwrap_or(0);
        panic!("contents differ at byte {at} after step {step}");
    }
}

#[test]
fn random_file_operations_match_the_model_across_remounts() {
    require_fuse!();
    let s = Scratch::new("fsx");
    mkfs(&s.image(), 1 << 30);
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let mut model: Vec<u8> = Vec::new();
    let mut m = mount(&s.image(), &s.mnt(), false);
    let path = m.mnt.join("fsx");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    for step in 0..9000 {
        if step > 0 && step % 1500 < 1 {
            check_all(&f, &model, step);
            drop(f);
            m.unmount();
            m = mount(&s.image(), &s.mnt(), false);
            f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            check_all(&f, &model, step);
        }
        let size = model.len() as u64;
        match rng.below(10) {
            0..=3 => {
                let off = rng.below(FILE_BYTES_MAX - 70_000);
                let cap = if rng.below(4) == 0 { 65_536 } else { 64 };
                let len = 1 + rng.below(cap) as usize;
                let byte = (rng.next() % 255 + 1) as u8;
                let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
                f.write_all_at(&data, off).unwrap();
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
            }
            4 | 5 => {
                let off = rng.below(size + 10);
                let len = rng.below(70_000) as usize;
                let mut buf = vec![0u8; len];
                let n = f.read_at(&mut buf, off).unwrap();
                let want =
                    &model[(off as usize).min(model.len())..(off as usize + len).min(model.len())];
                if &buf[..n] != want {
                    let at = buf.iter().zip(want).position(|(a, b)| a != b);
                    panic!("read at {off} len {len}: {n} bytes vs {} expected, first difference at {at:?}, step {step}", want.len());
                }
            }
            6 => {
                let len = rng.below(FILE_BYTES_MAX);
                f.set_len(len).unwrap();
                model.resize(len as usize, 0);
            }
            7 => {
                let off = rng.below(size + 1);
                let len = 1 + rng.below(100_000);
                fallocate(
                    &f,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    len,
                )
                .unwrap();
                let end = ((off + len) as usize).min(model.len());
                if (off as usize) < end {
                    model[off as usize..end].fill(0);
                }
            }
            8 => {
                let off = rng.below(size + 1);
                let len = 1 + rng.below(100_000);
                let keep = rng.below(2) == 0;
                let mode =
                    libc::FALLOC_FL_ZERO_RANGE | if keep { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
                fallocate(&f, mode, off, len).unwrap();
                let end = (off + len) as usize;
                if !keep && model.len() < end {
                    model.resize(end, 0);
                }
                let stop = end.min(model.len());
                if (off as usize) < stop {
                    model[off as usize..stop].fill(0);
                }
            }
            _ => {
                if size < 2 {
                    continue;
                }
                let from = rng.below(size);
                let room = (size - from).min(50_000);
                let len = 1 + rng.below(room);
                let to = rng.below(FILE_BYTES_MAX - 60_000);
                // Overlapping copies within one file are EINVAL.
                if to < from + len && from < to + len {
                    continue;
                }
                let n = copy_range(&f, from, to, len).unwrap();
                let chunk = model[from as usize..(from + n) as usize].to_vec();
                let end = (to + n) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[to as usize..end].copy_from_slice(&chunk);
            }
        }
    }
    check_all(&f, &model, 9000);
    drop(f);
    let fsck = m.fs.fsck().unwrap();
    assert!(fsck.errors.is_empty(), "{:?}", fsck.errors);
    m.unmount();
}
