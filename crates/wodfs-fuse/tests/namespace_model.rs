//! The mounted file system against the namespace model: random sequences
//! of create, mkdir, link, unlink, rmdir, write, truncate, rename (all
//! three modes) and xattr operations, issued with real system calls, give
//! the errno the model gives; after each sequence (and across a remount)
//! the tree equals the model. Symlinks are left out: the kernel follows
//! them where the model, by design, does not.

mod common;

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::{mkfs, mount, Scratch};
use proptest::prelude::*;
use wodfs_schema::model::{Namespace, RenameMode, XattrMode};

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Mkdir(String),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Write(String, u64, Vec<u8>),
    Truncate(String, u64),
    Rename(String, String, u8),
    SetXattr(String, Vec<u8>),
    RemoveXattr(String),
    Remount,
}

fn path() -> impl Strategy<Value = String> {
    let name = || prop_oneof![Just("a"), Just("b"), Just("c")];
    prop_oneof![
        5 => proptest::collection::vec(name(), 1..2),
        4 => proptest::collection::vec(name(), 2..3),
        2 => proptest::collection::vec(name(), 3..4),
    ]
    .prop_map(|n| format!("/{}", n.join("/")))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => path().prop_map(Op::Create),
        3 => path().prop_map(Op::Mkdir),
        2 => (path(), path()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => path().prop_map(Op::Unlink),
        2 => path().prop_map(Op::Rmdir),
        3 => (path(), 0u64..9000, proptest::collection::vec(any::<u8>(), 1..6000))
            .prop_map(|(p, o, d)| Op::Write(p, o, d)),
        2 => (path(), 0u64..12000).prop_map(|(p, l)| Op::Truncate(p, l)),
        3 => (path(), path(), 0u8..3).prop_map(|(a, b, m)| Op::Rename(a, b, m)),
        1 => (path(), proptest::collection::vec(any::<u8>(), 0..16)).prop_map(|(p, v)| Op::SetXattr(p, v)),
        1 => path().prop_map(Op::RemoveXattr),
        1 => Just(Op::Remount),
    ]
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn last_errno<T>(r: i32, ok: T) -> Result<T, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(ok)
    }
}

#[allow(unsafe_code)]
fn renameat2(a: &Path, b: &Path, flags: u32) -> Result<(), i32> {
    let (a, b) = (c(a), c(b));
    // SAFETY: NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    last_errno(r, ())
}

#[allow(unsafe_code)]
fn lsetxattr(p: &Path, v: &[u8]) -> Result<(), i32> {
    let (p, n) = (c(p), CString::new("user.k").unwrap());
    // SAFETY: valid C strings and a value slice that outlive the call.
    let r = unsafe { libc::lsetxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    last_errno(r, ())
}

#[allow(unsafe_code)]
fn lremovexattr(p: &Path) -> Result<(), i32> {
    let (p, n) = (c(p), CString::new("user.k").unwrap());
    // SAFETY: valid C strings that outlive the call.
    let r = unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) };
    last_errno(r, ())
}

#[allow(unsafe_code)]
fn lgetxattr(p: &Path) -> Option<Vec<u8>> {
    let (p, n) = (c(p), CString::new("user.k").unwrap());
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings; the buffer length is passed.
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| {
        buf.truncate(r as usize);
        buf
    })
}

fn io<T>(r: std::io::Result<T>) -> Result<(), i32> {
    r.map(|_| ()).map_err(|e| e.raw_os_error().unwrap_or(0))
}

fn apply_real(root: &Path, op: &Op) -> Result<(), i32> {
    let at = |p: &str| root.join(&p[1..]);
    match op {
        Op::Create(p) => io(std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(at(p))),
        Op::Mkdir(p) => io(std::fs::create_dir(at(p))),
        Op::Link(a, b) => io(std::fs::hard_link(at(a), at(b))),
        Op::Unlink(p) => io(std::fs::remove_file(at(p))),
        Op::Rmdir(p) => io(std::fs::remove_dir(at(p))),
        Op::Write(p, off, d) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(at(p))
                .map_err(|e| e.raw_os_error().unwrap_or(0))?;
            io(f.write_all_at(d, *off))
        }
        Op::Truncate(p, len) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(at(p))
                .map_err(|e| e.raw_os_error().unwrap_or(0))?;
            io(f.set_len(*len))
        }
        Op::Rename(a, b, m) => {
            let flags = [0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE][*m as usize];
            renameat2(&at(a), &at(b), flags)
        }
        Op::SetXattr(p, v) => lsetxattr(&at(p), v),
        Op::RemoveXattr(p) => lremovexattr(&at(p)),
        Op::Remount => Ok(()),
    }
}

fn apply_model(ns: &mut Namespace, op: &Op) -> Result<(), i32> {
    let r = match op {
        Op::Create(p) => ns.create(p),
        Op::Mkdir(p) => ns.mkdir(p),
        Op::Link(a, b) => ns.link(a, b),
        Op::Unlink(p) => ns.unlink(p),
        Op::Rmdir(p) => ns.rmdir(p),
        Op::Write(p, o, d) => ns.write(p, *o, d),
        Op::Truncate(p, l) => ns.truncate(p, *l),
        Op::Rename(a, b, m) => ns.rename(
            a,
            b,
            [
                RenameMode::Replace,
                RenameMode::NoReplace,
                RenameMode::Exchange,
            ][*m as usize],
        ),
        Op::SetXattr(p, v) => ns.set_xattr(p, b"user.k", v, XattrMode::Upsert),
        Op::RemoveXattr(p) => ns.remove_xattr(p, b"user.k"),
        Op::Remount => Ok(()),
    };
    r.map_err(|e| e.code())
}

/// The model of what the mounted tree shows.
fn extract(root: &Path) -> Namespace {
    let mut ns = Namespace::new();
    let mut seen: HashMap<u64, String> = HashMap::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(dir.trim_start_matches('/')))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let p = format!("{dir}/{}", name.to_string_lossy());
            let real = root.join(&p[1..]);
            let md = std::fs::symlink_metadata(&real).unwrap();
            if let Some(first) = seen.get(&md.ino()) {
                ns.link(first, &p).unwrap();
                continue;
            }
            seen.insert(md.ino(), p.clone());
            if md.is_dir() {
                ns.mkdir(&p).unwrap();
                stack.push(p.clone());
            } else {
                ns.create(&p).unwrap();
                ns.write(&p, 0, &std::fs::read(&real).unwrap()).unwrap();
            }
            if let Some(v) = lgetxattr(&real) {
                ns.set_xattr(&p, b"user.k", &v, XattrMode::Upsert).unwrap();
            }
        }
    }
    ns
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn mounted_namespace_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        if let Some(reason) = common::skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return Ok(());
        }
        let s = Scratch::new("nsmodel");
        mkfs(&s.image(), 256 << 20);
        let mut m = mount(&s.image(), &s.mnt(), false);
        let mut ns = Namespace::new();
        for (i, op) in ops.iter().enumerate() {
            if let Op::Remount = op {
                m.unmount();
                m = mount(&s.image(), &s.mnt(), false);
                continue;
            }
            let want = apply_model(&mut ns, op);
            let got = apply_real(&m.mnt, op);
            prop_assert_eq!(got, want, "op {} {:?}", i, op);
        }
        let seen = extract(&m.mnt);
        prop_assert!(seen == ns, "differs: {:?}", seen.first_difference(&ns));
        m.unmount();
        let m = mount(&s.image(), &s.mnt(), false);
        let seen = extract(&m.mnt);
        prop_assert!(seen == ns, "after remount: {:?}", seen.first_difference(&ns));
        let fsck = m.fs.fsck().unwrap();
        prop_assert!(fsck.errors.is_empty(), "{:?}", fsck.errors);
        m.unmount();
    }
}
