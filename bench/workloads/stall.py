"""Request latency while the file system streams a large write: do
background flushing, binding and checkpoints stall other requests?

A writer streams a large file in 1 MiB writes and fsyncs it (the seqio
writer, in its own process) while this process creates, closes and
unlinks a small file in another directory every 2 ms. Each of those three
requests reaches the FUSE daemon (nothing is cached for a new name), so
the probe's latency is how long the daemon kept a request waiting. The
step's value is the longest probe; the extra fields give the percentiles
and how many probes waited longer than 100 ms (value in ms). Probing goes on for a few
seconds after the writer's fsync, when write-back and checkpoints run."""

import json
import os
import subprocess
import time

NAME = "stall"
MIB = 1 << 20


def params(quick):
    if quick:
        return {"file_bytes": 64 * MIB, "tail_s": 0.5, "period_s": 0.002}
    return {"file_bytes": 4096 * MIB, "tail_s": 5.0, "period_s": 0.002}


def needs():
    return None


def _percentile(sorted_values, fraction):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def run(ctx):
    p = ctx.params
    big = ctx.root / "big"
    probes = ctx.root / "probes"
    probes.mkdir()

    def stream_and_probe():
        writer = subprocess.Popen(
            [str(ctx.tools["fsbench"]), "seqwrite", str(big), str(p["file_bytes"]), str(MIB)],
            stdout=subprocess.PIPE,
        )
        latencies = []
        stop_at = None
        i = 0
        while True:
            if stop_at is None and writer.poll() is not None:
                stop_at = time.perf_counter() + p["tail_s"]
            if stop_at is not None and time.perf_counter() >= stop_at:
                break
            name = probes / f"p{i}"
            start = time.perf_counter()
            fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)
            os.close(fd)
            os.unlink(name)
            latencies.append(time.perf_counter() - start)
            i += 1
            time.sleep(p["period_s"])
        out, _ = writer.communicate()
        if writer.returncode != 0:
            raise RuntimeError(f"fsbench seqwrite exited {writer.returncode}")
        ms = sorted(x * 1000.0 for x in latencies)
        return {
            "probes": len(ms),
            "p50_ms": _percentile(ms, 0.50),
            "p99_ms": _percentile(ms, 0.99),
            "max_ms": ms[-1] if ms else None,
            "over_100ms": sum(1 for x in ms if x > 100.0),
            "writer": json.loads(out),
            "seconds": max(ms) / 1000.0 if ms else 0.0,
        }

    ctx.step(
        "probe-max-latency",
        stream_and_probe,
        seconds_from_action=True,
        per=1,
        logical_write_bytes=p["file_bytes"],
    )
