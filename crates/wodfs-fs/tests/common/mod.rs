//! Shared test harness: file-system operations by path, applied both to a
//! real [`Fs`] and to the namespace model, and extraction of a model from
//! a file system for comparison.
//!
//! The harness plays the kernel's part for the core: it walks ancestors
//! (ENOENT / ENOTDIR / ELOOP as the model defines), refuses data
//! operations on symlinks (the model never follows them), and turns
//! results into errno codes.

#![allow(dead_code)]

use std::sync::Arc;

use proptest::prelude::*;
use wodfs_device::{Device, MemDevice};
use wodfs_engine::Config;
use wodfs_fs::{
    Fs, FsOptions, FsPath, HeldBytes, KillPriv, Kind, Loc, NewNode, RenameMode, SetAttr, XattrSet,
};
use wodfs_schema::model::{self, Namespace, XattrMode};

/// A small engine configuration, so short tests still build a tree of
/// several levels.
pub fn small_config() -> Config {
    Config {
        node_bytes: 64 << 10,
        partition_bytes: 8 << 10,
        cache_bytes: 4 << 20,
        log_bytes: 1 << 20,
        ..Config::default()
    }
}

/// A fresh file system on a shared in-memory device.
pub fn new_fs(bytes: u64) -> (Arc<MemDevice>, Fs) {
    let dev = Arc::new(MemDevice::new(bytes));
    let fs = Fs::mkfs(Box::new(Arc::clone(&dev)), small_config(), 0, 0).expect("mkfs");
    (dev, fs)
}

/// Reopens the file system on `dev` (after a checkpoint by the caller).
pub fn reopen(dev: &Arc<dyn Device>) -> Fs {
    Fs::open(Box::new(Arc::clone(dev)), 4 << 20, FsOptions::default()).expect("reopen")
}

/// One operation of a test sequence.
#[derive(Debug, Clone)]
pub enum FsOp {
    Create(String),
    Mkdir(String),
    Symlink(String, String),
    Link(String, String),
    Unlink(String),
    Rmdir(String),
    Write(String, u64, Vec<u8>),
    Truncate(String, u64),
    Rename(String, String, u8),
    /// A write and then a rename of the written file, as the FUSE adapter
    /// hands them over when it held the write back: in one call
    /// ([`Fs::rename_carrying`]) where the file is a regular file at its
    /// path, one after the other otherwise.
    WriteRename(String, u64, Vec<u8>, String, u8),
    /// A write and then the creation of a file (or, if the flag is set, a
    /// directory), as the FUSE adapter hands them over when it held the
    /// write back: in one call ([`Fs::make_carrying`]) where the written
    /// object is a file, one after the other otherwise.
    WriteCreate(String, u64, Vec<u8>, String, bool),
    SetXattr(String, String, Vec<u8>, u8),
    RemoveXattr(String, String),
    /// Checkpoint and reopen.
    Reopen,
}

fn p(s: &str) -> FsPath {
    FsPath::parse(s).expect("valid test path")
}

fn split(path: &FsPath) -> (FsPath, Vec<u8>) {
    (
        path.parent().unwrap_or_else(FsPath::root),
        path.file_name().unwrap_or_default().to_vec(),
    )
}

fn code(e: wodfs_fs::FsError) -> i32 {
    e.errno()
}

/// Walks the ancestors of `path` as the kernel would.
fn walk(fs: &Fs, path: &FsPath) -> Result<(), i32> {
    let mut cur = FsPath::root();
    let names: Vec<&[u8]> = path.names().collect();
    for name in names.iter().take(names.len().saturating_sub(1)) {
        cur = cur.join(name).map_err(|e| code(e.into()))?;
        match fs.try_resolve(&cur).map_err(code)? {
            None => return Err(libc::ENOENT),
            Some((a, _)) if a.kind == Kind::Symlink => return Err(libc::ELOOP),
            Some((a, _)) if a.kind != Kind::Dir => return Err(libc::ENOTDIR),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Resolves a path for a data operation (symlinks are ELOOP).
fn data_loc(fs: &Fs, path: &FsPath) -> Result<Loc, i32> {
    walk(fs, path)?;
    let (a, loc) = fs.resolve(path).map_err(code)?;
    match a.kind {
        Kind::Symlink => Err(libc::ELOOP),
        Kind::Dir => Err(libc::EISDIR),
        _ => Ok(loc),
    }
}

/// Applies `op` to the file system; `Err` holds an errno.
pub fn apply_fs(fs: &mut Fs, dev: &Arc<dyn Device>, op: &FsOp) -> Result<(), i32> {
    match op {
        FsOp::Create(s) | FsOp::Mkdir(s) => {
            let path = p(s);
            walk(fs, &path)?;
            let kind = if matches!(op, FsOp::Mkdir(_)) {
                Kind::Dir
            } else {
                Kind::File
            };
            let (d, n) = split(&path);
            if path.is_root() {
                return Err(libc::EEXIST);
            }
            fs.make(&d, &n, NewNode::new(kind, 0o755))
                .map(|_| ())
                .map_err(code)
        }
        FsOp::Symlink(target, s) => {
            let path = p(s);
            walk(fs, &path)?;
            let (d, n) = split(&path);
            let mut node = NewNode::new(Kind::Symlink, 0o777);
            node.target = target.as_bytes().to_vec();
            fs.make(&d, &n, node).map(|_| ()).map_err(code)
        }
        FsOp::Link(old, new) => {
            let (old, new) = (p(old), p(new));
            walk(fs, &old)?;
            let (_, loc) = fs.resolve(&old).map_err(code)?;
            walk(fs, &new)?;
            let (d, n) = split(&new);
            if new.is_root() {
                return Err(libc::EEXIST);
            }
            fs.link(&loc, &d, &n).map(|_| ()).map_err(code)
        }
        FsOp::Unlink(s) | FsOp::Rmdir(s) => {
            let path = p(s);
            walk(fs, &path)?;
            if path.is_root() {
                return Err(if matches!(op, FsOp::Rmdir(_)) {
                    libc::EBUSY
                } else {
                    libc::EISDIR
                });
            }
            let (d, n) = split(&path);
            let r = if matches!(op, FsOp::Rmdir(_)) {
                fs.rmdir(&d, &n)
            } else {
                fs.unlink(&d, &n)
            };
            r.map(|_| ()).map_err(code)
        }
        FsOp::Write(s, off, data) => {
            let loc = data_loc(fs, &p(s))?;
            fs.write(&loc, *off, data, KillPriv::Keep)
                .map(|_| ())
                .map_err(code)
        }
        FsOp::Truncate(s, len) => {
            let loc = data_loc(fs, &p(s))?;
            let set = SetAttr {
                size: Some(*len),
                ..SetAttr::default()
            };
            fs.setattr(&loc, &set).map(|_| ()).map_err(code)
        }
        FsOp::WriteRename(a, off, data, b, m) => {
            let (pa, pb) = (p(a), p(b));
            let held = matches!(data_loc(fs, &pa), Ok(Loc::Path(at)) if at == pa);
            let renamable = walk(fs, &pb).and_then(|()| match pb.is_root() {
                true => Err(libc::EBUSY),
                false => Ok(()),
            });
            if !held || data.is_empty() || renamable.is_err() {
                let w = apply_fs(fs, dev, &FsOp::Write(a.clone(), *off, data.clone()));
                let r = apply_fs(fs, dev, &FsOp::Rename(a.clone(), b.clone(), *m));
                return w.and(r);
            }
            let ((ad, an), (bd, bn)) = (split(&pa), split(&pb));
            let held = HeldBytes {
                offset: *off,
                data,
                kill_priv: KillPriv::Keep,
                attr: None,
            };
            let done = fs.rename_carrying(&ad, &an, &bd, &bn, rename_mode(*m), held);
            done.written
                .map_err(code)
                .and(done.done.map(|_| ()).map_err(code))
        }
        FsOp::WriteCreate(a, off, data, b, dir) => {
            let (pa, pb) = (p(a), p(b));
            let at = data_loc(fs, &pa);
            let creatable = walk(fs, &pb).is_ok() && !pb.is_root();
            let (Ok(loc), false, true) = (at, data.is_empty(), creatable) else {
                let w = apply_fs(fs, dev, &FsOp::Write(a.clone(), *off, data.clone()));
                let c = apply_fs(fs, dev, &create_op(b, *dir));
                return w.and(c);
            };
            let (d, n) = split(&pb);
            let kind = if *dir { Kind::Dir } else { Kind::File };
            let held = HeldBytes::new(*off, data, KillPriv::Keep);
            let done = fs.make_carrying(&d, &n, NewNode::new(kind, 0o755), &loc, held);
            done.written
                .map_err(code)
                .and(done.done.map(|_| ()).map_err(code))
        }
        FsOp::Rename(a, b, m) => {
            let (a, b) = (p(a), p(b));
            walk(fs, &a)?;
            walk(fs, &b)?;
            if a.is_root() {
                return Err(libc::EBUSY);
            }
            let mode = rename_mode(*m);
            if b.is_root() {
                return Err(if mode == RenameMode::NoReplace {
                    libc::EEXIST
                } else {
                    libc::EBUSY
                });
            }
            let ((ad, an), (bd, bn)) = (split(&a), split(&b));
            fs.rename(&ad, &an, &bd, &bn, mode)
                .map(|_| ())
                .map_err(code)
        }
        FsOp::SetXattr(s, name, value, m) => {
            let path = p(s);
            walk(fs, &path)?;
            let (_, loc) = fs.resolve(&path).map_err(code)?;
            let how = match m % 3 {
                0 => XattrSet::Upsert,
                1 => XattrSet::Create,
                _ => XattrSet::Replace,
            };
            fs.set_xattr(&loc, name.as_bytes(), value, how)
                .map_err(code)
        }
        FsOp::RemoveXattr(s, name) => {
            let path = p(s);
            walk(fs, &path)?;
            let (_, loc) = fs.resolve(&path).map_err(code)?;
            fs.remove_xattr(&loc, name.as_bytes()).map_err(code)
        }
        FsOp::Reopen => {
            fs.checkpoint().map_err(code)?;
            *fs = reopen(dev);
            Ok(())
        }
    }
}

fn rename_mode(m: u8) -> RenameMode {
    match m % 3 {
        0 => RenameMode::Replace,
        1 => RenameMode::NoReplace,
        _ => RenameMode::Exchange,
    }
}

/// Applies `op` to the model.
pub fn apply_model(ns: &mut Namespace, op: &FsOp) -> Result<(), i32> {
    let r = match op {
        FsOp::Create(s) => ns.create(s),
        FsOp::Mkdir(s) => ns.mkdir(s),
        FsOp::Symlink(t, s) => ns.symlink(t, s),
        FsOp::Link(a, b) => ns.link(a, b),
        FsOp::Unlink(s) => ns.unlink(s),
        FsOp::Rmdir(s) => ns.rmdir(s),
        FsOp::Write(s, off, d) => ns.write(s, *off, d),
        FsOp::Truncate(s, len) => ns.truncate(s, *len),
        FsOp::Rename(a, b, m) => ns.rename(
            a,
            b,
            match rename_mode(*m) {
                RenameMode::Replace => model::RenameMode::Replace,
                RenameMode::NoReplace => model::RenameMode::NoReplace,
                RenameMode::Exchange => model::RenameMode::Exchange,
            },
        ),
        FsOp::SetXattr(s, n, v, m) => ns.set_xattr(
            s,
            n.as_bytes(),
            v,
            match m % 3 {
                0 => XattrMode::Upsert,
                1 => XattrMode::Create,
                _ => XattrMode::Replace,
            },
        ),
        FsOp::RemoveXattr(s, n) => ns.remove_xattr(s, n.as_bytes()),
        FsOp::WriteRename(a, off, d, b, m) => {
            let w = apply_model(ns, &FsOp::Write(a.clone(), *off, d.clone()));
            let r = apply_model(ns, &FsOp::Rename(a.clone(), b.clone(), *m));
            return w.and(r);
        }
        FsOp::WriteCreate(a, off, d, b, dir) => {
            let w = apply_model(ns, &FsOp::Write(a.clone(), *off, d.clone()));
            let c = apply_model(ns, &create_op(b, *dir));
            return w.and(c);
        }
        FsOp::Reopen => Ok(()),
    };
    r.map_err(|e| e.code())
}

/// The creation half of [`FsOp::WriteCreate`].
fn create_op(path: &str, dir: bool) -> FsOp {
    match dir {
        true => FsOp::Mkdir(path.to_string()),
        false => FsOp::Create(path.to_string()),
    }
}

/// Rebuilds a model namespace from what the file system shows.
pub fn extract(fs: &Fs) -> Namespace {
    let mut ns = Namespace::new();
    let mut first_path: std::collections::HashMap<u64, FsPath> = Default::default();
    let mut stack = vec![FsPath::root()];
    while let Some(dir) = stack.pop() {
        for e in fs.readdir(&dir, None, usize::MAX).expect("readdir") {
            let path = dir.join(&e.name).expect("path");
            if let Some(first) = first_path.get(&e.attr.ino) {
                ns.link(first.as_bytes(), path.as_bytes())
                    .expect("model link");
                continue;
            }
            first_path.insert(e.attr.ino, path.clone());
            match e.attr.kind {
                Kind::Dir => {
                    ns.mkdir(path.as_bytes()).expect("model mkdir");
                    stack.push(path.clone());
                }
                Kind::Symlink => ns
                    .symlink(&e.attr.target, path.as_bytes())
                    .expect("model symlink"),
                _ => {
                    ns.create(path.as_bytes()).expect("model create");
                    let data = fs.read(&e.loc, 0, e.attr.size as usize).expect("read");
                    assert_eq!(data.len() as u64, e.attr.size, "{path}: short read");
                    ns.write(path.as_bytes(), 0, &data).expect("model write");
                    ns.truncate(path.as_bytes(), e.attr.size)
                        .expect("model truncate");
                }
            }
            for name in fs.list_xattr(&e.loc).expect("listxattr") {
                let v = fs.get_xattr(&e.loc, &name).expect("getxattr");
                ns.set_xattr(path.as_bytes(), &name, &v, XattrMode::Upsert)
                    .expect("model setxattr");
            }
        }
    }
    for name in fs
        .list_xattr(&Loc::Path(FsPath::root()))
        .expect("root xattrs")
    {
        let v = fs
            .get_xattr(&Loc::Path(FsPath::root()), &name)
            .expect("getxattr");
        ns.set_xattr("/", &name, &v, XattrMode::Upsert)
            .expect("model setxattr");
    }
    ns
}

/// Paths over a tiny name pool, so operations collide often.
pub fn path_strategy() -> impl Strategy<Value = String> {
    let name = || prop_oneof![Just("a"), Just("b"), Just("c\u{1}"), Just("d")];
    // Mostly shallow paths, so most parents exist and operations succeed.
    let names = prop_oneof![
        5 => proptest::collection::vec(name(), 1..2),
        4 => proptest::collection::vec(name(), 2..3),
        2 => proptest::collection::vec(name(), 3..4),
    ];
    names.prop_map(|names| format!("/{}", names.join("/")))
}

/// One random operation.
pub fn op_strategy() -> impl Strategy<Value = FsOp> {
    let data = proptest::collection::vec(any::<u8>(), 0..9000);
    let off = prop_oneof![0u64..10, 4090u64..4100, 0u64..20000];
    prop_oneof![
        3 => path_strategy().prop_map(FsOp::Create),
        3 => path_strategy().prop_map(FsOp::Mkdir),
        1 => (path_strategy(), path_strategy()).prop_map(|(t, s)| FsOp::Symlink(t, s)),
        2 => (path_strategy(), path_strategy()).prop_map(|(a, b)| FsOp::Link(a, b)),
        2 => path_strategy().prop_map(FsOp::Unlink),
        2 => path_strategy().prop_map(FsOp::Rmdir),
        4 => (path_strategy(), off.clone(), data.clone()).prop_map(|(s, o, d)| FsOp::Write(s, o, d)),
        2 => (path_strategy(), off.clone()).prop_map(|(s, l)| FsOp::Truncate(s, l)),
        3 => (path_strategy(), path_strategy(), 0u8..3).prop_map(|(a, b, m)| FsOp::Rename(a, b, m)),
        2 => (path_strategy(), off.clone(), data.clone(), path_strategy(), 0u8..3)
            .prop_map(|(a, o, d, b, m)| FsOp::WriteRename(a, o, d, b, m)),
        2 => (path_strategy(), off, data, path_strategy(), any::<bool>())
            .prop_map(|(a, o, d, b, dir)| FsOp::WriteCreate(a, o, d, b, dir)),
        1 => (path_strategy(), prop_oneof![Just("user.x"), Just("user.y")], proptest::collection::vec(any::<u8>(), 0..20), 0u8..3)
            .prop_map(|(s, n, v, m)| FsOp::SetXattr(s, n.to_string(), v, m)),
        1 => (path_strategy(), prop_oneof![Just("user.x"), Just("user.y")]).prop_map(|(s, n)| FsOp::RemoveXattr(s, n.to_string())),
        1 => Just(FsOp::Reopen),
    ]
}

/// The root directory's path.
pub fn root() -> wodfs_fs::FsPath {
    wodfs_fs::FsPath::root()
}

/// Creates a regular file (mode 0644) in the root and returns where it is.
pub fn file(fs: &wodfs_fs::Fs, name: &str) -> wodfs_fs::Loc {
    use wodfs_fs::{Kind, NewNode};
    fs.make(&root(), name.as_bytes(), NewNode::new(Kind::File, 0o644))
        .unwrap();
    fs.lookup(&root(), name.as_bytes()).unwrap().1
}
