#!/usr/bin/env python3
"""Runs one `node --test` suite of tests/e2b against a cela daemon of its own.

The suite drives cela with the official E2B SDKs (pinned in package-lock.json,
installed by `make e2b-deps`), exactly as a user would after pointing E2B_API_URL and
E2B_SANDBOX_URL at cela. It gets, in its environment:
  E2B_API_URL, E2B_SANDBOX_URL   http://127.0.0.1:<port> of this daemon
  E2B_API_KEY                    an e2b_<hex> key of tenant `default`
  CELA_URL, CELA_KEY             the same daemon's native API (bearer key), for checks
                                 that what the SDK did is what the session layer did
  CELA_STATE_DIR                 its state dir (e2b-token.key: a suite may derive a
                                 sandbox token for a session it made natively)
Exit status: node's. Afterwards the daemon is stopped and nothing of it may be left
(cgroups, sandbox processes): a leftover fails the run.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cela", required=True)
    ap.add_argument("--node", default="node")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("suite")
    args = ap.parse_args()
    os.environ["CELA_BIN"] = args.cela
    import daemon_util  # after CELA_BIN: conftest reads it on import
    import ownership

    if not (HERE / "node_modules" / "e2b").is_dir():
        print("tests/e2b/node_modules is missing: run `make e2b-deps`", file=sys.stderr)
        return 1
    daemon = daemon_util.Daemon(dev=False).start()
    try:
        status, tenants, _ = daemon.request("GET", "/v1/tenants")
        assert status == 200, tenants
        tenant = next(t["id"] for t in tenants["tenants"] if t["name"] == "default")
        status, key, _ = daemon.request("POST", f"/v1/tenants/{tenant}/keys", {"e2b": True})
        assert status == 201, key
        url = f"http://127.0.0.1:{daemon.port}"
        env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key["key"],
                   CELA_URL=url, CELA_KEY=daemon.key, CELA_STATE_DIR=daemon.state)
        env.pop("E2B_DOMAIN", None)
        try:
            suite = str(Path(args.suite).resolve())  # node runs in tests/e2b (its node_modules)
            rc = subprocess.run([args.node, "--test", "--test-concurrency=1", suite], cwd=HERE, env=env,
                                timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"{args.suite}: did not finish within {args.timeout} s", file=sys.stderr)
            rc = 1
        if rc != 0:
            print("---- daemon log (tail) ----\n" + daemon.logs()[-6000:], file=sys.stderr)
    finally:
        daemon.close()
    leftovers = ownership.own_session_cgroups() + ownership.own_sandbox_pids()
    if leftovers:
        print(f"left behind: {leftovers}", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
