#!/usr/bin/python3
"""WebSocket benchmark: the exec round trip over one session WebSocket against the same
exec over REST (POST .../run) on the same private `cela serve`, both over TCP with the
dev key. Prints p50/p95 of each and the ratio WebSocket / REST, and writes the raw
figures as JSON. A benchmark, not a test: it asserts nothing.

    python3 bench/ws.py --cela build/cela [--runs 200]

Round trip: the client sends the exec (`/bin/echo x`) and waits for its end: over REST
one request on a kept-alive connection; over the WebSocket an `exec` message, then the
`started`, `stdout` and `exit` messages on the socket that is already open. Needs
python3-websockets.
"""
import argparse
import asyncio
import http.client
import json
import os
import time

import websockets
from stats import pct  # noqa: E402  (a script's own directory is on sys.path)
import harness  # noqa: E402



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json", default="bench/results/ws.json")
    args = ap.parse_args()
    Daemon = harness.daemon_util(args.cela).Daemon

    d = Daemon().start()
    body = {"argv": ["/bin/echo", "x"]}
    report = {"runs": args.runs, "cpus": os.cpu_count()}
    try:
        sid = d.session(limits={"memory_mb": 128})
        auth = {"Authorization": f"Bearer {d.key}", "Content-Type": "application/json"}

        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)

        def rest_once():
            t = time.perf_counter()
            conn.request("POST", f"/v1/sessions/{sid}/run", body=json.dumps(body), headers=auth)
            r = conn.getresponse()
            out = json.loads(r.read())
            assert r.status == 200 and out["stdout"] == "x\n", out
            return (time.perf_counter() - t) * 1000

        async def ws_all():
            times = []
            async with websockets.connect(f"ws://127.0.0.1:{d.port}/v1/sessions/{sid}/ws",
                                          extra_headers={"Authorization": f"Bearer {d.key}"}) as ws:
                for i in range(args.runs + 5):
                    t = time.perf_counter()
                    await ws.send(json.dumps({"type": "exec", "ref": str(i), **body}))
                    while True:
                        m = json.loads(await ws.recv())
                        if m["type"] == "exit":
                            break
                        assert m["type"] != "error", m
                    times.append((time.perf_counter() - t) * 1000)
            return times[5:]

        for _ in range(5):
            rest_once()  # warm up
        rest = [rest_once() for _ in range(args.runs)]
        conn.close()
        ws = asyncio.run(ws_all())
        for name, v in (("rest_run_ms", rest), ("ws_exec_ms", ws)):
            report[name] = {"p50": pct(v, .5), "p95": pct(v, .95)}
        report["ws_over_rest_p50"] = report["ws_exec_ms"]["p50"] / report["rest_run_ms"]["p50"]
        d.delete(sid)
    finally:
        d.close()

    print(f"exec round trip, {args.runs} runs of /bin/echo x over TCP:")
    print(f"  REST POST /run      p50 {report['rest_run_ms']['p50']:7.2f} ms   p95 {report['rest_run_ms']['p95']:7.2f} ms")
    print(f"  WebSocket exec      p50 {report['ws_exec_ms']['p50']:7.2f} ms   p95 {report['ws_exec_ms']['p95']:7.2f} ms")
    print(f"  ratio WebSocket / REST (p50): {report['ws_over_rest_p50']:.2f}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
