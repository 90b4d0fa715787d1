"""Thin wrappers over the commands and /proc and /sys files the harness
uses: running commands, mounts, loop devices, caches and counters."""

import os
import subprocess
import time
from pathlib import Path

SECTOR_BYTES = 512
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class CommandError(RuntimeError):
    pass


def run(args, *, check=True, capture=False, cwd=None, input_bytes=None, env=None, timeout=None):
    """Runs a command; raises CommandError with its stderr when it fails."""
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        input=input_bytes,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        if not stderr and capture:
            stderr = result.stdout.decode(errors="replace").strip()
        raise CommandError(f"{' '.join(map(str, args))} exited {result.returncode}: {stderr[-2000:]}")
    return result


def shell(command, *, cwd=None, check=True):
    """Runs a shell pipeline (for `tar cf - . | cat >/dev/null` and the like)."""
    return run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, check=check)


def mounts():
    """Mount point -> file system type, from /proc/self/mountinfo."""
    table = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        separator = fields.index("-")
        mountpoint = fields[4].replace("\\040", " ")
        table[mountpoint] = fields[separator + 1]
    return table


def is_mounted(path):
    return str(path) in mounts()


def wait_for_mount(path, process=None, timeout_s=30.0):
    """Waits until `path` is a mount point; fails early if the daemon dies."""
    deadline = time.monotonic() + timeout_s
    while not is_mounted(path):
        if process is not None and process.poll() is not None:
            raise CommandError(f"daemon for {path} exited with {process.returncode} before mounting")
        if time.monotonic() > deadline:
            raise CommandError(f"{path} not mounted after {timeout_s} s")
        time.sleep(0.02)


def unmount(path, *, lazy_fallback=True):
    """Unmounts `path` if mounted; detaches lazily when it is busy."""
    if not is_mounted(path):
        return
    result = run(["umount", path], check=False)
    if result.returncode != 0 and lazy_fallback:
        run(["umount", "-l", path], check=False)


def sync_fs(path):
    """syncfs(2) on the file system holding `path`."""
    run(["sync", "-f", path])


def drop_caches():
    run(["sync"])
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def losetup_attach(image):
    result = run(["losetup", "--direct-io=on", "--find", "--show", image], capture=True)
    return result.stdout.decode().strip()


def losetup_detach(device):
    run(["losetup", "-d", device], check=False)


def loop_devices_of(image):
    """Loop devices still attached to `image` (for cleanup after a crash)."""
    result = run(["losetup", "-j", image], capture=True, check=False)
    return [line.split(":")[0] for line in result.stdout.decode().splitlines() if line]


def block_stat(device):
    """(read I/Os, read bytes, write I/Os, write bytes) of a block device."""
    name = Path(device).name
    fields = Path(f"/sys/block/{name}/stat").read_text().split()
    read_ios, read_sectors = int(fields[0]), int(fields[2])
    write_ios, write_sectors = int(fields[4]), int(fields[6])
    return read_ios, read_sectors * SECTOR_BYTES, write_ios, write_sectors * SECTOR_BYTES


def process_cpu_s(pid):
    """User + system CPU seconds of a process (all its threads), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    # Fields 14 and 15 of stat(5), counted after the command name.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_peak_rss_bytes(pid):
    """The most memory a process has had resident since it started
    (`VmHWM`), in bytes, or None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def machine_cpu_s():
    """Busy CPU seconds of the whole machine (all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    # guest and guest_nice are already inside user and nice.
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def kernel_release():
    return os.uname().release


def shutil_which(tool):
    import shutil

    return shutil.which(tool)
