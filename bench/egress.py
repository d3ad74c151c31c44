#!/usr/bin/python3
"""Egress proxy overhead per connection: inside one session (base template), N times
"connect, send 64 bytes, read them back, close", once directly to an echo server on the
session's own loopback and once through the door (CONNECT 127.0.0.1:3128 to an echo
server on the host's loopback). Prints p50/p95 of each and the ratio of the medians.
A private `cela serve` with egress.allow_cidrs 127.0.0.0/8. A benchmark, not a test.

    python3 bench/egress.py --cela build/cela [--runs 500]
"""
import argparse
import json
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)

INSIDE = r"""
import json, socket, sys, threading, time
runs, host_port = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(128)
def echo():
    while True:
        c, _ = srv.accept()
        d = c.recv(64)
        c.sendall(d)
        c.close()
threading.Thread(target=echo, daemon=True).start()
payload = b"x" * 64
def direct():
    s = socket.create_connection(srv.getsockname())
    s.sendall(payload); got = b""
    while len(got) < 64: got += s.recv(64)
    s.close()
req = ("CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test\r\n\r\n" % host_port).encode()
def proxied():
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(req); head = b""
    while b"\r\n\r\n" not in head: head += s.recv(256)
    assert head.startswith(b"HTTP/1.1 200"), head
    s.sendall(payload); got = head.split(b"\r\n\r\n", 1)[1]
    while len(got) < 64: got += s.recv(64)
    s.close()
out = {}
for name, f in (("direct", direct), ("proxied", proxied)):
    for _ in range(20): f()  # warm up
    t = []
    for _ in range(runs):
        t0 = time.perf_counter(); f(); t.append((time.perf_counter() - t0) * 1e6)
    out[name] = sorted(t)
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=500)
    a = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(a.cela)
    from daemon_util import Daemon

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)
    port = srv.getsockname()[1]

    def echo():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            d = c.recv(64)
            c.sendall(d)
            c.close()

    threading.Thread(target=echo, daemon=True).start()
    d = Daemon({"egress": {"allow_cidrs": ["127.0.0.0/8"], "hosts": {"echo.test": ["127.0.0.1"]}}}).start()
    try:
        sid = d.session(template="base", limits={"memory_mb": 512},
                        network={"mode": "allowlist", "allow": [f"echo.test:{port}"]})
        status, r, _ = d.request("POST", f"/v1/sessions/{sid}/run",
                                 {"argv": ["python3", "-c", INSIDE, str(a.runs), str(port)], "timeout_s": 300})
        assert status == 200 and r["exit_code"] == 0, r
        t = json.loads(r["stdout"])
        for name in ("direct", "proxied"):
            print(f"{name:8s} x{a.runs}: p50 {pct(t[name], .5):7.1f} us  p95 {pct(t[name], .95):7.1f} us")
        print(f"ratio proxied/direct (p50): {pct(t['proxied'], .5) / pct(t['direct'], .5):.2f}")
        d.delete(sid)
    finally:
        d.close()
        srv.close()


if __name__ == "__main__":
    main()
