//! Pieces shared by both reference file systems: the mount options wodfs
//! uses, panic containment, and attribute helpers. (Their INIT flags are
//! wodfs's own, `wodfs_fuse::init_flags`.)

use std::any::Any;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileType, MountOption, SessionACL};

/// How long the kernel may cache entries, negative entries and attributes.
/// Nothing but the daemon changes these file systems, so the cache is
/// always right and a long timeout saves a LOOKUP/GETATTR per access.
pub const TTL: Duration = Duration::from_secs(24 * 3600);

/// Block size reported in `st_blksize` and `statfs`.
pub const BLOCK_BYTES: u32 = 4096;

/// Mount configuration: allow_other + default_permissions, the subtype set
/// through a raw option (as root, `MountOption::Subtype` is not passed to
/// mount(2)), and no AutoUnmount, so fuser calls mount(2) itself when root.
pub fn mount_config(subtype: &str, threads: usize) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(subtype.to_string()),
        MountOption::CUSTOM(format!("subtype={subtype}")),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(threads);
    config
}

/// Runs one request handler; a panic inside it is logged and the reply,
/// dropped while unwinding, answers EIO (fuser's drop behaviour), so the
/// mount survives.
pub fn guarded(op: &'static str, handler: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(handler)) {
        log::error!("panic in {op}: {}", panic_message(payload.as_ref()));
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "non-string panic payload"
    }
}

/// Locks a mutex even if a panicking handler poisoned it: the state may be
/// half-updated, but a benchmark reference keeps serving rather than
/// failing every later request.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Maps an `io::Error` to an errno, EIO when it carries none.
pub fn errno(error: io::Error) -> Errno {
    match error.raw_os_error() {
        Some(code) if code > 0 => Errno::from_i32(code),
        _ => Errno::EIO,
    }
}

/// The file type encoded in the `S_IFMT` bits of a mode.
pub fn kind_from_mode(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// Seconds and nanoseconds since the epoch (negative before it) as a time.
pub fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = u32::try_from(nanos.clamp(0, 999_999_999)).unwrap_or(0);
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::new(secs.unsigned_abs(), nanos)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::new(0, nanos)
    }
}

/// Mode bits that `HANDLE_KILLPRIV_V2` makes the file system clear on
/// write, truncate and chown: set-user-ID always, set-group-ID only when
/// group-executable (otherwise it marks mandatory locking).
pub fn kill_suid_sgid(mode: u32) -> u32 {
    let mut cleared = mode & !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 {
        cleared &= !libc::S_ISGID;
    }
    cleared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_is_contained_and_drops_what_it_owned() {
        let owned = std::sync::Arc::new(());
        let held = std::sync::Arc::clone(&owned);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        guarded("test", move || {
            let _reply = held;
            panic!("handler bug");
        });
        std::panic::set_hook(hook);
        // The closure's captures (the reply, in a real handler) were
        // dropped while unwinding: fuser answers EIO from that drop.
        assert_eq!(std::sync::Arc::strong_count(&owned), 1);
    }

    #[test]
    fn kill_suid_keeps_sgid_without_group_exec() {
        assert_eq!(kill_suid_sgid(0o6755), 0o0755);
        assert_eq!(kill_suid_sgid(0o6745), 0o2745);
    }

    #[test]
    fn system_time_round_trips_both_sides_of_the_epoch() {
        let after = system_time(10, 5);
        assert_eq!(
            after.duration_since(SystemTime::UNIX_EPOCH).unwrap(),
            Duration::new(10, 5)
        );
        let before = system_time(-10, 0);
        assert_eq!(
            SystemTime::UNIX_EPOCH.duration_since(before).unwrap(),
            Duration::from_secs(10)
        );
    }
}
