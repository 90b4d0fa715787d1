"""Unlink cost versus file size: per size, files are written and made
durable, then (cold) each is unlinked and the directory fsynced."""

import os

from .rename import KIB, size_label, write_file

NAME = "unlink"


def params(quick):
    if quick:
        return {"sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 4096 * KIB], "bytes_per_size_max": 32 << 20, "files_max": 20}
    return {
        "sizes": [4 * KIB, 64 * KIB, 1024 * KIB, 16384 * KIB, 262144 * KIB],
        "bytes_per_size_max": 1 << 30,
        "files_max": 100,
    }


def needs():
    return None


def run(ctx):
    p = ctx.params
    directory = ctx.root / "unlink"
    directory.mkdir()
    for size in p["sizes"]:
        count = max(4, min(p["files_max"], p["bytes_per_size_max"] // size))
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
