#!/usr/bin/python3
"""Overhead of the audit log and the execve capture on the exec round trip: three
private daemons, one per mode, each timing POST .../run of the same commands, in
alternating rounds so host load falls on every mode alike. A benchmark, not a test.

    python3 bench/observability.py --cela build/cela [--runs 200] [--rounds 3]

Modes (config `audit`):
  off      audit.enabled = false (no records, no execve watch)
  audit    records on, process_exec = false (no execve watch), files_written = true
  full     records and the execve watch (the default)
Commands: /bin/true (one execve) and `sh -c 'for i in 1..20: /bin/true'` (21 execve),
so the per-execve cost shows apart from the per-exec records. Prints p50/p95 per mode
and the ratios to `off`, and writes the figures as JSON.
"""
import argparse
import json
import os
import statistics
import time
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)
import harness  # noqa: E402



MODES = {
    "off": {"enabled": False},
    "audit": {"enabled": True, "process_exec": False},
    "full": {"enabled": True, "process_exec": True},
}
COMMANDS = {
    "true": {"argv": ["/bin/true"]},
    "sh_20_execs": {"cmd": "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do /bin/true; done"},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=200, help="runs per command, mode and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="bench/results/observability.json")
    args = ap.parse_args()
    Daemon = harness.daemon_util(args.cela).Daemon

    daemons, sessions = {}, {}
    samples = {m: {c: [] for c in COMMANDS} for m in MODES}
    try:
        for mode, audit in MODES.items():
            d = Daemon({"audit": audit, "metrics": {"sample_interval_s": 0}}).start()
            daemons[mode] = d
            sessions[mode] = d.session(limits={"memory_mb": 256, "idle_timeout_s": 3600})
            for _ in range(20):  # warm up
                d.run(sessions[mode], "true")
        for _ in range(args.rounds):
            for mode, d in daemons.items():
                for name, body in COMMANDS.items():
                    for _ in range(args.runs):
                        t = time.perf_counter()
                        status, r, _ = d.request("POST", f"/v1/sessions/{sessions[mode]}/run", body)
                        samples[mode][name].append((time.perf_counter() - t) * 1000)
                        assert status == 200 and r["state"] == "exited", r
        # What "full" recorded for one sh_20 run: the evidence that it captured.
        d = daemons["full"]
        status, page, _ = d.request("GET", f"/v1/audit?session={sessions['full']}&kind=process.exec&limit=1000")
        captured = len(page["records"])
    finally:
        for d in daemons.values():
            d.close()
    report = {"runs": args.runs, "rounds": args.rounds, "cpus": os.cpu_count(),
              "loadavg": os.getloadavg(), "process_exec_records_seen": captured, "modes": {}}
    print(f"exec round trip (POST /run), ms; {args.rounds} rounds x {args.runs} runs; load {os.getloadavg()[0]:.1f}")
    for name in COMMANDS:
        base50 = statistics.median(samples["off"][name])
        base95 = pct(samples["off"][name], 0.95)
        for mode in MODES:
            v = samples[mode][name]
            p50, p95 = statistics.median(v), pct(v, 0.95)
            report["modes"].setdefault(mode, {})[name] = {"p50_ms": p50, "p95_ms": p95,
                                                        "ratio_p50": p50 / base50, "ratio_p95": p95 / base95}
            print(f"  {name:12s} {mode:5s}  p50 {p50:7.2f}  p95 {p95:7.2f}   x{p50 / base50:.2f} (p50 vs off)")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
