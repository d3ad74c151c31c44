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


def percentile(values, q):
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", default="bench/results/spawn.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (cela run needs it; bwrap runs as root too, for parity)")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SystemExit("bwrap not found: apt-get install bubblewrap (make deps does)")
    true = "/bin/true"
    cela = os.path.abspath(args.cela)
    # The same namespaces cela creates (user, pid, mount, uts, ipc, net, cgroup), the
    # host's /usr read-only, fresh /proc and /dev, like cela's dev-only host template.
    tools = {
        "fork+exec": [true],
        "bwrap": [bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/usr", "/usr",
                  "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                  "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--die-with-parent", true],
        "cela": [cela, "run", "--template", "host", "--", true],
    }
    for name, argv in tools.items():
        for _ in range(args.warmup):
            spawn_wait(argv)
    times = {name: [] for name in tools}
    for _ in range(args.runs):
        for name, argv in tools.items():
            times[name].append(spawn_wait(argv))

    report = {"runs": args.runs, "host": os.uname().release, "cpus": os.cpu_count(), "tools": {}}
    print(f"spawn of /bin/true, {args.runs} interleaved runs each (ms)")
    print(f"{'tool':<10} {'p50':>8} {'p95':>8} {'mean':>8}")
    for name, vals in times.items():
        p50, p95 = percentile(vals, 0.5), percentile(vals, 0.95)
        report["tools"][name] = {"p50_ms": p50, "p95_ms": p95, "mean_ms": statistics.mean(vals), "samples_ms": vals}
        print(f"{name:<10} {p50:8.2f} {p95:8.2f} {statistics.mean(vals):8.2f}")
    c, b, f = (report["tools"][k]["p50_ms"] for k in ("cela", "bwrap", "fork+exec"))
    report["ratios"] = {"cela_to_bwrap_p50": c / b, "cela_to_fork_exec_p50": c / f, "bwrap_to_fork_exec_p50": b / f,
                        "target_cela_to_bwrap_p50": 1.5}
    print(f"ratio cela/bwrap p50: {c / b:.2f}x (target <= 1.5x)")
    print(f"ratio cela/fork+exec p50: {c / f:.2f}x; bwrap/fork+exec p50: {b / f:.2f}x")
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
        print(f"raw figures: {args.json}")


if __name__ == "__main__":
    sys.exit(main())
