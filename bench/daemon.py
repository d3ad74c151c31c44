#!/usr/bin/python3
"""Daemon benchmark: a private `cela serve` driven over its unix socket on one
keep-alive connection, with bwrap spawned per exec as the reference where it applies.
Prints p50/p95 and ratios and writes the raw figures as JSON. A benchmark, not a test:
it asserts nothing.

    python3 bench/daemon.py --cela build/cela [--sessions 50,200] [--runs 100]

Measures: session create (cold: no warm pool, each session deleted before the next),
exec round trip of /bin/true (POST .../run), first output byte over SSE, and with N
concurrent sessions: create throughput at 8 clients, memory per idle session (init's
RSS + the session cgroup's memory.usage), and the exec latency of a quiet session
while 4 sessions spin CPU (ratio to idle).

The functions are what bench/report.py runs for issue 13's figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time

import harness  # noqa: E402  (a script's own directory is on sys.path)
from client import KeepAlive, error_text
from spawn import bwrap_argv
from stats import pct

TRUE_ARGV = {"argv": ["/bin/true"]}


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


def session_body(template="base", memory_mb=128, **extra):
    return {"template": template, "limits": {"memory_mb": memory_mb, "idle_timeout_s": 3600, "ttl_s": 86400},
            **extra}


def create(client, body):
    """A session's id, or raises with the daemon's answer."""
    status, s = client.call("POST", "/v1/sessions", body)
    if status != 201:
        raise RuntimeError(error_text(status, s))
    return s["id"]


def cold_create(client, body, runs, pause_s=0.05):
    """Client-side ms of `runs` creates, each deleted (untimed) before the next, and the
    daemon's own startup_ms. The pause lets the disk pool refill, as between two
    clients' creates."""
    client_ms, daemon_ms = [], []
    for _ in range(runs):
        ms, status, s = client.timed("POST", "/v1/sessions", body)
        if status != 201:
            raise RuntimeError(error_text(status, s))
        client_ms.append(ms)
        daemon_ms.append(s.get("startup_ms") or 0)
        client.call("DELETE", f"/v1/sessions/{s['id']}")
        time.sleep(pause_s)
    return {"samples_ms": client_ms, "startup_ms": daemon_ms}


def daemon_cpu_ns(pid):
    """CPU time every thread of process `pid` has run (schedstat, ns): steadier than
    latency on a host shared with other work."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def exec_roundtrip(client, sid, runs, body=TRUE_ARGV):
    """ms of POST .../run of `body` until its finished record is read."""
    out = []
    for _ in range(runs):
        ms, status, r = client.timed("POST", f"/v1/sessions/{sid}/run", body)
        if status != 200 or r.get("state") != "exited":
            raise RuntimeError(error_text(status, r))
        out.append(ms)
    return out


def first_output_byte(client, sid, runs):
    """ms from sending POST .../execs (`echo x`) on the keep-alive connection to the
    first stdout event of the exec's SSE stream (GET .../output?follow=1). The daemon
    ends every stream with `Connection: close`, so the stream goes on a second
    connection, opened before the clock starts (connecting is the client's cost, not
    the exec's). Returns (samples, whether the daemon closed the stream's connection)."""
    out, closed = [], False
    stream = KeepAlive(client.socket_path)
    try:
        for _ in range(runs):
            stream.connection()
            t0 = time.perf_counter()
            status, e = client.call("POST", f"/v1/sessions/{sid}/execs", {"argv": ["echo", "x"]})
            if status != 202:
                raise RuntimeError(error_text(status, e))
            r = stream.send("GET", f"/v1/sessions/{sid}/execs/{e['id']}/output?follow=1")
            event = None
            while True:
                line = r.readline()
                if not line:
                    raise RuntimeError("the output stream ended without a stdout event")
                if line.startswith(b"event:"):
                    event = line.split(b":", 1)[1].strip()
                elif line.startswith(b"data:") and event == b"stdout":
                    break
            out.append((time.perf_counter() - t0) * 1000)
            r.read()
            if r.will_close:
                closed = True
                stream.close()
    finally:
        stream.close()
    return out, closed


def burst(socket, count, clients, work):
    """Runs work(client, i) for i in range(count) on `clients` threads, each with its
    own keep-alive connection, stopping every thread at the first exception.
    Returns (results in completion order, seconds, first error text or None)."""
    lock = threading.Lock()
    state = {"next": 0, "error": None}
    results = []

    def worker():
        c = KeepAlive(socket)
        try:
            while True:
                with lock:
                    if state["error"] or state["next"] >= count:
                        return
                    i = state["next"]
                    state["next"] += 1
                try:
                    r = work(c, i)
                except Exception as exc:  # noqa: BLE001 (the report names it)
                    with lock:
                        state["error"] = state["error"] or str(exc) or type(exc).__name__
                    return
                with lock:
                    results.append(r)
        finally:
            c.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0, state["error"]


def create_many(socket, count, body, clients=8):
    """(ids, seconds, error or None): up to `count` creates at `clients` concurrent
    clients, stopping at the first refusal."""
    return burst(socket, count, clients, lambda c, _: create(c, body))


def delete_many(socket, ids, clients=8):
    """(seconds, error or None) of deleting every id at `clients` concurrent clients."""
    def delete(c, i):
        status, r = c.call("DELETE", f"/v1/sessions/{ids[i]}")
        if status != 200:
            raise RuntimeError(error_text(status, r))
    _, seconds, error = burst(socket, len(ids), clients, delete)
    return seconds, error


def idle_memory(ids):
    """Per session: init's RSS, private and PSS bytes (smaps_rollup) and the session
    cgroup's memory.usage_in_bytes (cgroup v1)."""
    def smaps(pid, key):
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0
    rss, cg, private, pss = [], [], [], []
    for s in ids:
        procs = open(f"/sys/fs/cgroup/pids/cela/{s}/cgroup.procs").read().split()
        rss.append(sum(int(open(f"/proc/{p}/status").read().split("VmRSS:")[1].split()[0]) * 1024 for p in procs))
        # RSS counts library pages every init shares; private + PSS show the real cost.
        private.append(sum(smaps(p, "Private_Dirty") + smaps(p, "Private_Clean") for p in procs))
        pss.append(sum(smaps(p, "Pss") for p in procs))
        cg.append(int(open(f"/sys/fs/cgroup/memory/cela/{s}/memory.usage_in_bytes").read()))
    return {"idle_rss_bytes_mean": statistics.mean(rss), "idle_cgroup_bytes_mean": statistics.mean(cg),
            "idle_session_bytes_mean": statistics.mean(r + c for r, c in zip(rss, cg)),
            "idle_private_bytes_mean": statistics.mean(private), "idle_pss_bytes_mean": statistics.mean(pss)}


def p(samples):
    return {"p50": pct(samples, .5), "p95": pct(samples, .95), "runs": len(samples)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--sessions", default="50,200")
    ap.add_argument("--template", default="host", help="of the sessions (base: the disk-backed default layer)")
    ap.add_argument("--json", default="bench/results/daemon.json")
    args = ap.parse_args()
    Daemon = harness.daemon_util(args.cela).Daemon

    counts = [int(x) for x in args.sessions.split(",")]
    d = Daemon(harness.many_sessions_config(max(counts))).start()
    c = KeepAlive(d.socket)
    report = {"runs": args.runs, "cpus": os.cpu_count(), "template": args.template}
    body = session_body(args.template)
    try:
        report["create_ms"] = p(cold_create(c, body, max(10, args.runs // 4))["samples_ms"])
        sid = create(c, body)
        cpu0 = daemon_cpu_ns(d.proc.pid)
        report["exec_roundtrip_ms"] = p(exec_roundtrip(c, sid, args.runs))
        report["daemon_cpu_per_exec_ms"] = (daemon_cpu_ns(d.proc.pid) - cpu0) / 1e6 / args.runs
        first, closed = first_output_byte(c, sid, max(10, args.runs // 4))
        report["first_output_byte_ms"] = {**p(first), "stream_connection_closed": closed}
        report["connections_opened"] = c.connects
        # Reference: bwrap per exec (same namespaces, host /usr).
        ref = bwrap_argv()
        report["bwrap_exec_ms"] = p([timed(lambda: subprocess.run(ref, check=True))[0] for _ in range(args.runs)])
        c.call("DELETE", f"/v1/sessions/{sid}")

        for n in counts:
            ids, elapsed, error = create_many(d.socket, n, body)
            time.sleep(1)
            fig = {"created": len(ids), "create_per_s": len(ids) / elapsed, "error": error, **idle_memory(ids)}
            quiet = ids[0]
            idle = exec_roundtrip(c, quiet, 30)
            spinners = []
            for s in ids[1:5]:
                st, e = c.call("POST", f"/v1/sessions/{s}/execs", {"cmd": "while :; do :; done", "timeout_s": 120})
                spinners.append((s, e["id"]))
            time.sleep(1)
            busy = exec_roundtrip(c, quiet, 30)
            for s, e in spinners:
                c.call("POST", f"/v1/sessions/{s}/execs/{e}/kill", {"signal": "SIGKILL"})
            seconds, _ = delete_many(d.socket, ids)
            fig.update({"quiet_exec_idle_p50_ms": pct(idle, .5), "quiet_exec_noisy_p50_ms": pct(busy, .5),
                        "noisy_neighbour_ratio": pct(busy, .5) / pct(idle, .5), "delete_per_s": len(ids) / seconds})
            report[f"sessions_{n}"] = fig
    finally:
        c.close()
        d.close()

    cr, r, f, b = report["create_ms"], report["exec_roundtrip_ms"], report["first_output_byte_ms"], report["bwrap_exec_ms"]
    print(f"{'metric':<36} {'p50':>9} {'p95':>9}")
    print(f"{'session create, cold (ms)':<36} {cr['p50']:9.2f} {cr['p95']:9.2f}   target p50 <= 5")
    print(f"{'exec round trip /bin/true (ms)':<36} {r['p50']:9.2f} {r['p95']:9.2f}   target p50 <= 1.5")
    print(f"{'daemon CPU per exec (ms)':<36} {report['daemon_cpu_per_exec_ms']:9.2f}")
    print(f"{'first output byte over SSE (ms)':<36} {f['p50']:9.2f} {f['p95']:9.2f}   target p50 <= 1.5")
    print(f"{'bwrap spawn per exec (ms)':<36} {b['p50']:9.2f} {b['p95']:9.2f}")
    print(f"ratio exec round trip / bwrap per exec (p50): {r['p50'] / b['p50']:.2f}x; "
          f"connections opened: {report['connections_opened']}")
    for n in counts:
        s = report[f"sessions_{n}"]
        print(f"{n} sessions: create {s['create_per_s']:.1f}/s, idle session {s['idle_session_bytes_mean'] / 2**20:.2f} MiB "
              f"(init RSS {s['idle_rss_bytes_mean'] / 2**20:.2f} + cgroup {s['idle_cgroup_bytes_mean'] / 2**20:.2f}; "
              f"private {s['idle_private_bytes_mean'] / 2**20:.2f}, PSS {s['idle_pss_bytes_mean'] / 2**20:.2f}), "
              f"noisy-neighbour ratio {s['noisy_neighbour_ratio']:.2f} (target <= 2)")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump(report, fh, indent=1)
    print(f"raw figures: {args.json}")


if __name__ == "__main__":
    main()
