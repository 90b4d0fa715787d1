"""Unlink cost versus file size: per size, files are written and made
durable, then (cold) each is unlinked and the directory fsynced.

Every size unlinks the same number of files: the step's first unlink pays
the cold lookup of the directory's metadata, and spreading it over 100
small files but 4 large ones made a flat per-file cost look like 2.5x
(session 4)."""

import os

from .rename import KIB, size_label, write_file

NAME = "unlink"

# 32 unlinks take tens of milliseconds: a full run measures them three
# times (`harness/repeats.py`).
ROUNDS = 3


def params(quick):
    if quick:
        return {"sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 4096 * KIB], "files": 8}
    # 32 x 256 MiB = 8 GiB written before that step; the image is 32 GiB.
    return {"sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 16384 * KIB, 262144 * KIB], "files": 32}


def needs():
    return None


def run(ctx):
    p = ctx.params
    directory = ctx.root / "unlink"
    directory.mkdir()
    for size in p["sizes"]:
        count = p["files"]
        names = [f"u{size}-{i}" for i in range(count)]
        for name in names:
            write_file(directory / name, size)
        ctx.fs.make_durable()

        def unlink_all():
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for name in names:
                    os.unlink(directory / name)
                    os.fsync(fd)
            finally:
                os.close(fd)
            return {"files": count}

        ctx.step(f"unlink-{size_label(size)}", unlink_all, per=count)
