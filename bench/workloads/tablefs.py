"""TableFS's metadata benchmark: many empty files in one directory, then
random stat/chmod/utime, cold; the same with 512-byte files where a read
reads and a write overwrites the whole file (fresh file system each)."""

import json

from harness import system

NAME = "tablefs"


def params(quick):
    if quick:
        return {"files": 10_000, "ops": 5_000, "small_bytes": 512}
    return {"files": 1_000_000, "ops": 500_000, "small_bytes": 512}


def needs():
    return None


def _tool(ctx, *args):
    out = system.run([ctx.tools["fsbench"], *args], capture=True)
    return json.loads(out.stdout)


def run(ctx):
    p = ctx.params
    for prefix, file_bytes in (("meta", 0), ("small512", p["small_bytes"])):
        if file_bytes:
            ctx.fs.unmount()
            ctx.fs.mkfs()
            ctx.fs.mount()
        directory = ctx.root / "table"
        directory.mkdir()
        ctx.step(
            f"{prefix}-create",
            lambda: _tool(ctx, "tablefs-create", directory, p["files"], file_bytes),
            amount=p["files"],
            unit="ops/s",
            logical_write_bytes=p["files"] * file_bytes,
        )
        ctx.step(
            f"{prefix}-query-cold",
            lambda: _tool(ctx, "tablefs-query", directory, p["files"], p["ops"], file_bytes, 7),
            amount=p["ops"],
            unit="ops/s",
        )
