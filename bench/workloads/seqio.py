"""Sequential write of a large file in 1 MiB writes + fsync, cold
sequential read, then random 4-byte writes at random offsets + one fsync,
and a cold sequential read again (000_* Table 2)."""

import json

from harness import system

NAME = "seqio"

# The random writes take a third of a second, and the read after them is
# held against the fresh read: a full run measures them three times
# (`harness/repeats.py`).
ROUNDS = 3

MIB = 1 << 20


def params(quick):
    if quick:
        return {"file_bytes": 64 * MIB, "block_bytes": MIB, "random_writes": 1000, "write_bytes": 4}
    return {"file_bytes": 4096 * MIB, "block_bytes": MIB, "random_writes": 10_000, "write_bytes": 4}


def needs():
    return None


def _read_all(path):
    system.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none"])


def run(ctx):
    p = ctx.params
    big = ctx.root / "big"
    mib = p["file_bytes"] / MIB

    def write():
        out = system.run([ctx.tools["fsbench"], "seqwrite", big, p["file_bytes"], p["block_bytes"]], capture=True)
        return json.loads(out.stdout)

    ctx.step("seq-write", write, amount=mib, unit="MiB/s", logical_write_bytes=p["file_bytes"])
    ctx.step("seq-read", lambda: _read_all(big), amount=mib, unit="MiB/s")

    def random_write():
        args = [ctx.tools["fsbench"], "randwrite", big, p["random_writes"], p["write_bytes"], 42]
        return json.loads(system.run(args, capture=True).stdout)

    ctx.step("random-write", random_write, logical_write_bytes=p["random_writes"] * p["write_bytes"])
    ctx.step("seq-read-after-random", lambda: _read_all(big), amount=mib, unit="MiB/s")
