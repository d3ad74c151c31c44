#!/usr/bin/python3
"""Port-proxy overhead: the same small HTTP server (tests/integration/port_servers.py)
reached directly on the host's loopback and through the daemon's port proxy into a
session (ANY /v1/sessions/{id}/ports/{port}/...). Both clients are keep-alive TCP
connections on 127.0.0.1; the server is the same code (threaded stdlib http.server).
Prints p50/p95 of a small GET, MB/s of a large close-delimited download, and the
ratios proxy/direct. A benchmark, not a test.

    python3 bench/ports.py --cela build/cela [--runs 300] [--mb 64]
"""
import argparse
import http.client
import os
import subprocess
import sys
import time
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
SERVERS = os.path.join(HERE, "..", "tests", "integration", "port_servers.py")
PORT_INSIDE = 8100


def small_gets(conn, path, runs, headers):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        r.read()
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status == 200, r.status
    return times


def download(host, port, path, headers, nbytes):
    conn = http.client.HTTPConnection(host, port, timeout=120)
    t0 = time.perf_counter()
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    got = 0
    while True:
        chunk = r.read(1 << 16)
        if not chunk:
            break
        got += len(chunk)
    elapsed = time.perf_counter() - t0
    conn.close()
    assert got == nbytes, (got, nbytes)
    return nbytes / elapsed / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="downloads per side (the best is kept)")
    a = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(a.cela)
    from daemon_util import Daemon, free_port

    nbytes = a.mb << 20
    direct_port = free_port()
    direct = subprocess.Popen([sys.executable, SERVERS, str(direct_port)], stdin=subprocess.DEVNULL)
    d = Daemon().start()
    try:
        sid = d.session(template="base", limits={"memory_mb": 512, "cpus": 2})
        with open(SERVERS, "rb") as f:
            st, body, _ = d.request("PUT", f"/v1/sessions/{sid}/files?path=/tmp/servers.py", f.read())
            assert st in (200, 201), body
        st, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs", {"argv": ["python3", "/tmp/servers.py",
                                                                          str(PORT_INSIDE)]})
        assert st == 202, e
        key = {"Authorization": f"Bearer {d.key}"}
        prefix = f"/v1/sessions/{sid}/ports/{PORT_INSIDE}"
        end = time.monotonic() + 15
        while d.request("GET", prefix + "/")[0] != 200:
            assert time.monotonic() < end, "the server inside did not come up"
            time.sleep(0.1)
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", direct_port, timeout=2)
                c.request("GET", "/")
                c.getresponse().read()
                c.close()
                break
            except OSError:
                assert time.monotonic() < end, "the direct server did not come up"
                time.sleep(0.1)

        results = {}
        for name, port, path, headers in (("direct", direct_port, "/small", {}),
                                          ("proxy", d.port, prefix + "/small", key)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            small_gets(conn, path, 20, headers)  # warm-up
            t = small_gets(conn, path, a.runs, headers)
            conn.close()
            mbps = max(download("127.0.0.1", port, path.replace("/small", f"/stream?n={nbytes}"), headers, nbytes)
                       for _ in range(a.repeat))
            results[name] = (pct(t, .5), pct(t, .95), mbps)
            print(f"{name:6}: small GET x{a.runs} p50 {results[name][0]:.3f} ms  p95 {results[name][1]:.3f} ms  |  "
                  f"{a.mb} MiB download {mbps:.0f} MB/s")
        dp, pp = results["direct"], results["proxy"]
        print(f"ratio proxy/direct: small GET p50 {pp[0] / dp[0]:.2f}x  p95 {pp[1] / dp[1]:.2f}x  |  "
              f"download throughput {pp[2] / dp[2]:.2f}x")
        d.delete(sid)
    finally:
        d.close()
        direct.terminate()
        direct.wait(10)


if __name__ == "__main__":
    main()
