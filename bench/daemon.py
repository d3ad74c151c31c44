#!/usr/bin/python3
"""Daemon benchmark: a private `cela serve` driven over its unix socket, with bwrap
spawned per exec as the reference where it applies. Prints p50/p95 and ratios and
writes the raw figures as JSON. A benchmark, not a test: it asserts nothing.

    python3 bench/daemon.py --cela build/cela [--sessions 50,200] [--runs 100]

Measures: session create (cold), exec round trip of /bin/true (POST .../run),
first output byte over SSE, and with N concurrent sessions: create throughput,
memory per idle session (init's RSS + the session cgroup's memory.usage), and the
exec latency of a quiet session while 4 sessions spin CPU (ratio to idle).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)
import harness  # noqa: E402



def daemon_cpu_ns(pid):
    """CPU time every thread of process `pid` has run (schedstat, ns)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--sessions", default="50,200")
    ap.add_argument("--json", default="bench/results/daemon.json")
    args = ap.parse_args()
    Daemon = harness.daemon_util(args.cela).Daemon

    counts = [int(x) for x in args.sessions.split(",")]
    # Many idle sessions: grants far above what they use (docs/operations.md, admission).
    d = Daemon({"max_sessions": max(counts) + 10, "blocking_threads": 32,
                "admission": {"overcommit": {"memory": 100, "pids": 100, "files": 10000}},
                "tenant_quotas": {"max_sessions": max(counts) + 10, "max_memory_mb": 10 ** 7, "max_cpus": 4}}).start()
    report = {"runs": args.runs, "cpus": os.cpu_count()}
    body = {"template": "host", "limits": {"memory_mb": 128, "idle_timeout_s": 3600}}
    try:
        # Cold create (each session deleted before the next).
        create = []
        for _ in range(max(10, args.runs // 4)):
            ms, (st, s, _) = timed(lambda: d.request("POST", "/v1/sessions", body))
            assert st == 201, s
            create.append(ms)
            d.delete(s["id"])
        report["create_ms"] = {"p50": pct(create, .5), "p95": pct(create, .95)}

        sid = d.session(limits={"memory_mb": 128})
        rt = [timed(lambda: d.request("POST", f"/v1/sessions/{sid}/run", {"argv": ["/bin/true"]}))[0]
              for _ in range(args.runs)]
        report["exec_roundtrip_ms"] = {"p50": pct(rt, .5), "p95": pct(rt, .95)}

        # The same over one keep-alive connection (what a client library does), and the
        # daemon's CPU time per exec (all its threads) meanwhile.
        from daemon_util import UnixConnection
        ka = UnixConnection(d.socket)
        run_body = json.dumps({"argv": ["/bin/true"]})

        def run_keepalive():
            ka.request("POST", f"/v1/sessions/{sid}/run", body=run_body, headers={"Content-Type": "application/json"})
            resp = ka.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
        cpu0 = daemon_cpu_ns(d.proc.pid)
        rtk = [timed(run_keepalive)[0] for _ in range(args.runs)]
        report["daemon_cpu_per_exec_ms"] = (daemon_cpu_ns(d.proc.pid) - cpu0) / 1e6 / args.runs
        ka.close()
        report["exec_roundtrip_keepalive_ms"] = {"p50": pct(rtk, .5), "p95": pct(rtk, .95)}

        # First output byte over SSE: exec start -> first stdout event.
        first = []
        for _ in range(max(10, args.runs // 4)):
            t0 = time.perf_counter()
            st, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs", {"argv": ["echo", "x"]})
            from daemon_util import UnixConnection
            c = UnixConnection(d.socket)
            c.request("GET", f"/v1/sessions/{sid}/execs/{e['id']}/output?follow=1")
            r = c.getresponse()
            while True:
                line = r.fp.readline()
                if line.startswith(b"data:") or not line:
                    break
            first.append((time.perf_counter() - t0) * 1000)
            c.close()
        report["first_output_byte_ms"] = {"p50": pct(first, .5), "p95": pct(first, .95)}

        # Reference: bwrap per exec (same namespaces, host /usr), fork+exec /bin/true.
        bwrap = shutil.which("bwrap")
        ref = [bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
               "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
               "/bin/true"]
        bw = [timed(lambda: subprocess.run(ref, check=True))[0] for _ in range(args.runs)]
        report["bwrap_exec_ms"] = {"p50": pct(bw, .5), "p95": pct(bw, .95)}
        d.delete(sid)

        for n in counts:
            t0 = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                ids = list(pool.map(lambda _: d.session(limits={"memory_mb": 128, "idle_timeout_s": 3600}), range(n)))
            elapsed = time.perf_counter() - t0
            time.sleep(1)
            rss, cg, private, pss = [], [], [], []

            def smaps(pid, key):
                for line in open(f"/proc/{pid}/smaps_rollup"):
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024
                return 0
            for s in ids:
                procs = open(f"/sys/fs/cgroup/pids/cela/{s}/cgroup.procs").read().split()
                rss.append(sum(int(open(f"/proc/{p}/status").read().split("VmRSS:")[1].split()[0]) * 1024
                               for p in procs))
                # RSS counts library pages every init shares; private + PSS show the real cost.
                private.append(sum(smaps(p, "Private_Dirty") + smaps(p, "Private_Clean") for p in procs))
                pss.append(sum(smaps(p, "Pss") for p in procs))
                cg.append(int(open(f"/sys/fs/cgroup/memory/cela/{s}/memory.usage_in_bytes").read()))
            quiet = ids[0]
            idle = [timed(lambda: d.request("POST", f"/v1/sessions/{quiet}/run", {"argv": ["/bin/true"]}))[0]
                    for _ in range(30)]
            spinners = []
            for s in ids[1:5]:
                st, e, _ = d.request("POST", f"/v1/sessions/{s}/execs",
                                     {"cmd": "while :; do :; done", "timeout_s": 120})
                spinners.append((s, e["id"]))
            time.sleep(1)
            busy = [timed(lambda: d.request("POST", f"/v1/sessions/{quiet}/run", {"argv": ["/bin/true"]}))[0]
                    for _ in range(30)]
            for s, e in spinners:
                d.request("POST", f"/v1/sessions/{s}/execs/{e}/kill", {"signal": "SIGKILL"})
            t1 = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(d.delete, ids))
            report[f"sessions_{n}"] = {
                "create_per_s": n / elapsed,
                "idle_rss_bytes_mean": statistics.mean(rss),
                "idle_cgroup_bytes_mean": statistics.mean(cg),
                "idle_session_bytes_mean": statistics.mean(r + c for r, c in zip(rss, cg)),
                "idle_private_bytes_mean": statistics.mean(private),
                "idle_pss_bytes_mean": statistics.mean(pss),
                "quiet_exec_idle_p50_ms": pct(idle, .5),
                "quiet_exec_noisy_p50_ms": pct(busy, .5),
                "noisy_neighbour_ratio": pct(busy, .5) / pct(idle, .5),
                "delete_per_s": n / (time.perf_counter() - t1),
            }
    finally:
        d.close()

    c, r, f, b = report["create_ms"], report["exec_roundtrip_ms"], report["first_output_byte_ms"], report["bwrap_exec_ms"]
    print(f"{'metric':<36} {'p50':>9} {'p95':>9}")
    print(f"{'session create, cold (ms)':<36} {c['p50']:9.2f} {c['p95']:9.2f}   target p50 <= 25")
    print(f"{'exec round trip /bin/true (ms)':<36} {r['p50']:9.2f} {r['p95']:9.2f}   target p50 <= 5")
    k = report["exec_roundtrip_keepalive_ms"]
    print(f"{'exec round trip, keep-alive (ms)':<36} {k['p50']:9.2f} {k['p95']:9.2f}   target p50 <= 1.5")
    print(f"{'daemon CPU per exec (ms)':<36} {report['daemon_cpu_per_exec_ms']:9.2f}")
    print(f"{'first output byte over SSE (ms)':<36} {f['p50']:9.2f} {f['p95']:9.2f}")
    print(f"{'bwrap spawn per exec (ms)':<36} {b['p50']:9.2f} {b['p95']:9.2f}")
    print(f"ratio exec round trip / bwrap per exec (p50): {r['p50'] / b['p50']:.2f}x")
    for n in counts:
        s = report[f"sessions_{n}"]
        print(f"{n} sessions: create {s['create_per_s']:.1f}/s, idle session {s['idle_session_bytes_mean'] / 2**20:.2f} MiB "
              f"(init RSS {s['idle_rss_bytes_mean'] / 2**20:.2f} + cgroup {s['idle_cgroup_bytes_mean'] / 2**20:.2f}; "
              f"target <= 4; private {s['idle_private_bytes_mean'] / 2**20:.2f}, PSS {s['idle_pss_bytes_mean'] / 2**20:.2f}), "
              f"noisy-neighbour ratio {s['noisy_neighbour_ratio']:.2f} (target <= 2)")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(report, fh, indent=1)
    print(f"raw figures: {args.json}")


if __name__ == "__main__":
    main()
