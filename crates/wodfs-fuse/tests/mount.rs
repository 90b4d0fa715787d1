//! Mounted file-system tests driven with `std::fs`: every kind of object,
//! links, renames, xattrs, holes, sync ioctl, and a remount comparison.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

use common::{mkfs, mount, sh_in, Scratch};

/// Everything a user can see of a tree, as text, in a stable order.
fn describe(root: &Path) -> String {
    sh_in(
        root,
        "find . -printf '%p %y %m %s %n %l\\n' | LC_ALL=C sort; \
         find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r md5sum; \
         python3 -c 'import os,sys\nfor d,ds,fs in sorted(os.walk(\".\")):\n for n in sorted(ds+fs):\n  p=os.path.join(d,n)\n  for x in sorted(os.listxattr(p, follow_symlinks=False)): print(p,x,os.getxattr(p,x,follow_symlinks=False))'",
    )
}

#[test]
fn objects_survive_remount_and_match_what_was_written() {
    require_fuse!();
    let s = Scratch::new("objects");
    mkfs(&s.image(), 1 << 30);
    let m = mount(&s.image(), &s.mnt(), true);
    let r = &m.mnt;
    fs::create_dir_all(r.join("a/b/c")).unwrap();
    fs::write(r.join("a/b/c/f"), b"hello").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(r.join("a/big"), &big).unwrap();
    symlink("b/c/f", r.join("a/link")).unwrap();
    fs::hard_link(r.join("a/b/c/f"), r.join("hard")).unwrap();
    fs::set_permissions(r.join("hard"), fs::Permissions::from_mode(0o4750)).unwrap();
    m.sh("mkfifo fifo && mknod cdev c 1 3 && python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"sock\")'");
    m.sh("python3 -c 'import os; os.setxattr(\"a/big\", \"user.k\", b\"v\"); os.setxattr(\"a\", \"user.dir\", b\"d\")'");
    fs::rename(r.join("a/b"), r.join("moved")).unwrap();
    // A sparse file with a hole in the middle.
    let sparse = fs::File::create(r.join("sparse")).unwrap();
    sparse.write_all_at(b"start", 0).unwrap();
    sparse.write_all_at(b"end", 10 << 20).unwrap();
    drop(sparse);
    // Partial overwrite and truncate.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(r.join("a/big"))
        .unwrap();
    f.seek(SeekFrom::Start(4000)).unwrap();
    f.write_all(b"XYZ").unwrap();
    f.set_len(2_500_001).unwrap();
    drop(f);
    assert_eq!(fs::read(r.join("moved/c/f")).unwrap(), b"hello");
    assert_eq!(fs::read(r.join("hard")).unwrap(), b"hello");
    assert_eq!(fs::metadata(r.join("hard")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(r.join("hard")).unwrap().ino(),
        fs::metadata(r.join("moved/c/f")).unwrap().ino()
    );
    assert_eq!(
        fs::read_link(r.join("a/link")).unwrap().to_str(),
        Some("b/c/f")
    );
    let before = describe(r);
    let ino_before = fs::metadata(r.join("moved/c/f")).unwrap().ino();
    m.unmount();

    let m = mount(&s.image(), &s.mnt(), false);
    let after = describe(&m.mnt);
    assert_eq!(before, after, "remount changed what the tree shows");
    assert_eq!(
        fs::metadata(m.mnt.join("moved/c/f")).unwrap().ino(),
        ino_before,
        "inode numbers are stable"
    );
    let mut got = Vec::new();
    fs::File::open(m.mnt.join("a/big"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    let mut want = big[..2_500_001].to_vec();
    want[4000..4003].copy_from_slice(b"XYZ");
    assert_eq!(got, want);
    assert_eq!(
        m.sh("stat -c %s sparse").trim(),
        (10 * 1024 * 1024 + 3).to_string()
    );
    // The hole is a hole for SEEK_DATA/SEEK_HOLE (python's os.lseek).
    let holes = m.sh("python3 -c 'import os; f=os.open(\"sparse\", os.O_RDONLY); print(os.lseek(f,0,os.SEEK_HOLE), os.lseek(f,8192,os.SEEK_DATA))'");
    assert_eq!(holes.trim(), format!("4096 {}", 10 << 20));
    // Unlinking a name of the hard link keeps the other.
    fs::remove_file(m.mnt.join("moved/c/f")).unwrap();
    assert_eq!(fs::read(m.mnt.join("hard")).unwrap(), b"hello");
    let fsck = m.fs.fsck().unwrap();
    assert!(fsck.errors.is_empty(), "{:?}", fsck.errors);
    m.unmount();
}

#[test]
fn errors_are_posix_errors() {
    require_fuse!();
    let s = Scratch::new("errors");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), true);
    let r = &m.mnt;
    fs::create_dir(r.join("d")).unwrap();
    fs::write(r.join("d/f"), b"x").unwrap();
    let code = |e: std::io::Error| e.raw_os_error().unwrap();
    assert_eq!(
        code(fs::remove_dir(r.join("d")).unwrap_err()),
        libc::ENOTEMPTY
    );
    assert_eq!(
        code(fs::remove_file(r.join("d")).unwrap_err()),
        libc::EISDIR
    );
    assert_eq!(
        code(fs::rename(r.join("d"), r.join("d/f/x")).unwrap_err()),
        libc::ENOTDIR
    );
    assert_eq!(
        code(fs::rename(r.join("d"), r.join("d/sub")).unwrap_err()),
        libc::EINVAL
    );
    assert_eq!(code(fs::create_dir(r.join("d")).unwrap_err()), libc::EEXIST);
    assert_eq!(code(fs::read(r.join("missing")).unwrap_err()), libc::ENOENT);
    let long = "n".repeat(256);
    assert_eq!(
        code(fs::write(r.join(long), b"").unwrap_err()),
        libc::ENAMETOOLONG
    );
    // fallocate modes: supported ones work, others are refused.
    let out = m.sh("fallocate -l 1M fa && fallocate -p -o 0 -l 4096 fa && fallocate -z -o 0 -l 8192 fa && stat -c %s fa; fallocate -c -o 0 -l 4096 fa 2>&1 || true");
    assert!(out.starts_with("1048576"), "{out}");
    assert!(
        out.contains("not supported"),
        "collapse must be refused: {out}"
    );
    // An open, unlinked file stays readable and writable.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(r.join("tmp"))
        .unwrap();
    f.write_all(b"orphan data").unwrap();
    fs::remove_file(r.join("tmp")).unwrap();
    f.write_all(b"!").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s2 = String::new();
    f.read_to_string(&mut s2).unwrap();
    assert_eq!(s2, "orphan data!");
    drop(f);
    // statfs has real numbers.
    let df = m.sh("stat -f -c '%b %f %S' .");
    let v: Vec<u64> = df.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!(
        v[0] > 50_000 && v[1] > 0 && v[1] < v[0] && v[2] == 4096,
        "{df}"
    );
    m.unmount();
}

#[test]
fn sync_ioctl_checkpoints_and_fsync_is_durable() {
    require_fuse!();
    let s = Scratch::new("sync");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), true);
    let before = m.fs.tree().stats().checkpoints;
    let f = fs::File::open(&m.mnt).unwrap();
    sync_ioctl(&f).unwrap();
    assert_eq!(m.fs.tree().stats().checkpoints, before + 1);
    drop(f);
    let mut g = fs::File::create(m.mnt.join("durable")).unwrap();
    g.write_all(b"fsynced").unwrap();
    g.sync_all().unwrap();
    assert!(m.counters.fsyncs.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    drop(g);
    m.unmount();
}

#[allow(unsafe_code)]
fn sync_ioctl(f: &fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: an `_IO` request takes no argument; the fd is valid.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), wodfs_fuse::WODFS_IOC_SYNC as _) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
