"""File system drivers. Each one owns its devices, mounts and daemon and
offers the same life cycle to the workloads:

    setup() once, then per workload mkfs() + mount(), steps with cold()
    and make_durable() between them, unmount(); teardown() at the end,
    also after failures.

Kernel file systems and the passthrough's backing ext4 sit on a sparse
image attached with `losetup --direct-io=on`; every file system gets an
image of the same size on the same disk, so device counters compare.
"""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import system

MKFS = {
    # Inode tables and journal are initialised by mkfs, not by a background
    # thread that would write during the first workload's measurement.
    "ext4": ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
    "btrfs": ["mkfs.btrfs", "-q", "-f"],
    "xfs": ["mkfs.xfs", "-q", "-f"],
}

MKFS_PACKAGE = {"ext4": "e2fsprogs", "btrfs": "btrfs-progs", "xfs": "xfsprogs"}


class Unavailable(Exception):
    """This file system cannot run here; the reason is shown and the run
    goes on without it."""


class LoopImage:
    """A sparse image file attached to a direct-I/O loop device."""

    def __init__(self, image, size_bytes):
        self.image = Path(image)
        self.size_bytes = size_bytes
        self.device = None

    def attach(self):
        self.image.parent.mkdir(parents=True, exist_ok=True)
        for stale in system.loop_devices_of(self.image):
            system.losetup_detach(stale)
        with open(self.image, "wb") as f:
            f.truncate(self.size_bytes)
        self.device = system.losetup_attach(self.image)

    def discard(self):
        """Forgets every block (the image becomes all holes again)."""
        system.run(["blkdiscard", "-f", self.device], check=False)

    def detach(self):
        if self.device:
            system.losetup_detach(self.device)
            self.device = None
        for stale in system.loop_devices_of(self.image):
            system.losetup_detach(stale)
        self.image.unlink(missing_ok=True)


class FileSystem:
    name = "?"
    kind = "?"  # "kernel" or "fuse"

    def __init__(self, workdir, image_bytes):
        self.workdir = Path(workdir)
        self.image_bytes = image_bytes
        self.mountpoint = self.workdir / "mnt" / self.name

    def check_available(self):
        """Raises Unavailable with a reason when this FS cannot run."""

    def setup(self):
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        # A run killed with SIGKILL leaves its mounts behind.
        system.unmount(self.mountpoint)

    def mkfs(self):
        raise NotImplementedError

    def mount(self):
        raise NotImplementedError

    def unmount(self):
        raise NotImplementedError

    def cold(self):
        """Empties every cache: unmount, drop the kernel caches, mount."""
        self.unmount()
        system.drop_caches()
        self.mount()

    def make_durable(self):
        raise NotImplementedError

    def abort(self):
        """Kills a hung file system so the run can go on (FUSE: SIGKILL to
        the daemon, which fails every request still waiting)."""
        daemon = getattr(self, "daemon", None)
        if daemon is not None and daemon.pid:
            try:
                os.kill(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.unmount()
        except Exception:  # noqa: BLE001 - teardown retries
            system.unmount(self.mountpoint)

    def teardown(self):
        raise NotImplementedError

    def release_space(self):
        """After a workload (unmounted): gives the image's blocks back to
        the host, so that the six file systems' sparse images do not all
        hold their largest workload's data at once (the unlink workload
        writes ~9 GiB per file system; five of them filled the host's free
        space and failed the sixth with ENOSPC from the loop device)."""
        for loop in (getattr(self, "loop", None), getattr(getattr(self, "backing", None), "loop", None)):
            if loop is not None and loop.device:
                loop.discard()

    @property
    def device(self):
        """The loop device whose counters are this FS's I/O, or None."""
        return None

    def daemon_pid(self):
        return None

    @property
    def root(self):
        """The directory workloads work in."""
        return self.mountpoint


class KernelFs(FileSystem):
    kind = "kernel"

    def __init__(self, name, workdir, image_bytes, mountpoint=None):
        self.name = name
        super().__init__(workdir, image_bytes)
        if mountpoint is not None:
            self.mountpoint = Path(mountpoint)
        self.loop = LoopImage(self.workdir / "img" / f"{name}.img", image_bytes)

    def check_available(self):
        if shutil.which(MKFS[self.name][0]) is None:
            raise Unavailable(f"{MKFS[self.name][0]} not found (apt-get install {MKFS_PACKAGE[self.name]})")
        if self.name not in Path("/proc/filesystems").read_text() and self.name != "ext4":
            system.run(["modprobe", self.name], check=False)

    def setup(self):
        super().setup()
        self.loop.attach()

    @property
    def device(self):
        return self.loop.device

    def mkfs(self):
        self.unmount()
        self.loop.discard()
        system.run(MKFS[self.name] + [self.loop.device])

    def mount(self):
        system.run(["mount", self.loop.device, self.mountpoint])

    def unmount(self):
        system.unmount(self.mountpoint)

    def make_durable(self):
        system.sync_fs(self.mountpoint)

    def teardown(self):
        system.unmount(self.mountpoint)
        self.loop.detach()


class FuseDaemon:
    """A FUSE daemon running in the foreground of a child process."""

    def __init__(self, args, mountpoint, log_path):
        self.args = [str(a) for a in args]
        self.mountpoint = Path(mountpoint)
        self.log_path = log_path
        self.process = None
        self.pid = None

    def start(self):
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=self.log, start_new_session=True)
        try:
            system.wait_for_mount(self.mountpoint, self.process)
        except system.CommandError as error:
            self._wait_exit(timeout_s=5.0)
            tail = Path(self.log_path).read_bytes()[-600:].decode(errors="replace").strip()
            raise system.CommandError(f"{error}; daemon log ends: {tail}") from None
        self.pid = self.process.pid

    def stop(self, unmount_command=None):
        if system.is_mounted(self.mountpoint):
            command = unmount_command or ["umount", self.mountpoint]
            if system.run(command, check=False).returncode != 0:
                system.run(["umount", "-l", self.mountpoint], check=False)
        self._wait_exit()

    def _wait_exit(self, timeout_s=120.0):
        pid = self.pid
        deadline = time.monotonic() + timeout_s
        while pid is not None and time.monotonic() < deadline:
            if self.process is not None and self.process.pid == pid:
                if self.process.poll() is not None:
                    break
            elif not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.02)
        else:
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        system.unmount(self.mountpoint)
        if getattr(self, "log", None):
            self.log.close()
            self.log = None
        self.process = None
        self.pid = None


class NullFs(FileSystem):
    """In-memory reference FS. It has no storage, so it cannot be remounted
    without losing everything: its cold cache is a flush of the kernel's
    dirty pages into the daemon plus drop_caches (dentries, inodes and
    pages of the FUSE mount), which makes every later access a request."""

    name = "nullfs"
    kind = "fuse"

    def __init__(self, workdir, image_bytes, fuse_ref_bin, options=()):
        super().__init__(workdir, image_bytes)
        self.binary = fuse_ref_bin
        self.options = list(options)
        self.daemon = None

    def check_available(self):
        if not Path("/dev/fuse").exists():
            raise Unavailable("/dev/fuse is missing")
        if not self.binary or not Path(self.binary).exists():
            raise Unavailable("fuse-ref binary not built (cargo build --release -p fuse-ref)")

    def mkfs(self):
        # A fresh daemon is an empty file system.
        self.unmount()

    def mount(self):
        self.daemon = FuseDaemon(
            [self.binary, "nullfs", *self.options, self.mountpoint], self.mountpoint, self.workdir / "nullfs.log"
        )
        self.daemon.start()

    def unmount(self):
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        system.unmount(self.mountpoint)

    def cold(self):
        system.sync_fs(self.mountpoint)
        system.drop_caches()

    def make_durable(self):
        # Durable for nullfs = written back from the page cache to the daemon.
        system.sync_fs(self.mountpoint)

    def teardown(self):
        self.unmount()

    def daemon_pid(self):
        return self.daemon.pid if self.daemon else None


class Passthrough(FileSystem):
    """FUSE passthrough over ext4 on its own loop device."""

    name = "passthrough"
    kind = "fuse"

    def __init__(self, workdir, image_bytes, fuse_ref_bin, options=()):
        super().__init__(workdir, image_bytes)
        self.binary = fuse_ref_bin
        self.options = list(options)
        self.backing = KernelFs("ext4", workdir, image_bytes, mountpoint=self.workdir / "mnt" / "passthrough-backing")
        self.backing.loop = LoopImage(self.workdir / "img" / "passthrough-ext4.img", image_bytes)
        self.daemon = None

    @property
    def backing_dir(self):
        return self.backing.mountpoint / "fs"

    def check_available(self):
        NullFs.check_available(self)
        self.backing.check_available()

    def setup(self):
        super().setup()
        self.backing.setup()

    @property
    def device(self):
        return self.backing.device

    def mkfs(self):
        self.unmount()
        self.backing.mkfs()
        self.backing.mount()
        self.backing_dir.mkdir()
        self.backing.unmount()

    def mount(self):
        if not system.is_mounted(self.backing.mountpoint):
            self.backing.mount()
        self.daemon = FuseDaemon(
            [self.binary, "passthrough", *self.options, self.backing_dir, self.mountpoint],
            self.mountpoint,
            self.workdir / "passthrough.log",
        )
        self.daemon.start()

    def unmount(self):
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None
        system.unmount(self.mountpoint)
        self.backing.unmount()

    def make_durable(self):
        # FUSE dirty pages go to the daemon first, then ext4 makes them durable.
        system.sync_fs(self.mountpoint)
        system.sync_fs(self.backing.mountpoint)

    def teardown(self):
        self.unmount()
        self.backing.teardown()

    def daemon_pid(self):
        return self.daemon.pid if self.daemon else None


def find_wodfs():
    """The wodfs binary: $WODFS_BIN, then PATH, then the cargo targets."""
    candidates = [os.environ.get("WODFS_BIN"), shutil.which("wodfs")]
    repo = Path(__file__).resolve().parents[2]
    target = os.environ.get("CARGO_TARGET_DIR")
    for base in filter(None, [target, repo / "target"]):
        candidates += [Path(base) / "release" / "wodfs"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


class Wodfs(FileSystem):
    """wodfs through its CLI: `wodfs mkfs IMAGE`, `wodfs mount IMAGE DIR -f`
    (foreground), `wodfs sync DIR`, `fusermount3 -u DIR`. IMAGE is the loop device, so
    its counters are wodfs's I/O."""

    name = "wodfs"
    kind = "fuse"

    def __init__(self, workdir, image_bytes):
        super().__init__(workdir, image_bytes)
        self.binary = find_wodfs()
        self.loop = LoopImage(self.workdir / "img" / "wodfs.img", image_bytes)
        self.daemon = None

    def check_available(self):
        if self.binary is None:
            raise Unavailable("wodfs binary not found (set WODFS_BIN, put it on PATH, or build it with cargo build --release)")
        if not Path("/dev/fuse").exists():
            raise Unavailable("/dev/fuse is missing")

    def setup(self):
        super().setup()
        self.loop.attach()

    @property
    def device(self):
        return self.loop.device

    def mkfs(self):
        self.unmount()
        self.loop.discard()
        system.run([self.binary, "mkfs", self.loop.device])

    def mount(self):
        # -f: stay in the foreground, so the daemon's PID is known (CPU
        # time) and unmount can wait until it has exited and let go of the
        # device before the next mkfs.
        self.daemon = FuseDaemon(
            [self.binary, "mount", self.loop.device, self.mountpoint, "-f"],
            self.mountpoint,
            self.workdir / "wodfs.log",
        )
        self.daemon.start()

    def unmount(self):
        if self.daemon is not None:
            self.daemon.stop(["fusermount3", "-u", self.mountpoint])
            self.daemon = None
        system.unmount(self.mountpoint)

    def make_durable(self):
        system.sync_fs(self.mountpoint)
        system.run([self.binary, "sync", self.mountpoint])

    def teardown(self):
        self.unmount()
        self.loop.detach()

    def daemon_pid(self):
        return self.daemon.pid if self.daemon else None


ALL = ["ext4", "btrfs", "xfs", "nullfs", "passthrough", "wodfs"]


def make(name, workdir, image_bytes, fuse_ref_bin, ref_options=()):
    """File system `name`; `ref_options` are passed to the FUSE references
    (`fuse-ref nullfs|passthrough OPTIONS ...`)."""
    if name in MKFS:
        return KernelFs(name, workdir, image_bytes)
    if name == "nullfs":
        return NullFs(workdir, image_bytes, fuse_ref_bin, ref_options)
    if name == "passthrough":
        return Passthrough(workdir, image_bytes, fuse_ref_bin, ref_options)
    if name == "wodfs":
        return Wodfs(workdir, image_bytes)
    raise ValueError(f"unknown file system {name}")
