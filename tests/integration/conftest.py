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

# `cela run` and local `cela template build` admit against a host-wide ledger
# (default /run/cela/grants, which a daemon outside the tests may use): the tests'
# runs share one of their own (daemons get theirs: daemon_util).
if "CELA_LEDGER_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    _ledger = tempfile.mkdtemp(prefix="cela-test-grants-")
    os.environ["CELA_LEDGER_DIR"] = _ledger
    atexit.register(shutil.rmtree, _ledger, True)


# Which runner run()/py()/run_json() use: `cela run` (one-shot) or a daemon session
# (the path production uses: a re-executed init, a session, an exec through the API).
# Modules that set `pytestmark = pytest.mark.usefixtures("runner")` run every test
# with both.
_runner = {"kind": "run"}


def runner_kind():
    """"run" (cela run) or "session" (a daemon session): which runner this test uses."""
    return _runner["kind"]


def run(args, template="host", opts=(), input=None, timeout=120, check_json=False):
    """`cela run --template T OPTS -- ARGS`, or the same in a fresh daemon session;
    returns CompletedProcess (text) with cela run's exit codes."""
    if _runner["kind"] == "session":
        return _run_in_session(args, template, list(opts), input, timeout)
    cmd = [CELA, "run", "--template", template, *opts, "--", *args]
    return run_owned(cmd, input=input, timeout=timeout)


def _size_mb(text):
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    t = text.lower().rstrip("ib")
    return max(1, int(float(t[:-1]) * units[t[-1]])) if t[-1] in units else max(1, int(t) >> 20)


def _seconds(text):
    t = text.lower()
    if t.endswith("ms"):
        return float(t[:-2]) / 1000
    if t.endswith("s"):
        return float(t[:-1])
    if t.endswith("m"):
        return float(t[:-1]) * 60
    return float(t)


# cela run's exit codes (jail/result.h exit_code_for) for an exec record.
def _exit_code(rec):
    state = rec["state"]
    if state == "exited":
        return rec["exit_code"]
    if state == "timed_out":
        return 124
    if state == "oom_killed":
        return 121
    if state == "killed":
        return 128 + (rec["signal"] or 9)
    return rec["exit_code"] if rec["exit_code"] is not None else 125


def _run_in_session(args, template, opts, input, timeout):
    d = _runner["daemon"]
    limits, exec_body, want_json = {"memory_mb": 512}, {"argv": list(args)}, False
    env = {}
    sudo = None
    i = 0
    while i < len(opts):
        o = opts[i]
        val = opts[i + 1] if i + 1 < len(opts) else None
        if o == "--json":
            want_json, i = True, i + 1
            continue
        if o in ("--allow-sudo", "--no-allow-sudo"):
            sudo, i = o == "--allow-sudo", i + 1
            continue
        if o == "--memory":
            limits["memory_mb"] = _size_mb(val)
        elif o == "--disk":
            limits["disk_mb"] = _size_mb(val)
        elif o == "--pids":
            limits["pids"] = int(val)
        elif o == "--cpus":
            limits["cpus"] = float(val)
        elif o == "--timeout":
            exec_body["timeout_s"] = _seconds(val)
        elif o == "--user":
            exec_body["user"] = val
        elif o == "--cwd":
            exec_body["cwd"] = val
        elif o == "--env":
            k, _, v = val.partition("=")
            env[k] = v
        else:
            raise AssertionError(f"no session equivalent for cela run option {o}")
        i += 2
    if env:
        exec_body["env"] = env
    if input is not None:
        exec_body["stdin"] = input
    # `cela run`'s writable layer is a tmpfs (there is no disk pool outside a daemon):
    # the session runner asks for the same.
    body = {"template": template, "limits": limits, "disk": {"kind": "memory"}}
    if sudo is not None:
        body["allow_sudo"] = sudo
    status, s, _ = d.request("POST", "/v1/sessions", body, timeout=timeout)
    assert status == 201, s
    try:
        status, rec, _ = d.request("POST", f"/v1/sessions/{s['id']}/run", exec_body, timeout=timeout)
        assert status == 200, rec
    finally:
        d.request("DELETE", f"/v1/sessions/{s['id']}")
    out, err = rec.pop("stdout"), rec.pop("stderr")
    if rec.pop("encoding", None) == "base64":
        import base64
        out, err = base64.b64decode(out).decode(errors="replace"), base64.b64decode(err).decode(errors="replace")
    if want_json:
        # As `cela run --json`: the result on stdout, the command's output on stderr.
        return subprocess.CompletedProcess(args, _exit_code(rec), json.dumps(rec) + "\n", out + err)
    return subprocess.CompletedProcess(args, _exit_code(rec), out, err)


@pytest.fixture(scope="session")
def runner_daemon():
    from daemon_util import Daemon
    d = Daemon({"max_sessions": 50,
                "tenant_quotas": {"max_sessions": 50, "max_memory_mb": 65536, "max_cpus": 4}}).start()
    yield d
    d.close()


@pytest.fixture(params=["run", "session"])
def runner(request):
    """Runs the test with `cela run`, then again with a daemon session."""
    if request.param == "session":
        _runner.update(kind="session", daemon=request.getfixturevalue("runner_daemon"))
    else:
        _runner.update(kind="run")
    yield request.param
    _runner.update(kind="run")


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
        stop_process(p)


def stop_process(p, grace=10):
    """SIGTERM to a process we started, SIGKILL if it is still there after `grace` s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def base_available():
    return subprocess.run([CELA, "template", "show", "base"], capture_output=True).returncode == 0
