#!/usr/bin/env python3
"""Runs the wodfs benchmark: every workload on every file system, in one
run, on identical devices, and writes bench/out/<start>-<mode>.{json,md}
plus PNG plots.

    sudo python3 bench/run.py                 # full suite (hours)
    sudo python3 bench/run.py --quick         # tiny sizes, ~2-3 minutes
    sudo python3 bench/run.py --fs nullfs,passthrough --workload rename,unlink
    sudo python3 bench/run.py --mem-limit-mib 4096

Each file system gets its own sparse image of the same size attached with
`losetup --direct-io=on`; each workload starts from a fresh mkfs; caches
are emptied (unmount + remount + drop_caches) before each measured step.
Loop devices, mounts, daemons and the cgroup are removed even on failure.
A full run stops before it starts if this machine lacks a file system, a
workload's tool (postmark, fs_mark, git, the kernel source) or matplotlib
for the plots: its report would lack targets without saying so loudly
(`--missing skip` runs without them; the default of --quick).
Exit status: 0 when every workload that could run passed; 2 when a full
run found something missing and ran nothing.
"""

import argparse
import datetime
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from harness import filesystems, repeats, report, system  # noqa: E402
from harness.cgroup import MemoryCgroup  # noqa: E402
from harness.inputs import Inputs  # noqa: E402
from harness.measure import Context  # noqa: E402
import workloads  # noqa: E402

REPO = BENCH.parent
GIB = 1 << 30


def log(message):
    print(message, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: every workload on every FS in minutes")
    parser.add_argument("--fs", action="append", help=f"comma-separated subset of {','.join(filesystems.ALL)}")
    parser.add_argument(
        "--workload", action="append", help=f"comma-separated subset of {','.join(workloads.BY_NAME)}"
    )
    parser.add_argument("--mem-limit-mib", type=int, help="run the harness and FS daemons in a memory cgroup (v1)")
    parser.add_argument("--workdir", default="/var/tmp/wodfs-bench", help="images and mount points")
    parser.add_argument(
        "--cache-dir", default="/var/tmp/wodfs-bench-cache", help="decompressed source tarball, kept between runs"
    )
    parser.add_argument("--out", default=str(BENCH / "out"), help="where reports go")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each workload N times (at least its own ROUNDS in a full run), rotating the file systems' "
        "order; report each step's median run",
    )
    parser.add_argument("--image-gib", type=int, help="size of each sparse image (default 32, quick 3)")
    parser.add_argument(
        "--timeout-s", type=int, help="limit per workload and FS (default 3 h, quick 120 s); the FS is then killed"
    )
    parser.add_argument(
        "--missing",
        choices=["fail", "skip"],
        help="what a file system, workload tool or plotting library this machine lacks does: stop the run "
        "before it starts (default of a full run, whose report would silently lack targets) or be skipped "
        "with a note in the report (default of --quick)",
    )
    parser.add_argument(
        "--ref-writeback",
        action="store_true",
        help="let nullfs and passthrough take the kernel's writeback cache, which wodfs does not (by default "
        "they negotiate exactly wodfs's INIT flags, as issue 5 asks; sessions up to 54 ran them with it)",
    )
    parser.add_argument(
        "--bin-dir",
        help="directory with fuse-ref and fsbench (default: build them); its wodfs, if any, is the one measured",
    )
    args = parser.parse_args(argv)

    def split(values, known):
        if not values:
            return list(known)
        chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
        unknown = [v for v in chosen if v not in known]
        if unknown:
            parser.error(f"unknown: {', '.join(unknown)}; known: {', '.join(known)}")
        return [k for k in known if k in chosen]

    args.fs = split(args.fs, filesystems.ALL)
    args.workload = split(args.workload, list(workloads.BY_NAME))
    if args.timeout_s is None:
        args.timeout_s = 120 if args.quick else 3 * 3600
    if args.image_gib is None:
        args.image_gib = 3 if args.quick else 32
    if args.missing is None:
        args.missing = "skip" if args.quick else "fail"
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def build_tools(bin_dir):
    """Paths of fuse-ref and fsbench, building them (release) if needed."""
    if bin_dir:
        base = Path(bin_dir)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
        base = target / "release"
        log("building fuse-ref and fsbench (cargo build --release -p fuse-ref)")
        subprocess.run(
            ["nice", "-n", "15", "cargo", "build", "--release", "-q", "-p", "fuse-ref"],
            cwd=REPO,
            check=True,
        )
    tools = {"fuse-ref": base / "fuse-ref", "fsbench": base / "fsbench"}
    for name, path in tools.items():
        if not path.exists():
            raise SystemExit(f"{name} not found at {path}")
    return {name: str(path) for name, path in tools.items()}


class Stop(Exception):
    pass


class Timeout(Exception):
    pass


def on_signal(signum, _frame):
    raise Stop(f"signal {signum}")


def on_alarm(_signum, _frame):
    raise Timeout("workload timed out (a hung file system?)")


def main(argv):
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the harness attaches loop devices, mounts and drops caches")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tools = build_tools(args.bin_dir)
    # A wodfs beside the tools is the build under test: an older one on
    # PATH (the README's install) must not be measured by mistake.
    if args.bin_dir and (Path(args.bin_dir) / "wodfs").is_file() and "WODFS_BIN" not in os.environ:
        os.environ["WODFS_BIN"] = str(Path(args.bin_dir) / "wodfs")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    mode = "quick" if args.quick else "full"
    run = {
        "meta": {
            "started": started,
            "mode": mode,
            "kernel": system.kernel_release(),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "image_bytes": args.image_gib * GIB,
            "mem_limit_mib": args.mem_limit_mib,
            "repeat": args.repeat,
            "ref_writeback": args.ref_writeback,
            "rounds": {},
            "filesystems": [],
            "wodfs_binary": filesystems.find_wodfs(),
            "workloads": args.workload,
            "params": {name: workloads.BY_NAME[name].params(args.quick) for name in args.workload},
            "skipped": {},
            "workload_skipped": {},
            "errors": [],
            "workload_seconds": {},
        },
        "results": [],
        "series": {},
    }
    meta = run["meta"]
    inputs = Inputs(args.cache_dir, args.quick, log)
    fs_list = []
    for name in args.fs:
        ref_options = ["--writeback"] if args.ref_writeback else []
        fs = filesystems.make(name, workdir, args.image_gib * GIB, tools["fuse-ref"], ref_options)
        try:
            fs.check_available()
        except filesystems.Unavailable as why:
            log(f"skipping {name}: {why}")
            meta["skipped"][name] = str(why)
            continue
        fs_list.append(fs)
    meta["filesystems"] = [fs.name for fs in fs_list]
    if "wodfs" in meta["filesystems"]:
        log(f"wodfs binary: {meta['wodfs_binary']}")

    selected = []
    for name in args.workload:
        module = workloads.BY_NAME[name]
        why = module.needs()
        if why is None and name in ("srctree", "git"):
            why = inputs.available()
        if why:
            log(f"skipping workload {name}: {why}")
            meta["workload_skipped"][name] = why
        else:
            selected.append(module)
    no_plots = None if args.quick else report.plots_unavailable()
    lacking = list(meta["skipped"].items()) + list(meta["workload_skipped"].items())
    if no_plots:
        log(f"no plots: {no_plots}")
        meta["plots_skipped"] = no_plots
        lacking.append(("plots", no_plots))
    if lacking and args.missing == "fail":
        for what, why in lacking:
            log(f"missing: {what}: {why}")
        log("nothing was run: install what is missing, or pass --missing skip to run without it")
        return 2
    cgroup = MemoryCgroup(args.mem_limit_mib) if args.mem_limit_mib else None
    set_up = []
    t_start = time.monotonic()
    try:
        # Inputs are built before the cgroup so their memory is not charged to it.
        for module in selected:
            if module.NAME == "srctree":
                inputs.source_tar()
                inputs.source_tree()
            if module.NAME == "git":
                inputs.git_repo()
        if cgroup:
            cgroup.enter()
            log(f"memory cgroup {cgroup.path} limited to {args.mem_limit_mib} MiB")
        for fs in fs_list:
            fs.setup()
            set_up.append(fs)
        for module in selected:
            params = module.params(args.quick)
            log(f"== {module.NAME} {params}")
            count = repeats.rounds_of(module, args.repeat, args.quick)
            meta["rounds"][module.NAME] = count
            rounds = [(turn, fs) for turn in range(count) for fs in repeats.rotated(fs_list, turn)]
            for turn, fs in rounds:
                if count > 1:
                    log(f"  round {turn + 1} of {count}: {fs.name}")
                ctx = Context(fs, module.NAME, params, tools, inputs, args.quick, log)
                ctx.workdir = workdir
                began = time.monotonic()
                try:
                    signal.alarm(args.timeout_s)
                    fs.mkfs()
                    fs.mount()
                    module.run(ctx)
                    signal.alarm(0)
                except Stop:
                    raise
                except Timeout as error:
                    log(f"  FAILED {fs.name} {module.NAME}: {error}; killing it")
                    meta["errors"].append({"fs": fs.name, "workload": module.NAME, "error": str(error)})
                    fs.abort()
                except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                    detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                    log(f"  FAILED {fs.name} {module.NAME}: {detail}")
                    traceback.print_exc()
                    meta["errors"].append({"fs": fs.name, "workload": module.NAME, "error": detail})
                finally:
                    signal.alarm(0)
                    run["results"].extend(ctx.results)
                    for step, series in ctx.series.items():
                        run["series"].setdefault(fs.name, {})[f"{module.NAME}/{step}"] = series
                    seconds_key = f"{fs.name} {module.NAME}"
                    meta["workload_seconds"][seconds_key] = (
                        meta["workload_seconds"].get(seconds_key, 0) + time.monotonic() - began
                    )
                    try:
                        fs.unmount()
                        fs.release_space()
                    except Exception as error:  # noqa: BLE001
                        log(f"  unmount of {fs.name} failed: {error}")
    except (Stop, KeyboardInterrupt) as why:
        log(f"interrupted ({why}); cleaning up")
        meta["errors"].append({"fs": "-", "workload": "-", "error": f"interrupted: {why}"})
    finally:
        for fs in reversed(set_up):
            try:
                fs.teardown()
            except Exception as error:  # noqa: BLE001
                log(f"teardown of {fs.name} failed: {error}")
        if cgroup:
            meta["mem_peak_bytes"] = cgroup.peak_bytes()
            cgroup.leave()
        inputs.cleanup()
        meta["total_seconds"] = time.monotonic() - t_start
        if any(count > 1 for count in meta["rounds"].values()):
            run["repeated_results"] = run["results"]
            run["results"] = repeats.collapse(run["results"])
        json_path, md_path, pngs = report.write_all(run, args.out)
        log(f"wrote {json_path}, {md_path}" + "".join(f", {p}" for p in pngs))
        log(f"total {meta['total_seconds']:.0f} s; {len(meta['errors'])} failure(s)")
    return 1 if meta["errors"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
