"""fs_mark: 4 KiB files, each fsynced before close (fsync-bound create)."""

import os
import re
from pathlib import Path

from harness import system

NAME = "fsync-create"


def params(quick):
    if quick:
        return {"files": 300, "loops": 1, "file_bytes": 4096, "threads": 1}
    return {"files": 5_000, "loops": 2, "file_bytes": 4096, "threads": 1}


def needs():
    return None if system.shutil_which("fs_mark") else "fs_mark not found (apt-get install fsmark)"


def run(ctx):
    p = ctx.params
    directory = ctx.root / "fsmark"
    directory.mkdir()
    # fs_mark refuses directory names of 40 bytes or more: go through a
    # short symlink.
    short = Path(f"/tmp/fsmark-{os.getpid()}-{ctx.fs.name}")
    if short.is_symlink() or short.exists():
        short.unlink()
    short.symlink_to(directory)
    args = [
        "fs_mark", "-d", str(short), "-n", str(p["files"]), "-s", str(p["file_bytes"]),
        "-S", "1", "-L", str(p["loops"]), "-t", str(p["threads"]),
    ]

    def fsmark():
        # fs_mark writes its log into the working directory.
        done = system.run(args, capture=True, cwd=ctx.workdir)
        rates = []
        for line in done.stdout.decode(errors="replace").splitlines():
            fields = line.split()
            if len(fields) >= 5 and re.fullmatch(r"\d+", fields[0]) and re.fullmatch(r"\d+", fields[1]):
                rates.append(float(fields[3]))
        return {"files_per_s_reported": rates}

    record = ctx.step(
        "fsmark-4k-fsync",
        fsmark,
        amount=p["files"] * p["loops"],
        unit="files/s",
        logical_write_bytes=p["files"] * p["loops"] * p["file_bytes"],
    )
    short.unlink()
    rates = record.get("extra", {}).get("files_per_s_reported")
    if rates:
        record["value"] = sum(rates) / len(rates)
