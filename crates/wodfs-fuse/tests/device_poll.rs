//! The request thread polls /dev/fuse while requests keep coming and goes
//! back to blocking reads when they stop (`poll.rs`), seen from outside:
//! the open file's flags in `/proc/self/fdinfo`. One test in this binary,
//! so the process holds one FUSE device.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use common::{mkfs, mount, Scratch};

/// `O_NONBLOCK` in fdinfo's octal `flags`.
const O_NONBLOCK: u32 = 0o4000;

/// Whether this process's FUSE device is in non-blocking mode. Every
/// descriptor of the device shares one open file and so one set of flags:
/// the first one found answers. (Comparing two descriptors' flags raced
/// with the request thread switching the mode between the two reads of
/// fdinfo, and once failed under a loaded machine.)
fn device_polling() -> bool {
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target.as_os_str() != "/dev/fuse" {
            continue;
        }
        let fd = entry.file_name();
        let Ok(info) =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.to_string_lossy()))
        else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        return flags & O_NONBLOCK != 0;
    }
    panic!("no /dev/fuse descriptor in this process")
}

#[test]
fn requests_make_the_device_poll_and_idleness_makes_it_block() {
    require_fuse!();
    let s = Scratch::new("device-poll");
    mkfs(&s.image(), 256 << 20);
    let m = mount(&s.image(), &s.mnt(), false);
    std::fs::write(s.mnt().join("f"), b"x").unwrap();

    // A request's own thread turns polling on before it answers, so right
    // after a LOOKUP (a name the kernel has not seen) the device polls,
    // unless this thread was held off the CPU for a whole idle period, or
    // the watcher saw the request thread wait for its CPU and holds
    // polling off for 50 ms (which this very loop can cause on two CPUs:
    // once, 200 quick tries fell inside hold-offs). So keep trying for a
    // while, with a pause that leaves the CPU to the daemon.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut polled = false;
    for i in 0.. {
        let missing = std::fs::metadata(s.mnt().join(format!("missing-{i}")));
        assert!(missing.is_err());
        if device_polling() {
            polled = true;
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    assert!(polled, "the device never polled while requests came");

    // Idle: the watcher makes reads block again, so an idle daemon sleeps.
    let deadline = Instant::now() + Duration::from_secs(10);
    while device_polling() {
        assert!(Instant::now() < deadline, "still polling after 10 s idle");
        thread::sleep(Duration::from_millis(5));
    }
    // And the mount still answers after a blocking read.
    assert_eq!(std::fs::read(s.mnt().join("f")).unwrap(), b"x");
    m.unmount();
}
