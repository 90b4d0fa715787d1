#!/usr/bin/env python3
"""Flags the wodfs steps that got slower, or kept more memory, from one
run to the next.

    python3 bench/compare.py PREVIOUS.json RUN.json [--factor F]

For every step both runs measured on wodfs: its wall time now against
then, divided by nullfs's own change on the same step when both runs have
it (the machine's speed moves between runs; nullfs is FUSE without
storage, so what it lost is not ours), and its resident peak. Prints a
markdown table of the steps whose time grew by more than F (default 1.2)
both as measured and after that correction, or whose peak grew by more
than F and 64 MiB, and exits 1 if there is any. A row is a place to
look: single runs of short steps move by more than that. Steps under
50 ms are left out: their times are mostly noise.

Session 34's range-move change doubled the 256 MiB rename (33.9 -> 68.4
s) and raised its peak (455 -> 553 MiB); the full run showed it and
nobody compared.
"""

import json
import sys
from pathlib import Path

MIN_WALL_S = 0.05
PEAK_SLACK_BYTES = 64 << 20


def by_step(run, fs):
    return {(r["workload"], r["step"]): r for r in run["results"] if r["fs"] == fs}


def regressions(previous, current, factor):
    """(workload, step, what, then, now, nullfs change, corrected change)
    for every regression found, in the current run's order."""
    old, new = by_step(previous, "wodfs"), by_step(current, "wodfs")
    old_null, new_null = by_step(previous, "nullfs"), by_step(current, "nullfs")
    out = []
    for key, now in new.items():
        then = old.get(key)
        if then is None:
            continue
        t0, t1 = then.get("wall_s"), now.get("wall_s")
        if t0 and t1 and min(t0, t1) >= MIN_WALL_S:
            drift = 1.0
            n0, n1 = old_null.get(key, {}).get("wall_s"), new_null.get(key, {}).get("wall_s")
            if n0 and n1:
                drift = n1 / n0
            measured = t1 / t0
            change = measured / drift
            # Slower as measured too: a step that held its time while
            # nullfs got faster is the reference's noise more often than
            # ours.
            if change > factor and measured > factor:
                out.append((*key, "wall s", t0, t1, drift, change))
        p0, p1 = then.get("daemon_peak_rss_bytes"), now.get("daemon_peak_rss_bytes")
        if p0 and p1 and p1 > p0 * factor and p1 - p0 > PEAK_SLACK_BYTES:
            out.append((*key, "peak MiB", p0 / 2**20, p1 / 2**20, None, p1 / p0))
    return out


def table(found):
    lines = ["| workload | step | what | then | now | nullfs change | change |", "|---|---|---|---|---|---|---|"]
    for workload, step, what, then, now, drift, change in found:
        shown = "" if drift is None else f"{drift:.2f}×"
        lines.append(f"| {workload} | {step} | {what} | {then:.2f} | {now:.2f} | {shown} | **{change:.2f}×** |")
    return "\n".join(lines)


def main(argv):
    factor = 1.2
    if "--factor" in argv:
        i = argv.index("--factor")
        factor = float(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    if len(argv) != 2:
        raise SystemExit(__doc__)
    previous, current = (json.loads(Path(p).read_text()) for p in argv)
    found = regressions(previous, current, factor)
    if not found:
        print(f"no wodfs step slower than {factor}× (after nullfs's change) or with a larger resident peak")
        return 0
    print(table(found))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
