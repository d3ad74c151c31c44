#!/usr/bin/python3
"""Keystroke-to-echo latency on a tty exec: a private `cela serve` on its unix socket,
one tty exec running `cat` on a raw terminal (`stty raw -echo`: cat itself echoes each
byte, as a shell's line editor does). Each keystroke is one POST …/stdin on a new
connection, as `cela shell` sends it; the echo is timed when it arrives on the exec's
output stream (one SSE connection held open). The reference is the same round trip
through a local pty (`script`-like: pty.fork, the same `stty raw -echo; cat`), with no
daemon in between. Prints p50/p95 and the ratio. A benchmark, not a test.

    python3 bench/pty.py --cela build/cela [--keys 200]
"""
import argparse
import base64
import json
import os
import select
import sys
import time

# This file is named pty.py: the standard library's pty, not this script, is wanted.
_here = sys.path.pop(0)
import pty  # noqa: E402
sys.path.insert(0, _here)
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)
import harness  # noqa: E402


ECHO_CMD = "stty raw -echo && echo ready && exec cat"


def local_reference(keys):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("sh", ["sh", "-c", ECHO_CMD])
    buf = b""
    while b"ready" not in buf:
        buf += os.read(fd, 4096)
    samples = []
    for i in range(keys):
        key = bytes([ord("a") + i % 26])
        t = time.perf_counter()
        os.write(fd, key)
        got = b""
        while key not in got:
            select.select([fd], [], [], 5)
            got += os.read(fd, 4096)
        samples.append((time.perf_counter() - t) * 1000)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(fd)
    return samples


class Follow:
    """The exec's output stream, read event by event."""

    def __init__(self, conn_cls, socket_path, sid, eid):
        self.conn = conn_cls(socket_path, timeout=30)
        self.conn.request("GET", f"/v1/sessions/{sid}/execs/{eid}/output?follow=1")
        self.resp = self.conn.getresponse()
        self.event = None

    def next_stdout(self):
        for raw in self.resp:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                self.event = line[6:].strip()
            elif line.startswith("data:") and self.event == "stdout":
                return base64.b64decode(line[5:].strip())
        raise RuntimeError("the output stream ended")


def cela_latency(d, keys, conn_cls):
    sid = d.session()
    try:
        status, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs",
                                 {"cmd": ECHO_CMD, "tty": True, "stdin_open": True})
        assert status == 202, e
        eid = e["id"]
        out = Follow(conn_cls, d.socket, sid, eid)
        got = b""
        while b"ready" not in got:
            got += out.next_stdout()
        samples = []
        for i in range(keys):
            key = bytes([ord("a") + i % 26])
            t = time.perf_counter()
            status, body, _ = d.request("POST", f"/v1/sessions/{sid}/execs/{eid}/stdin", key,
                                        {"Content-Type": "application/octet-stream"})
            assert status == 204, body
            got = b""
            while key not in got:
                got += out.next_stdout()
            samples.append((time.perf_counter() - t) * 1000)
        d.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        out.conn.close()
        return samples
    finally:
        d.delete(sid)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--json", default="bench/results/pty.json")
    args = ap.parse_args()
    du = harness.daemon_util(args.cela)
    Daemon, UnixConnection = du.Daemon, du.UnixConnection

    ref = local_reference(args.keys)
    d = Daemon().start()
    try:
        ours = cela_latency(d, args.keys, UnixConnection)
    finally:
        d.close()
    rows = {"local pty (pty.fork + cat)": ref, "cela tty exec (POST stdin -> SSE)": ours}
    print(f"keystroke-to-echo latency, {args.keys} keys")
    for name, s in rows.items():
        print(f"  {name:40s} p50 {pct(s, 0.5):7.3f} ms   p95 {pct(s, 0.95):7.3f} ms")
    ratio = pct(ours, 0.5) / pct(ref, 0.5)
    print(f"  ratio cela / local pty (p50): {ratio:.1f}x")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"keys": args.keys, "local_ms": ref, "cela_ms": ours, "ratio_p50": ratio}, f)


if __name__ == "__main__":
    main()
