"""Repeated runs of a workload reduced to one record per step.

This machine's timings swing by tens of percent from one run to the next
for reasons outside any file system (memory handed back to the host is
slow to touch again: bench/RESULTS.md, session 25). `--repeat N` runs each
workload N times, rotating the order of the file systems, and keeps per
(file system, workload, step) the repetition with the median value, whole
(its device bytes and CPU times belong to that same run), plus every
repetition's value in `repeats`.

A workload whose steps last about a second or less (a git clone, 32
unlinks, 10,000 random 4-byte writes) is measured once per file system
in a full run only at the cost of one slow second deciding its ratio:
such a module sets `ROUNDS`, the rounds a full run gives it at least
(session 51's full run had git diff at 0.40x nullfs, the median of five
rounds 0.83x).
"""


def rounds_of(module, repeat, quick):
    """How many rounds `module` runs: `--repeat`, raised to the module's
    own `ROUNDS` in a full run (a quick run's sizes measure nothing)."""
    return repeat if quick else max(repeat, getattr(module, "ROUNDS", 1))


def rotated(items, turn):
    """`items` rotated left by `turn`: who goes first changes every round."""
    if not items:
        return []
    turn %= len(items)
    return items[turn:] + items[:turn]


def median_record(records):
    """The record with the median value (the lower one of an even count);
    records without a value rank last."""
    ranked = sorted(records, key=lambda r: (r["value"] is None, r["value"] or 0))
    chosen = dict(ranked[(len(ranked) - 1) // 2])
    chosen["repeats"] = [r["value"] for r in records]
    return chosen


def collapse(results):
    """One record per (fs, workload, step), in first-seen order; a step
    measured once is returned as it is."""
    groups = {}
    for record in results:
        groups.setdefault((record["fs"], record["workload"], record["step"]), []).append(record)
    return [records[0] if len(records) == 1 else median_record(records) for records in groups.values()]
