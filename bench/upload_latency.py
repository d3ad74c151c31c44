#!/usr/bin/python3
"""Small-file upload latency: a private `cela serve`, one session, then PUT a small file
N times in a row over the unix socket (one connection, keep-alive), and the create +
first upload of a fresh session. Prints p50/p95 in ms. A benchmark, not a test.

    python3 bench/upload_latency.py --cela build/cela [--runs 200] [--size 1024]
"""
import argparse
import http.client
import os
import statistics
import sys
import time
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--creates", type=int, default=10)
    a = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(a.cela)
    from daemon_util import Daemon, UnixConnection

    d = Daemon({"max_sessions": 4}).start()
    try:
        body = os.urandom(a.size)
        sid = d.session()
        conn = UnixConnection(d.socket)
        times = []
        for i in range(a.runs):
            t0 = time.perf_counter()
            conn.request("PUT", f"/v1/sessions/{sid}/files?path=/tmp/f{i % 10}", body=body)
            r = conn.getresponse()
            r.read()
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status == 201, r.status
        print(f"PUT {a.size} B x{a.runs}: p50 {pct(times, .5):.2f} ms  p95 {pct(times, .95):.2f} ms  "
              f"mean {statistics.mean(times):.2f} ms")
        d.delete(sid)
        both = []
        for _ in range(a.creates):
            t0 = time.perf_counter()
            s = d.session()
            st, _, _ = d.request("PUT", f"/v1/sessions/{s}/files?path=/tmp/first", body)
            both.append((time.perf_counter() - t0) * 1000)
            assert st == 201
            d.delete(s)
        print(f"create + first PUT x{a.creates}: p50 {pct(both, .5):.1f} ms  p95 {pct(both, .95):.1f} ms")
    finally:
        d.close()


if __name__ == "__main__":
    main()
