"""Shared helpers for the integration tests: they start real sandboxes through the
cela binary (as root) and look at them from the host side too."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELA = os.environ.get("CELA_BIN", str(ROOT / "build" / "cela"))
UID_BASE = 0x10000000  # jail/userns.h kUidBase
CGROUP_ROOT = Path("/sys/fs/cgroup")


def run(args, template="host", opts=(), input=None, timeout=120, check_json=False):
    """`cela run --template T OPTS -- ARGS`; returns CompletedProcess (text)."""
    cmd = [CELA, "run", "--template", template, *opts, "--", *args]
    return subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout,
                          stdin=None if input is not None else subprocess.DEVNULL)


def run_json(args, template="host", opts=(), timeout=120):
    """Runs with --json; returns (result dict, command output, process)."""
    p = run(args, template=template, opts=("--json", *opts), timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    assert lines, f"no JSON on stdout; stderr={p.stderr!r}"
    return json.loads(lines[-1]), p.stderr, p


def py(code, template="host", opts=(), timeout=120):
    """Runs python3 -c CODE in a sandbox."""
    return run(["python3", "-c", code], template=template, opts=opts, timeout=timeout)


def sandbox_pids():
    """Host pids of every process running on a sandbox uid (any slot)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
        except OSError:
            continue
        m = re.search(r"^Uid:\s+(\d+)\s+(\d+)", status, re.M)
        if m and int(m.group(2)) >= UID_BASE:
            out.append(int(d.name))
    return out


def cela_cgroups():
    """Run cgroups (cela/run-*) present in any hierarchy."""
    found = []
    for parent in CGROUP_ROOT.glob("*/cela"):
        found += [str(p) for p in parent.iterdir() if p.is_dir() and p.name.startswith("run-")]
    if (CGROUP_ROOT / "cela").is_dir():
        found += [str(p) for p in (CGROUP_ROOT / "cela").iterdir() if p.is_dir() and p.name.startswith("run-")]
    return found


def wait_until(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test must leave no sandbox process and no run cgroup behind."""
    yield
    assert wait_until(lambda: not sandbox_pids(), 5), f"sandbox processes left: {sandbox_pids()}"
    assert wait_until(lambda: not cela_cgroups(), 5), f"cgroups left: {cela_cgroups()}"


@pytest.fixture
def background():
    """Starts `cela run` processes in the background; kills (by pid) what is left."""
    procs = []

    def start(args, template="host", opts=()):
        p = subprocess.Popen([CELA, "run", "--template", template, *opts, "--", *args],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def base_available():
    return subprocess.run([CELA, "template", "show", "base"], capture_output=True).returncode == 0
