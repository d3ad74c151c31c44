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

import ownership

ROOT = Path(__file__).resolve().parents[2]
CELA = os.environ.get("CELA_BIN", str(ROOT / "build" / "cela"))
UID_BASE = 0x10000000  # jail/userns.h kUidBase
CGROUP_ROOT = Path("/sys/fs/cgroup")


def run(args, template="host", opts=(), input=None, timeout=120, check_json=False):
    """`cela run --template T OPTS -- ARGS`; returns CompletedProcess (text)."""
    cmd = [CELA, "run", "--template", template, *opts, "--", *args]
    return run_owned(cmd, input=input, timeout=timeout)


def run_owned(cmd, input=None, timeout=120, **kw):
    """subprocess.run, with the child registered as ours (leftover checks)."""
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    ownership.register_process(p.pid)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


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
    """Host pids of the sandbox processes this test run started (any slot); another
    daemon's sandboxes on the same host do not count."""
    return ownership.own_sandbox_pids()


_run_cgroups_before = set()


def cela_cgroups():
    """Run cgroups (cela/run-*) that are ours: new since this test began, and not
    holding another runner's processes."""
    found = []
    for p in ownership.cela_cgroup_dirs("run-"):
        if str(p) in _run_cgroups_before:
            continue
        procs = ownership.cgroup_pids(p)
        if procs and not any(ownership.is_ours(pid) for pid in procs):
            continue
        found.append(str(p))
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
    """Every test must leave no sandbox process and no run cgroup behind (of its own)."""
    global _run_cgroups_before
    _run_cgroups_before = {str(p) for p in ownership.cela_cgroup_dirs("run-")
                           if not any(ownership.is_ours(pid) for pid in ownership.cgroup_pids(p))}
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
        ownership.register_process(p.pid)
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
