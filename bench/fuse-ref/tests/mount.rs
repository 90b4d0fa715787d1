//! Mounts each reference file system in a temporary directory, works on it
//! through std::fs, and unmounts it with SIGTERM. Skipped (and passing)
//! only when /dev/fuse is missing.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BINARY: &str = env!("CARGO_BIN_EXE_fuse-ref");

fn fuse_available() -> bool {
    if Path::new("/dev/fuse").exists() {
        true
    } else {
        eprintln!("skipped: /dev/fuse is missing, FUSE cannot be mounted here");
        false
    }
}

fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "fuse-ref-test-{tag}-{}-{nanos}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn is_mounted(mountpoint: &Path) -> bool {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let wanted = mountpoint.to_str().unwrap();
    mountinfo
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted))
}

/// A mounted daemon; dropping it without `unmount` kills it and detaches
/// the mount so a failing test leaves nothing behind.
struct Mounted {
    child: Option<Child>,
    mountpoint: PathBuf,
}

impl Mounted {
    fn start(args: &[&Path], mountpoint: &Path) -> Mounted {
        let child = Command::new(BINARY).args(args).spawn().unwrap();
        let mut mounted = Mounted {
            child: Some(child),
            mountpoint: mountpoint.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_mounted(mountpoint) {
            if let Some(status) = mounted.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited before mounting: {status}");
            }
            assert!(Instant::now() < deadline, "mount did not appear");
            sleep(Duration::from_millis(20));
        }
        mounted
    }

    fn unmount(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let signalled = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(signalled.success());
        let status = child.wait().unwrap();
        assert!(!is_mounted(&self.mountpoint), "still mounted after SIGTERM");
        status
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .status();
        }
    }
}

/// Each reference is mounted as the benchmark mounts it (wodfs's INIT
/// flags) and with the kernel's writeback cache (`--writeback`, as
/// sessions up to 54 ran them).
const WRITEBACK_OR_NOT: [&[&str]; 2] = [&[], &["--writeback"]];

/// The operations the benchmarks rely on, checked through the kernel.
fn exercise(root: &Path) {
    let dir = root.join("dir");
    fs::create_dir(&dir).unwrap();
    fs::create_dir_all(dir.join("sub/deeper")).unwrap();

    let file = dir.join("file");
    fs::write(&file, b"hello, world").unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"hello, world");

    // Overwrite in the middle, append, and read back past a hole.
    let mut handle = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    handle.seek(SeekFrom::Start(7)).unwrap();
    handle.write_all(b"there").unwrap();
    handle.seek(SeekFrom::Start(20)).unwrap();
    handle.write_all(b"!").unwrap();
    handle.sync_all().unwrap();
    drop(handle);
    let mut expected = b"hello, there".to_vec();
    expected.resize(20, 0);
    expected.push(b'!');
    assert_eq!(fs::read(&file).unwrap(), expected);
    assert_eq!(fs::metadata(&file).unwrap().len(), 21);

    // A larger file through several requests.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(dir.join("big"), &big).unwrap();
    let mut read_back = Vec::new();
    fs::File::open(dir.join("big"))
        .unwrap()
        .read_to_end(&mut read_back)
        .unwrap();
    assert!(read_back == big, "large file read back differs");

    // Truncate.
    fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(5)
        .unwrap();
    assert_eq!(fs::read(&file).unwrap(), b"hello");

    // Rename of a file and of a directory with contents.
    let renamed = dir.join("renamed");
    fs::rename(&file, &renamed).unwrap();
    assert!(!file.exists());
    assert_eq!(fs::read(&renamed).unwrap(), b"hello");
    fs::rename(dir.join("sub"), root.join("moved")).unwrap();
    assert!(root.join("moved/deeper").is_dir());

    // Rename over an existing file replaces it.
    fs::write(dir.join("victim"), b"old").unwrap();
    fs::rename(&renamed, dir.join("victim")).unwrap();
    assert_eq!(fs::read(dir.join("victim")).unwrap(), b"hello");
    // The replaced inode's cached times are flushed after it is gone; the
    // daemon must accept that, or syncfs reports a writeback error.
    fs::write(dir.join("config.lock"), b"new").unwrap();
    fs::write(dir.join("config"), b"old").unwrap();
    fs::rename(dir.join("config.lock"), dir.join("config")).unwrap();
    let synced = Command::new("sync").arg("-f").arg(root).status().unwrap();
    assert!(synced.success(), "syncfs after rename-over failed");
    fs::remove_file(dir.join("config")).unwrap();

    // Symlink and hard link.
    std::os::unix::fs::symlink("victim", dir.join("link")).unwrap();
    assert_eq!(
        fs::read_link(dir.join("link")).unwrap(),
        Path::new("victim")
    );
    assert_eq!(fs::read(dir.join("link")).unwrap(), b"hello");
    fs::hard_link(dir.join("victim"), dir.join("hard")).unwrap();
    assert_eq!(fs::metadata(dir.join("victim")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(dir.join("victim")).unwrap().ino(),
        fs::metadata(dir.join("hard")).unwrap().ino()
    );

    // Readdir sees exactly the live names.
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["big", "hard", "link", "victim"]);

    // A directory of many entries lists completely (several READDIRs).
    let many = root.join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..3000 {
        fs::write(many.join(format!("entry-{i:05}")), b"x").unwrap();
    }
    assert_eq!(fs::read_dir(&many).unwrap().count(), 3000);

    // Unlink and rmdir.
    fs::remove_file(dir.join("hard")).unwrap();
    assert_eq!(fs::metadata(dir.join("victim")).unwrap().nlink(), 1);
    fs::remove_file(dir.join("link")).unwrap();
    assert!(
        fs::remove_dir(&dir).is_err(),
        "rmdir of a non-empty directory"
    );
    fs::remove_dir_all(&dir).unwrap();
    fs::remove_dir_all(&many).unwrap();
    assert!(!dir.exists());
    assert!(fs::read_dir(root)
        .unwrap()
        .all(|e| e.unwrap().file_name() == "moved"));
}

#[test]
fn nullfs_serves_the_basic_operations() {
    if !fuse_available() {
        return;
    }
    for options in WRITEBACK_OR_NOT {
        let scratch = scratch_dir("nullfs");
        let mountpoint = scratch.join("mnt");
        fs::create_dir(&mountpoint).unwrap();
        let args: Vec<&Path> = [Path::new("nullfs")]
            .into_iter()
            .chain(options.iter().map(Path::new))
            .chain([mountpoint.as_path()])
            .collect();
        let mounted = Mounted::start(&args, &mountpoint);
        exercise(&mountpoint);
        let status = mounted.unmount();
        assert!(status.success(), "{options:?}: daemon exit status {status}");
        fs::remove_dir_all(&scratch).unwrap();
    }
}

#[test]
fn passthrough_serves_the_basic_operations_and_stores_in_the_backing_dir() {
    if !fuse_available() {
        return;
    }
    for options in WRITEBACK_OR_NOT {
        let scratch = scratch_dir("passthrough");
        let backing = scratch.join("backing");
        let mountpoint = scratch.join("mnt");
        fs::create_dir(&backing).unwrap();
        fs::create_dir(&mountpoint).unwrap();
        let args: Vec<&Path> = [Path::new("passthrough")]
            .into_iter()
            .chain(options.iter().map(Path::new))
            .chain([backing.as_path(), mountpoint.as_path()])
            .collect();
        let mounted = Mounted::start(&args, &mountpoint);
        exercise(&mountpoint);
        fs::write(mountpoint.join("kept"), b"on the backing fs").unwrap();
        let status = mounted.unmount();
        assert!(status.success(), "{options:?}: daemon exit status {status}");
        assert_eq!(
            fs::read(backing.join("kept")).unwrap(),
            b"on the backing fs"
        );
        assert!(backing.join("moved/deeper").is_dir());
        fs::remove_dir_all(&scratch).unwrap();
    }
}
