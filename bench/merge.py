#!/usr/bin/env python3
"""Merges the JSON of several runs into one report, so a long run of the
reference file systems and later re-runs of wodfs alone make one table.

    python3 bench/merge.py OUT_DIR RUN.json [RUN.json ...]

For each (file system, workload) the results of the last run that has any
come in whole (never single steps from different runs). The merged JSON
names its sources in meta.merged_from; the markdown and plots are those of
run.py.
"""

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from harness import filesystems, report  # noqa: E402


def merge(runs):
    chosen = {}
    for index, run in enumerate(runs):
        for record in run["results"]:
            chosen[(record["fs"], record["workload"])] = index
    results, series, seconds, errors = [], {}, {}, []
    workloads = []
    for index, run in enumerate(runs):
        for name in run["meta"]["workloads"]:
            if name not in workloads:
                workloads.append(name)
        for record in run["results"]:
            if chosen[(record["fs"], record["workload"])] == index:
                results.append(record)
        for fs, by_step in run["series"].items():
            for key, values in by_step.items():
                if chosen.get((fs, key.split("/")[0])) == index:
                    series.setdefault(fs, {})[key] = values
        for key, value in run["meta"]["workload_seconds"].items():
            fs, workload = key.split(" ", 1)
            if chosen.get((fs, workload)) == index:
                seconds[key] = value
        for error in run["meta"]["errors"]:
            if chosen.get((error["fs"], error["workload"]), index) == index:
                errors.append(dict(error, run=run["meta"]["started"]))
    # Rows in workload order, then file-system order, as run.py writes them.
    order = {name: i for i, name in enumerate(workloads)}
    fs_rank = {name: i for i, name in enumerate(filesystems.ALL)}
    results.sort(key=lambda r: (order.get(r["workload"], 99), fs_rank.get(r["fs"], 99)))
    present = {r["fs"] for r in results}
    params = {}
    for run in runs:
        params.update(run["meta"]["params"])
    last = runs[-1]["meta"]
    meta = {
        "started": last["started"],
        "mode": "merged-" + "+".join(sorted({run["meta"]["mode"] for run in runs})),
        "kernel": last["kernel"],
        "machine": last["machine"],
        "image_bytes": last["image_bytes"],
        "mem_limit_mib": last["mem_limit_mib"],
        "filesystems": [fs for fs in filesystems.ALL if fs in present],
        "workloads": workloads,
        "params": params,
        "skipped": {},
        "workload_skipped": {},
        "errors": errors,
        "workload_seconds": seconds,
        "merged_from": [run["meta"]["started"] for run in runs],
    }
    return {"meta": meta, "results": results, "series": series}


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    runs = [json.loads(Path(p).read_text()) for p in argv[1:]]
    merged = merge(runs)
    json_path, md_path, pngs = report.write_all(merged, argv[0])
    print(f"wrote {json_path}, {md_path}" + "".join(f", {p}" for p in pngs))


if __name__ == "__main__":
    main(sys.argv[1:])
