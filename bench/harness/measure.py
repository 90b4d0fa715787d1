"""One measured step: wall time, the derived rate, CPU of the FS daemon and
of the machine, and the device's I/O counted until the data is durable."""

import time

from . import system

MIB = 1 << 20


class Context:
    """What a workload sees: the mounted file system, its parameters, the
    inputs and tools, and `step()` to measure something."""

    def __init__(self, fs, workload, params, tools, inputs, quick, log):
        self.fs = fs
        self.workload = workload
        self.params = params
        self.tools = tools
        self.inputs = inputs
        self.quick = quick
        self.log = log
        self.results = []
        self.series = {}

    @property
    def root(self):
        return self.fs.root

    def _snapshot(self):
        device = self.fs.device
        pid = self.fs.daemon_pid()
        return {
            "time": time.perf_counter(),
            "io": system.block_stat(device) if device else None,
            "daemon_cpu": system.process_cpu_s(pid) if pid else None,
            "daemon_hwm": system.process_peak_rss_bytes(pid) if pid else None,
            "daemon_pid": pid,
            "machine_cpu": system.machine_cpu_s(),
        }

    def cold(self):
        self.fs.cold()

    def step(
        self,
        name,
        action,
        *,
        amount=None,
        unit="s",
        better="lower",
        per=None,
        cold=True,
        durable=True,
        logical_write_bytes=None,
        seconds_from_action=False,
    ):
        """Measures `action()`.

        The value is the wall time in seconds by default; `amount` / time
        with `unit` for a rate (higher is better); or time / `per` in ms
        with `per` for a cost per operation. `cold` empties every cache
        first. The time stops when `action` returns; the device and CPU
        counters stop after `make_durable()`, so they include the data
        the step left in caches. With `seconds_from_action`, `action`
        returns a dict with "seconds" measured by the tool itself.
        """
        cold_start = self._snapshot()
        if cold:
            self.fs.cold()
        before = self._snapshot()
        extra = action()
        if not isinstance(extra, dict):
            extra = {}
        stopped = time.perf_counter()
        sync_s = None
        if durable:
            self.fs.make_durable()
            sync_s = time.perf_counter() - stopped
        after = self._snapshot()
        wall_s = stopped - before["time"]
        if seconds_from_action and "seconds" in extra:
            wall_s = float(extra["seconds"])
        if per is not None:
            value, unit, better = wall_s / per * 1000.0, "ms", "lower"
        elif amount is not None:
            value, better = amount / wall_s if wall_s > 0 else float("inf"), "higher"
        else:
            value = wall_s
        record = {
            "workload": self.workload,
            "step": name,
            "fs": self.fs.name,
            "value": value,
            "unit": unit,
            "better": better,
            "wall_s": wall_s,
            "sync_s": sync_s,
            "machine_cpu_s": after["machine_cpu"] - before["machine_cpu"],
            "daemon_cpu_s": None,
            # The daemon's resident peak since it was started (its mount):
            # the issue bounds it by the cache budget plus a fixed overhead.
            "daemon_peak_rss_bytes": after["daemon_hwm"],
            "dev_read_ios": None,
            "dev_read_bytes": None,
            "dev_write_ios": None,
            "dev_write_bytes": None,
            "logical_write_bytes": logical_write_bytes,
        }
        if before["daemon_pid"] and before["daemon_pid"] == after["daemon_pid"] and after["daemon_cpu"] is not None:
            record["daemon_cpu_s"] = after["daemon_cpu"] - before["daemon_cpu"]
        if cold:
            # What emptying the caches cost, kept apart from the step: a file
            # system that reads ahead at mount shows it here.
            record["cold_s"] = before["time"] - cold_start["time"]
            if cold_start["io"] and before["io"]:
                record["cold_dev_read_bytes"] = before["io"][1] - cold_start["io"][1]
                record["cold_dev_write_bytes"] = before["io"][3] - cold_start["io"][3]
        if before["io"] and after["io"]:
            record["dev_read_ios"] = after["io"][0] - before["io"][0]
            record["dev_read_bytes"] = after["io"][1] - before["io"][1]
            record["dev_write_ios"] = after["io"][2] - before["io"][2]
            record["dev_write_bytes"] = after["io"][3] - before["io"][3]
        extra_fields = {k: v for k, v in extra.items() if k != "series"}
        if extra_fields:
            record["extra"] = extra_fields
        if "series" in extra:
            self.series[name] = extra["series"]
        self.results.append(record)
        shown = f"{value:.4g} {unit}"
        io = ""
        if record["dev_write_bytes"] is not None:
            io = f", dev W {record['dev_write_bytes'] / MIB:.1f} MiB R {record['dev_read_bytes'] / MIB:.1f} MiB"
        cpu = f", daemon CPU {record['daemon_cpu_s']:.2f} s" if record["daemon_cpu_s"] is not None else ""
        self.log(f"  {self.fs.name:12} {self.workload}/{name}: {shown} (wall {wall_s:.3f} s{io}{cpu})")
        return record
