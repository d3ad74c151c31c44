#!/usr/bin/python3
"""Spawn benchmark: cela run vs bubblewrap vs plain fork+exec, in one run.

Each round runs the three commands once, in turn, so machine noise hits them alike.
Prints p50/p95 per tool and the ratios to bwrap and to the fork+exec floor, and
writes the raw figures as JSON. A benchmark, not a test: it asserts nothing.

    python3 bench/spawn.py --cela build/cela [--runs 200] [--json bench/results/spawn.json]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

TRUE = "/bin/true"


def spawn_wait(argv):
    """posix_spawn + waitpid: the same, minimal harness cost for every tool."""
    devnull = os.open(os.devnull, os.O_RDWR)
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"},
                         file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1)])
    _, status = os.waitpid(pid, 0)
    elapsed = (time.perf_counter_ns() - t0) / 1e6
    os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed (status {status}): {' '.join(argv)}")
    return elapsed


def bwrap_argv(argv=(TRUE,)):
    """bwrap with the namespaces cela creates (user, pid, mount, uts, ipc, net, cgroup),
    the host's /usr read-only, fresh /proc, /dev and /tmp: like cela's dev-only host
    template."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SystemExit("bwrap not found: apt-get install bubblewrap (make deps does)")
    return [bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--die-with-parent", *argv]


def cela_run_argv(cela, argv=(TRUE,)):
    return [os.path.abspath(cela), "run", "--template", "host", "--", *argv]


def spawn_tools(cela):
    """The three one-shot commands of the spawn figure, by name."""
    return {"fork+exec": [TRUE], "bwrap": bwrap_argv(), "cela": cela_run_argv(cela)}


def measure(tools, runs, warmup=10):
    """{name: [ms, ...]}: `warmup` unmeasured runs of each, then `runs` rounds that run
    every tool once, interleaved."""
    for argv in tools.values():
        for _ in range(warmup):
            spawn_wait(argv)
    times = {name: [] for name in tools}
    for _ in range(runs):
        for name, argv in tools.items():
            times[name].append(spawn_wait(argv))
    return times


def summary(samples):
    return {"p50_ms": pct(samples, .5), "p95_ms": pct(samples, .95), "mean_ms": statistics.mean(samples),
            "runs": len(samples)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", default="bench/results/spawn.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (cela run needs it; bwrap runs as root too, for parity)")
    times = measure(spawn_tools(args.cela), args.runs, args.warmup)

    report = {"runs": args.runs, "host": os.uname().release, "cpus": os.cpu_count(), "tools": {}}
    print(f"spawn of /bin/true, {args.runs} interleaved runs each (ms)")
    print(f"{'tool':<10} {'p50':>8} {'p95':>8} {'mean':>8}")
    for name, vals in times.items():
        s = summary(vals)
        report["tools"][name] = {**s, "samples_ms": vals}
        print(f"{name:<10} {s['p50_ms']:8.2f} {s['p95_ms']:8.2f} {s['mean_ms']:8.2f}")
    c, b, f = (report["tools"][k]["p50_ms"] for k in ("cela", "bwrap", "fork+exec"))
    report["ratios"] = {"cela_to_bwrap_p50": c / b, "cela_to_fork_exec_p50": c / f, "bwrap_to_fork_exec_p50": b / f,
                        "target_cela_to_bwrap_p50": 1.0}
    print(f"ratio cela/bwrap p50: {c / b:.2f}x (target <= 1.0x)")
    print(f"ratio cela/fork+exec p50: {c / f:.2f}x; bwrap/fork+exec p50: {b / f:.2f}x")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
        print(f"raw figures: {args.json}")


if __name__ == "__main__":
    sys.exit(main())
