#!/usr/bin/env python3
"""Package gateway: a first install (the gateway fetches from the upstream over TLS,
verifies, caches) against a cache-hit install of the same package (a second session),
in one run, as a ratio. Real pip on the host against the gateway behind
tests/gateway_harness, registries served on loopback over HTTPS
(tests/integration/package_upstreams.py); one wheel of --size-mb.

    python3 bench/packages.py [--harness build/gateway_harness] [--size-mb 20]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from package_upstreams import Registries  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--harness", default=str(ROOT / "build" / "gateway_harness"))
    ap.add_argument("--size-mb", type=int, default=20)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cela-bench-packages-"))
    reg = Registries(tmp / "upstream")
    # Pad celabig to the asked size (incompressible), and republish its hash.
    big = reg.pypi["celabig"][0]
    path = tmp / big["filename"]
    path.write_bytes(big["data"])
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("celabig/pad2.bin", os.urandom(a.size_mb << 20))
    import hashlib
    big["data"] = path.read_bytes()
    big["sha256"] = hashlib.sha256(big["data"]).hexdigest()
    cfg = tmp / "harness.json"
    sessions = {"first": {"mode": "gateway"}, "second": {"mode": "gateway"}}
    cfg.write_text(json.dumps({"state_dir": str(tmp), "sessions": sessions, "packages": {
        "upstreams": reg.upstreams(), "ca_file": str(reg.ca), "cache_dir": str(tmp / "cache"),
        "max_package_mb": a.size_mb + 16}}))
    proc = subprocess.Popen([a.harness, str(cfg)], stdout=subprocess.PIPE, text=True)
    ports = {}
    for line in proc.stdout:
        w = line.split()
        if w[:1] == ["port"]:
            ports[w[1]] = int(w[2])
        if w == ["ready"]:
            break
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "PIP_CONFIG_FILE": os.devnull}
    times = {}
    try:
        for name in ("first", "second"):
            dest = tmp / name
            began = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-cache-dir", "--no-deps",
                                "--disable-pip-version-check", "-d", str(dest), "--index-url",
                                f"http://127.0.0.1:{ports[name]}/pypi/simple/", "celabig"],
                               capture_output=True, text=True, env=env)
            times[name] = time.monotonic() - began
            assert r.returncode == 0, r.stdout + r.stderr
        upstream_files = reg.count("/files/")
    finally:
        proc.kill()
        proc.wait()
        reg.close()
    print(f"wheel {len(big['data']) / 1e6:.1f} MB; upstream file fetches: {upstream_files}")
    print(f"first install (upstream, verify, cache): {times['first'] * 1000:.0f} ms")
    print(f"cache-hit install (second session):      {times['second'] * 1000:.0f} ms")
    print(f"ratio first / cache hit: {times['first'] / times['second']:.2f}")


if __name__ == "__main__":
    main()
