"""Inputs shared by the workloads, prepared once per run before any file
system is measured: the Linux source tarball (uncompressed, in /dev/shm so
reading it costs no device I/O and survives drop_caches), an extracted
copy as the rsync source, and a git repository of part of the tree.

Derived files are cached (--cache-dir) between runs."""

import os
import shutil
import subprocess
from pathlib import Path

from . import system

TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
TOP = "linux-source-6.1"
# Parts of the tree used in --quick mode and for the git repository.
QUICK_PARTS = [f"{TOP}/kernel/sched", f"{TOP}/kernel/time", f"{TOP}/mm/damon"]
GIT_PARTS = [f"{TOP}/kernel", f"{TOP}/fs", f"{TOP}/mm"]
SHM = Path("/dev/shm")


class Inputs:
    def __init__(self, cache_dir, quick, log):
        self.cache = Path(cache_dir)
        self.quick = quick
        self.log = log
        self.tag = "quick" if quick else "full"
        # Per process, so concurrent runs (a test beside a benchmark) never
        # share or delete each other's inputs.
        self.shm = SHM / f"wodfs-bench-{self.tag}-{os.getpid()}"
        self._tar = None
        self._tree = None
        self._repo = None

    def available(self):
        if not TARBALL.exists():
            return f"{TARBALL} missing (apt-get install linux-source-6.1)"
        return None

    def _cached_tar(self):
        """The source tarball uncompressed (full) or cut down (quick)."""
        self.cache.mkdir(parents=True, exist_ok=True)
        full = self.cache / f"{TOP}.tar"
        if not full.exists():
            self.log(f"decompressing {TARBALL} (once; cached in {self.cache})")
            partial = full.with_suffix(".part")
            with open(partial, "wb") as out:
                subprocess.run(["xz", "-dc", "-T0", str(TARBALL)], stdout=out, check=True)
            partial.rename(full)
        if not self.quick:
            return full
        quick = self.cache / "quick-src.tar"
        if not quick.exists():
            work = self.cache / "quick-extract"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            system.run(["tar", "xf", full, "-C", work] + QUICK_PARTS)
            partial = quick.with_suffix(".part")
            system.run(["tar", "cf", partial, "-C", work, TOP])
            partial.rename(quick)
            shutil.rmtree(work, ignore_errors=True)
        return quick

    def source_tar(self):
        """Path of the tarball in /dev/shm."""
        if self._tar is None:
            cached = self._cached_tar()
            self.shm.mkdir(parents=True, exist_ok=True)
            self._tar = self.shm / "src.tar"
            if not self._tar.exists() or self._tar.stat().st_size != cached.stat().st_size:
                shutil.copyfile(cached, self._tar)
        return self._tar

    def source_tree(self):
        """The extracted tree in /dev/shm (rsync's source); its top directory."""
        if self._tree is None:
            tree = self.shm / "tree"
            if not (tree / TOP).exists():
                shutil.rmtree(tree, ignore_errors=True)
                tree.mkdir(parents=True)
                system.run(["tar", "xf", self.source_tar(), "-C", tree])
            self._tree = tree / TOP
        return self._tree

    def git_repo(self):
        """A packed repository of kernel/ fs/ mm/ (quick: a few
        subdirectories), in /dev/shm."""
        if self._repo is None:
            repo = self.shm / "git-src"
            if not (repo / ".git").exists():
                shutil.rmtree(repo, ignore_errors=True)
                repo.mkdir(parents=True)
                parts = QUICK_PARTS if self.quick else GIT_PARTS
                cached = self._cached_tar() if not self.quick else self.source_tar()
                self.log(f"building git repository of {' '.join(p.split('/', 1)[1] for p in parts)}")
                system.run(["tar", "xf", cached, "-C", repo, "--strip-components=1"] + parts)
                env = {
                    "GIT_AUTHOR_NAME": "bench",
                    "GIT_AUTHOR_EMAIL": "bench@localhost",
                    "GIT_COMMITTER_NAME": "bench",
                    "GIT_COMMITTER_EMAIL": "bench@localhost",
                    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": str(repo),
                }
                system.run(["git", "init", "-q", "-b", "main"], cwd=repo, env=env)
                system.run(["git", "add", "-A"], cwd=repo, env=env)
                system.run(["git", "commit", "-q", "-m", "source"], cwd=repo, env=env)
                system.run(["git", "gc", "--quiet"], cwd=repo, env=env)
            self._repo = repo
        return self._repo

    def cleanup(self):
        """Frees the /dev/shm copies (the cache on disk stays)."""
        shutil.rmtree(self.shm, ignore_errors=True)
