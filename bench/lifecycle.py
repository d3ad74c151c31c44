#!/usr/bin/python3
"""Session lifecycle latencies, one run, side by side: a cold create against a claim
from a warm pool (client round trip on one keep-alive connection, and the daemon's own
`startup_ms`), and pause / resume of a session running a busy loop. A private
`cela serve`; prints p50/p95 in ms and the ratios. A benchmark, not a test.

    python3 bench/lifecycle.py --cela build/cela [--runs 30] [--template base]

Each claim waits until the pool is full again first, so every claim is a hit; the
delete after each create is not timed.
"""
import argparse
import http.client
import json
import os
import sys
import time
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))


def line(name, v):
    return f"{name:<34} p50 {pct(v, .5):8.3f} ms   p95 {pct(v, .95):8.3f} ms   (n={len(v)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--template", default="base")
    ap.add_argument("--pool-size", type=int, default=2)
    a = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(a.cela)
    from daemon_util import Daemon

    limits = {"memory_mb": 256}
    d = Daemon({"max_sessions": 20,
                "pools": [{"template": a.template, "size": a.pool_size, "limits": limits}]}).start()
    # TCP with a key, one keep-alive connection: what a remote SDK client sees.
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    auth = {"Authorization": f"Bearer {d.key}", "Content-Type": "application/json"}

    def call(method, path, body=None):
        t0 = time.perf_counter()
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=auth)
        r = conn.getresponse()
        data = r.read()
        ms = (time.perf_counter() - t0) * 1000
        return r.status, (json.loads(data) if data else None), ms

    def pool_ready():
        return call("GET", "/v1/pools")[1]["pools"][0]["ready"]

    def wait_full():
        end = time.monotonic() + 60
        while pool_ready() < a.pool_size:
            if time.monotonic() > end:
                raise RuntimeError("the pool did not refill")
            time.sleep(0.01)

    try:
        cold, cold_startup, claim, claim_startup = [], [], [], []
        for i in range(a.runs):
            st, s, ms = call("POST", "/v1/sessions", {"template": a.template, "limits": limits, "pool": False})
            assert st == 201, s
            cold.append(ms)
            cold_startup.append(s["startup_ms"])
            call("DELETE", f"/v1/sessions/{s['id']}")
            wait_full()
            st, s, ms = call("POST", "/v1/sessions", {"template": a.template, "limits": limits})
            assert st == 201, s
            claim.append(ms)
            claim_startup.append(s["startup_ms"])
            call("DELETE", f"/v1/sessions/{s['id']}")
        p = call("GET", "/v1/pools")[1]["pools"][0]

        st, s, _ = call("POST", "/v1/sessions", {"template": a.template, "limits": limits, "pool": False})
        sid = s["id"]
        st, e, _ = call("POST", f"/v1/sessions/{sid}/execs", {"cmd": "while :; do :; done"})
        assert st == 202, e
        pause, resume = [], []
        for _ in range(a.runs):
            time.sleep(0.02)
            st, r, ms = call("POST", f"/v1/sessions/{sid}/pause")
            assert st == 200 and r["state"] == "paused", r
            pause.append(ms)
            time.sleep(0.02)
            st, r, ms = call("POST", f"/v1/sessions/{sid}/resume")
            assert st == 200 and r["state"] == "ready", r
            resume.append(ms)
        call("DELETE", f"/v1/sessions/{sid}")

        print(f"template {a.template}, limits {limits}, pool size {a.pool_size}, one run, keep-alive TCP client")
        print(line("cold create (client)", cold))
        print(line("pool claim (client)", claim))
        print(line("cold create startup_ms (daemon)", cold_startup))
        print(line("pool claim startup_ms (daemon)", claim_startup))
        print(f"{'pool claim_ms_p50 (daemon, µs res.)':<34} {p['claim_ms_p50']:.3f} ms; refill p50 "
              f"{p['refill_ms_p50']:.1f} ms; hits {p['hits']}, misses {p['misses']}")
        print(line("pause, busy loop (client)", pause))
        print(line("resume (client)", resume))
        print(f"ratio claim / cold create (client p50): {pct(claim, .5) / pct(cold, .5):.3f}")
        print(f"ratio pool refill p50 / cold create p50: {p['refill_ms_p50'] / pct(cold, .5):.2f}")
    finally:
        conn.close()
        d.close()


if __name__ == "__main__":
    main()
