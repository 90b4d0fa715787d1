"""Reports of one run: the JSON (everything), a markdown table with each
file system's ratio to the best kernel FS and to nullfs, and PNG plots."""

import json
import re
from pathlib import Path

KERNEL = ["ext4", "btrfs", "xfs"]
MIB = 1 << 20


def _fmt(value):
    if value is None:
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _worse_by(value, reference, better):
    """How many times worse `value` is than `reference` (1.00 = as good)."""
    if value is None or reference is None or value <= 0 or reference <= 0:
        return None
    return reference / value if better == "higher" else value / reference


def rows(results):
    """(workload, step) -> {fs: record}, in first-seen order."""
    table = {}
    for record in results:
        table.setdefault((record["workload"], record["step"]), {})[record["fs"]] = record
    return table


def markdown(run):
    results = run["results"]
    fs_order = [fs for fs in run["meta"]["filesystems"] if any(r["fs"] == fs for r in results)]
    table = rows(results)
    lines = [
        f"# Benchmark run {run['meta']['started']} ({run['meta']['mode']})",
        "",
        f"Kernel {run['meta']['kernel']}; file systems: {', '.join(fs_order) or 'none'}.",
    ]
    for fs, reason in run["meta"]["skipped"].items():
        lines.append(f"Skipped {fs}: {reason}.")
    for error in run["meta"]["errors"]:
        lines.append(f"FAILED {error['fs']} {error['workload']}: {error['error']}")
    lines += [
        "",
        "Cells: value (×K = K times worse than the best kernel FS on the row, "
        "×N = times worse than nullfs, ×P = times worse than passthrough; 1.00 = as good). "
        "↑ higher is better, ↓ lower is better.",
        "",
        "| workload | step | unit | " + " | ".join(fs_order) + " | best kernel FS |",
        "|---" * (4 + len(fs_order)) + "|",
    ]
    for (workload, step), by_fs in table.items():
        sample = next(iter(by_fs.values()))
        better = sample["better"]
        kernel = {fs: r["value"] for fs, r in by_fs.items() if fs in KERNEL and r["value"]}
        best_fs = None
        if kernel:
            pick = max if better == "higher" else min
            best_fs = pick(kernel, key=kernel.get)
        null = by_fs.get("nullfs", {}).get("value")
        passthrough = by_fs.get("passthrough", {}).get("value")
        cells = []
        for fs in fs_order:
            record = by_fs.get(fs)
            if record is None:
                cells.append("–")
                continue
            parts = []
            k = _worse_by(record["value"], kernel.get(best_fs), better)
            if k is not None:
                parts.append(f"×K {k:.2f}")
            n = _worse_by(record["value"], null, better) if fs != "nullfs" else None
            if n is not None:
                parts.append(f"×N {n:.2f}")
            # Only wodfs is held against the passthrough (issue 5's FUSE targets).
            p = _worse_by(record["value"], passthrough, better) if fs == "wodfs" else None
            if p is not None:
                parts.append(f"×P {p:.2f}")
            cells.append(_fmt(record["value"]) + (f" ({', '.join(parts)})" if parts else ""))
        arrow = "↑" if better == "higher" else "↓"
        lines.append(f"| {workload} | {step} | {sample['unit']} {arrow} | " + " | ".join(cells) + f" | {best_fs or '–'} |")

    def device_cell(r):
        if r["dev_write_bytes"] is None:
            return None
        cell = f"{r['dev_write_bytes'] / MIB:.1f} / {r['dev_read_bytes'] / MIB:.1f}"
        if r.get("logical_write_bytes"):
            cell += f" (WA {r['dev_write_bytes'] / r['logical_write_bytes']:.2f})"
        return cell

    def cpu_cell(r):
        daemon = f"{r['daemon_cpu_s']:.2f} / " if r["daemon_cpu_s"] is not None else ""
        return f"{daemon}{r['machine_cpu_s']:.2f}"

    def rss_cell(r):
        return f"{r['daemon_peak_rss_bytes'] / MIB:.0f}" if r.get("daemon_peak_rss_bytes") else None

    # Each table lists the file systems that have its measure. The FUSE
    # daemons' resident peak (`VmHWM`) is taken at the end of each step;
    # a daemon is started by each step's remount, so it is the step's
    # peak (with its mount and the sync after it).
    per_fs_tables = [
        (
            "Device traffic until durable (MiB written / MiB read; WA = device bytes written / logical bytes written)",
            _fs_with(fs_order, results, "dev_write_bytes"),
            device_cell,
        ),
        (
            "CPU seconds (FUSE daemon user+system where there is one / whole machine busy time)",
            fs_order,
            cpu_cell,
        ),
        ("FUSE daemon resident peak (MiB, VmHWM)", _fs_with(fs_order, results, "daemon_peak_rss_bytes"), rss_cell),
    ]
    for title, fs_list, cell in per_fs_tables:
        if fs_list:
            lines += _per_fs_table(title, table, fs_list, cell)

    repeated = [r for r in results if r.get("repeats")]
    if repeated:
        lines += [
            "",
            f"## Every repetition ({_rounds_said(run['meta'])}; the tables above show each step's median run)",
            "",
            "| workload | step | fs | values | max / min |",
            "|---|---|---|---|---|",
        ]
        for r in repeated:
            values = [v for v in r["repeats"] if v]
            spread = f"{max(values) / min(values):.2f}" if values else "–"
            cells = ", ".join(_fmt(v) if v is not None else "–" for v in r["repeats"])
            lines.append(f"| {r['workload']} | {r['step']} | {r['fs']} | {cells} | {spread} |")

    lines += ["", "Wall time per workload (s): " + "; ".join(
        f"{key} {seconds:.0f}" for key, seconds in run["meta"]["workload_seconds"].items()
    )]
    return "\n".join(lines) + "\n"


def _fs_with(fs_order, results, key):
    """The file systems, in `fs_order`, with a record that has `key`."""
    return [fs for fs in fs_order if any(r["fs"] == fs and r.get(key) is not None for r in results)]


def _rounds_said(meta):
    """How many rounds each workload ran (older runs only record `repeat`)."""
    repeated = [f"{name} {count}" for name, count in (meta.get("rounds") or {}).items() if count > 1]
    if not repeated:
        return f"{meta.get('repeat')} per step"
    return ", ".join(repeated) + " rounds"


def _per_fs_table(title, table, fs_list, cell):
    """A section: one row per step, one column per file system, each cell
    `cell(record)` ("–" where it is None or the step did not run)."""
    lines = [
        "",
        f"## {title}",
        "",
        "| workload | step | " + " | ".join(fs_list) + " |",
        "|---" * (2 + len(fs_list)) + "|",
    ]
    for (workload, step), by_fs in table.items():
        cells = []
        for fs in fs_list:
            r = by_fs.get(fs)
            text = cell(r) if r is not None else None
            cells.append("–" if text is None else text)
        lines.append(f"| {workload} | {step} | " + " | ".join(cells) + " |")
    return lines


def _size_of(step):
    match = re.fullmatch(r"(?:rename|unlink)-(\d+)([KMG])", step)
    if not match:
        return None
    return int(match.group(1)) << {"K": 10, "M": 20, "G": 30}[match.group(2)]


MATPLOTLIB_MISSING = (
    "matplotlib is missing in this Python (apt-get install python3-matplotlib and run "
    "/usr/bin/python3 bench/run.py, or pip install matplotlib)"
)


def plots_unavailable():
    """Why this Python cannot draw the plots, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return MATPLOTLIB_MISSING
    return None


def plots(run, out_dir):
    """Writes the PNG plots; returns their paths (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no plots: {MATPLOTLIB_MISSING}", flush=True)
        return []
    written = []
    results = run["results"]
    fs_order = run["meta"]["filesystems"]
    for workload in ("rename", "unlink"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = False
        for fs in fs_order:
            points = sorted(
                (_size_of(r["step"]), r["value"])
                for r in results
                if r["fs"] == fs and r["workload"] == workload and _size_of(r["step"])
            )
            if points:
                ax.plot([p[0] / 1024 for p in points], [p[1] for p in points], marker="o", label=fs)
                drawn = True
        if drawn:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("file size (KiB)")
            ax.set_ylabel(f"ms per {workload} (+ fsync of the directory)")
            ax.set_title(f"{workload} cost versus file size")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
            path = Path(out_dir) / f"{workload}-cost.png"
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            written.append(path)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for fs in fs_order:
        series = run["series"].get(fs, {}).get("tokubench/tokubench-create")
        if not series or len(series) < 2:
            continue
        times, rates = [], []
        for (t0, n0), (t1, n1) in zip(series, series[1:]):
            if t1 > t0:
                times.append(t1)
                rates.append((n1 - n0) / (t1 - t0))
        ax.plot(times, rates, label=fs)
        drawn = True
    if drawn:
        ax.set_xlabel("seconds since start")
        ax.set_ylabel("files created per second")
        ax.set_title("TokuBench create rate over time")
        ax.grid(True, alpha=0.3)
        ax.legend()
        path = Path(out_dir) / "tokubench-rate.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        written.append(path)
    plt.close(fig)
    return written


def write_all(run, out_root):
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    stem = f"{run['meta']['started'].replace(':', '')}-{run['meta']['mode']}"
    json_path = out_root / f"{stem}.json"
    json_path.write_text(json.dumps(run, indent=1, default=str))
    md_path = out_root / f"{stem}.md"
    md_path.write_text(markdown(run))
    plot_dir = out_root / stem
    plot_dir.mkdir(exist_ok=True)
    pngs = plots(run, plot_dir)
    return json_path, md_path, pngs
