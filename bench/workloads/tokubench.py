"""TokuBench: many 200-byte files in a balanced directory tree (fanout
128) by 4 threads, then a sync; files/s is also sampled over time."""

import json
import subprocess

NAME = "tokubench"


def params(quick):
    if quick:
        return {"files": 20_000, "file_bytes": 200, "fanout": 128, "threads": 4, "interval_ms": 200}
    return {"files": 500_000, "file_bytes": 200, "fanout": 128, "threads": 4, "interval_ms": 500}


def needs():
    return None


def run(ctx):
    p = ctx.params

    def create():
        args = [ctx.tools["fsbench"], "tokubench", ctx.root / "toku", p["files"], p["file_bytes"], p["fanout"], p["threads"], p["interval_ms"]]
        done = subprocess.run([str(a) for a in args], capture_output=True, check=True)
        series = []
        for line in done.stderr.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "progress":
                series.append([float(parts[1]), int(parts[2])])
        result = json.loads(done.stdout)
        result["series"] = series
        return result

    ctx.step(
        "tokubench-create",
        create,
        amount=p["files"],
        unit="files/s",
        durable=False,
        logical_write_bytes=p["files"] * p["file_bytes"],
    )
    # The sync step's device counters hold what the create left in caches.
    ctx.step("tokubench-sync", ctx.fs.make_durable, cold=False, durable=False, logical_write_bytes=p["files"] * p["file_bytes"])
