"""A cgroup v1 memory cgroup holding the harness, so every workload process
and FUSE daemon it starts (children inherit the cgroup), and their page
cache, share one memory limit."""

import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/memory")


class MemoryCgroup:
    def __init__(self, limit_mib):
        self.limit_mib = limit_mib
        self.path = ROOT / f"wodfs-bench-{os.getpid()}"

    def enter(self):
        if not (ROOT / "cgroup.procs").exists():
            raise RuntimeError(f"{ROOT} is not a cgroup v1 memory hierarchy")
        self.path.mkdir(exist_ok=True)
        limit = str(self.limit_mib << 20)
        (self.path / "memory.limit_in_bytes").write_text(limit)
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def peak_bytes(self):
        try:
            return int((self.path / "memory.max_usage_in_bytes").read_text())
        except OSError:
            return None

    def leave(self):
        """Moves the harness back to the root cgroup and removes this one
        (its other members have exited by then)."""
        try:
            (ROOT / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            pass
        for leftover in self._members():
            try:
                (ROOT / "cgroup.procs").write_text(leftover)
            except OSError:
                pass
        try:
            self.path.rmdir()
        except OSError:
            pass

    def _members(self):
        try:
            return [p for p in (self.path / "cgroup.procs").read_text().split() if p]
        except OSError:
            return []
