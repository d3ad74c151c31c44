#!/usr/bin/python3
"""Storage costs, one run, ratios: session create with a disk-backed writable layer
(from the pool; and a size the pool does not hold, made on the spot) against the RAM
one (tmpfs), and reset against a cold create. A private `cela serve` over the unix
socket, one keep-alive connection, sessions created and deleted one after the other.
A benchmark, not a test.

    python3 bench/storage.py --cela build/cela [--runs 30]
"""
import argparse
import json
import os
import statistics
import sys
import time
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--template", default="base")
    a = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(a.cela)
    from daemon_util import Daemon, UnixConnection

    # A pool deep enough that one create after another always finds a ready disk
    # (the pool refills between creates; the `fresh` case shows the cost without it).
    d = Daemon({"max_sessions": 8, "disk": {"kind": "disk", "pool": 4}}).start()
    conn = UnixConnection(d.socket)

    def call(method, path, body=None):
        conn.request(method, path, body=None if body is None else json.dumps(body))
        r = conn.getresponse()
        data = r.read()
        assert r.status in (200, 201), (r.status, data[:300])
        return json.loads(data)

    def create(kind, disk_mb=1024):
        body = {"template": a.template, "limits": {"memory_mb": 256, "disk_mb": disk_mb}, "disk": {"kind": kind}}
        t0 = time.perf_counter()
        s = call("POST", "/v1/sessions", body)
        ms = (time.perf_counter() - t0) * 1000
        return s, ms

    try:
        time.sleep(2)  # let the pool fill
        results = {}
        for name, kind, mb in (("memory (tmpfs)", "memory", 1024), ("disk, pooled", "disk", 1024),
                               ("disk, not pooled (512 MiB)", "disk", 512)):
            client, daemon_ms = [], []
            for _ in range(a.runs):
                s, ms = create(kind, mb)
                client.append(ms)
                daemon_ms.append(s["startup_ms"])
                call("DELETE", f"/v1/sessions/{s['id']}")
                time.sleep(0.05)  # the pool refills in the background (not measured)
            results[name] = (client, daemon_ms)
        # reset vs cold create (disk kind, pooled)
        s, _ = create("disk")
        resets = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            call("POST", f"/v1/sessions/{s['id']}/reset")
            resets.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.05)
        call("DELETE", f"/v1/sessions/{s['id']}")
        results["reset (disk)"] = (resets, resets)

        base = statistics.median(results["memory (tmpfs)"][0])
        print(f"{a.runs} runs each, p50 / p95 as seen by the client (ms), startup_ms p50 inside the daemon")
        for name, (client, daemon_ms) in results.items():
            print(f"  {name:28s} p50 {pct(client, .5):6.2f}  p95 {pct(client, .95):6.2f}  "
                  f"daemon p50 {pct(daemon_ms, .5):5.1f}  ratio to tmpfs {statistics.median(client) / base:4.2f}x")
        cold = statistics.median(results["disk, pooled"][0])
        print(f"  reset / cold create (disk, pooled): {statistics.median(resets) / cold:4.2f}x")
    finally:
        conn.close()
        d.close()


if __name__ == "__main__":
    main()
