#!/usr/bin/python3
"""Template benchmark: snapshot of a session whose writable layer holds 100 MiB (one
file and a thousand small ones), a new session from the snapshot, and a Dockerfile-
like step build cold vs fully cached. A private `cela serve` with a private template
store (its `base` a symlink to the host's). A benchmark, not a test: it asserts nothing.

    python3 bench/templates.py --cela build/cela [--runs 5]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=int, default=100)
    args = ap.parse_args()
    os.environ["CELA_BIN"] = os.path.abspath(args.cela)
    from daemon_util import Daemon  # noqa: E402 (reads CELA_BIN)

    tmp = tempfile.mkdtemp(prefix="cela-bench-templates-")
    store = os.path.join(tmp, "store")
    os.mkdir(store, 0o700)
    os.symlink("/var/lib/cela/templates/base", os.path.join(store, "base"))
    d = Daemon(config={"templates_dir": store})
    d.start()
    out = {"snapshot_ms": [], "session_from_snapshot_ms": [], "build_cold_ms": None, "build_cached_ms": None}
    try:
        fill = (f"head -c {args.mib << 20} /dev/urandom > ~/big && mkdir ~/small && "
                "for i in $(seq 1000); do echo $i > ~/small/$i; done")
        for i in range(args.runs):
            st, s, _ = d.request("POST", "/v1/sessions", {"template": "base",
                                                          "limits": {"memory_mb": 2 * args.mib + 512,
                                                                     "disk_mb": args.mib + 256}})
            assert st == 201, s
            st, r, _ = d.request("POST", f"/v1/sessions/{s['id']}/run", {"cmd": fill, "timeout_s": 300})
            assert st == 200 and r["exit_code"] == 0, r
            ms, (st, snap, _) = timed(lambda: d.request("POST", f"/v1/sessions/{s['id']}/snapshot",
                                                         {"template": "bench"}))
            assert st == 201, snap
            out["snapshot_ms"].append(ms)
            d.request("DELETE", f"/v1/sessions/{s['id']}")
            ms, (st, t, _) = timed(lambda: d.request("POST", "/v1/sessions", {"template": snap["template"],
                                                                            "limits": {"memory_mb": 256}}))
            assert st == 201, t
            out["session_from_snapshot_ms"].append(ms)
            d.request("DELETE", f"/v1/sessions/{t['id']}")
            d.request("DELETE", f"/v1/templates/bench/versions/{snap['version']}")

        steps = [{"run": "echo one > /opt/one"}, {"env": {"A": "1"}}, {"workdir": "/srv"},
                 {"run": "seq 10000 > /srv/numbers"}, {"user": "user"}, {"run": "echo $(whoami) > /tmp/me"}]

        def build():
            st, b, _ = d.request("POST", "/v1/templates", {"name": "bench-build", "steps": steps})
            assert st == 202, b
            while True:
                st, j, _ = d.request("GET", f"/v1/templates/builds/{b['build_id']}")
                if j["state"] != "running":
                    assert j["state"] == "succeeded", j
                    return j
                time.sleep(0.02)

        out["build_cold_ms"], _ = timed(build)
        out["build_cached_ms"], cached = timed(build)
        out["build_cached_steps"] = cached["cached_steps"]
    finally:
        d.close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in out.items() if isinstance(v, list)}
    print(f"snapshot of a {args.mib} MiB writable layer (+1000 small files): p50 {med['snapshot_ms']:.0f} ms "
          f"({args.mib / (med['snapshot_ms'] / 1000):.0f} MiB/s), runs {[round(x) for x in out['snapshot_ms']]}")
    print(f"session create from that snapshot: p50 {med['session_from_snapshot_ms']:.1f} ms")
    print(f"6-step build: cold {out['build_cold_ms']:.0f} ms, cached {out['build_cached_ms']:.0f} ms "
          f"(ratio {out['build_cold_ms'] / out['build_cached_ms']:.1f}x, {out['build_cached_steps']} cached steps)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
