//! Command-line parsing helpers: sizes and `-o` option lists.

/// Parses a size such as `8G`, `512M`, `64K` or `4096` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("bad size {s:?}: unknown unit {c:?}")),
            };
            (&s[..i], mult)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected a number with K, M, G or T"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("bad size {s:?}: too large"))
}

/// Options of `wodfs mount -o …`.
#[derive(Debug, Clone)]
pub struct MountOpts {
    /// Kernel writeback cache on/off.
    pub writeback: bool,
    /// Read-only mount.
    pub read_only: bool,
    /// Engine node cache size.
    pub cache_bytes: usize,
    /// Background checkpoint interval.
    pub checkpoint_secs: u64,
    /// How often the log is made durable without being asked
    /// (`commit=SECS`, ext4's name), and the write coalescer hands what it
    /// holds to the engine: a crash loses at most three intervals of
    /// writes nobody synced.
    pub commit_ms: u64,
    /// Request threads.
    pub threads: usize,
    /// Microseconds the request thread polls the FUSE device after the
    /// last request before it sleeps (`poll=US`; 0 never polls).
    pub poll_us: u64,
    /// `remount`: change flags of an existing mount (done by the kernel).
    pub remount: bool,
    /// Update access times on read (relatime rules); `noatime` turns off.
    pub relatime: bool,
    /// Update access times on every read (`strictatime`).
    pub strictatime: bool,
    /// Device nodes work (`dev`; default nodev, as fuser mounts).
    pub dev: bool,
    /// Set-user/group-ID bits take effect (`suid`; default nosuid).
    pub suid: bool,
    /// Programs may not be executed (`noexec`).
    pub noexec: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts {
            writeback: false,
            read_only: false,
            cache_bytes: 256 << 20,
            checkpoint_secs: 60,
            commit_ms: DEFAULT_COMMIT_MS,
            threads: 1,
            poll_us: wodfs_fuse::poll::DEFAULT_POLL_IDLE.as_micros() as u64,
            remount: false,
            relatime: true,
            strictatime: false,
            dev: false,
            suid: false,
            noexec: false,
        }
    }
}

/// The longest `poll=`: a second of polling after every burst would be a
/// busy loop, not a latency trade.
const MAX_POLL_US: u64 = 100_000;

/// The log is made durable every second unless `commit=` says otherwise
/// (`../shared/SYSTEM.md`'s parameter, BetrFS's default).
pub const DEFAULT_COMMIT_MS: u64 = 1000;

/// The longest `commit=`, as ext4 allows: beyond it a crash could lose
/// minutes of writes.
const MAX_COMMIT_SECS: u64 = 300;

/// Options mount(8) and fstab pass that need nothing from us.
const IGNORED: &[&str] = &[
    "rw",
    "defaults",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "nofail",
    "_netdev",
    "atime",
    "allow_other",
    "default_permissions",
    "async",
    "sync",
    "user_id",
    "group_id",
    "rootmode",
    "max_read",
    "blksize",
    "fd",
    "lazytime",
    "nolazytime",
    "diratime",
    "nodiratime",
];

impl MountOpts {
    /// Applies a comma-separated option list.
    pub fn apply(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let missing = || format!("option {key} needs a value");
            match key {
                "writeback" => self.writeback = true,
                "nowriteback" => self.writeback = false,
                "ro" => self.read_only = true,
                "remount" => self.remount = true,
                "noatime" => (self.relatime, self.strictatime) = (false, false),
                "relatime" => (self.relatime, self.strictatime) = (true, false),
                "strictatime" => (self.relatime, self.strictatime) = (true, true),
                "dev" => self.dev = true,
                "nodev" => self.dev = false,
                "suid" => self.suid = true,
                "nosuid" => self.suid = false,
                "exec" => self.noexec = false,
                "noexec" => self.noexec = true,
                "cache" => {
                    self.cache_bytes = parse_size(value.ok_or_else(missing)?)? as usize;
                }
                "checkpoint" => {
                    self.checkpoint_secs = value
                        .ok_or_else(missing)?
                        .parse()
                        .map_err(|_| format!("bad checkpoint interval {value:?}"))?;
                }
                "commit" => {
                    // As in ext4, 0 means the default.
                    let secs: u64 = value
                        .ok_or_else(missing)?
                        .parse()
                        .ok()
                        .filter(|&s| s <= MAX_COMMIT_SECS)
                        .ok_or_else(|| {
                            format!(
                                "bad commit interval {value:?}: seconds, 0 to {MAX_COMMIT_SECS}"
                            )
                        })?;
                    self.commit_ms = if secs == 0 {
                        DEFAULT_COMMIT_MS
                    } else {
                        secs * 1000
                    };
                }
                "threads" => {
                    self.threads = value
                        .ok_or_else(missing)?
                        .parse()
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| format!("bad thread count {value:?}"))?;
                }
                "poll" => {
                    self.poll_us = value
                        .ok_or_else(missing)?
                        .parse()
                        .ok()
                        .filter(|&us| us <= MAX_POLL_US)
                        .ok_or_else(|| {
                            format!("bad poll time {value:?}: microseconds, 0 to {MAX_POLL_US}")
                        })?;
                }
                k if IGNORED.contains(&k) || k.starts_with("x-") || k.starts_with("comment") => {}
                "subtype" | "fsname" => {}
                _ => return Err(format!("unknown mount option {opt:?}")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("G").is_err());
    }

    #[test]
    fn mount_options() {
        let mut o = MountOpts::default();
        o.apply("rw,nowriteback,cache=64M,x-systemd.automount,threads=2")
            .unwrap();
        assert!(!o.writeback);
        assert_eq!(o.cache_bytes, 64 << 20);
        assert_eq!(o.threads, 2);
        assert_eq!(o.poll_us, 500);
        o.apply("poll=0").unwrap();
        assert_eq!(o.poll_us, 0);
        o.apply("poll=2000").unwrap();
        assert_eq!(o.poll_us, 2000);
        assert!(o.apply("poll").is_err());
        assert!(o.apply("poll=-1").is_err());
        assert!(o.apply("poll=100001").is_err());
        assert!(o.apply("bogus").is_err());
        assert!(o.apply("cache").is_err());
        assert_eq!(o.commit_ms, DEFAULT_COMMIT_MS);
        o.apply("commit=5").unwrap();
        assert_eq!(o.commit_ms, 5000);
        o.apply("commit=0").unwrap();
        assert_eq!(o.commit_ms, DEFAULT_COMMIT_MS);
        assert!(o.apply("commit").is_err());
        assert!(o.apply("commit=301").is_err());
        assert!(o.apply("commit=0.5").is_err());
    }

    /// Regression (xfstests generic/003, 184, 306): these were accepted
    /// and silently ignored.
    #[test]
    fn atime_and_kernel_flag_options_take_effect() {
        let mut o = MountOpts::default();
        assert!(!o.dev && !o.suid && !o.noexec && !o.strictatime);
        o.apply("dev,suid,noexec,strictatime").unwrap();
        assert!(o.dev && o.suid && o.noexec && o.relatime && o.strictatime);
        o.apply("nodev,nosuid,exec,noatime").unwrap();
        assert!(!o.dev && !o.suid && !o.noexec && !o.relatime && !o.strictatime);
    }
}
