"""Nothing of the host is visible or runnable from inside, and init survives OOM and a
full disk (docs/security.md; issue 7). Each test attacks from inside a
sandbox; those marked with the runner run with `cela run` and again in a daemon
session (conftest.runner)."""
import json

import pytest

from conftest import py, run
from daemon_util import Daemon

EACCES, EPERM = 13, 1


# ---- the host binary ----------------------------------------------------------------

@pytest.mark.usefixtures("runner")
def test_proc_self_exe_in_an_execs_first_execve_is_not_the_host_binary():
    # The first execve of an exec runs in init's memory: /proc/self/exe is init's
    # executable. Run it and make it read itself (cela's own config reader): the host
    # file would read fine ("malformed config"); the sealed image is execute-only.
    p = run(["/proc/self/exe", "serve", "--config", "/proc/self/exe"], opts=["--user", "root"])
    out = p.stdout + p.stderr
    assert "malformed config" not in out, f"the host's cela binary was read from inside: {out!r}"
    assert p.returncode == 126 or "Permission denied" in out, (p.returncode, out)


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("user", ["user", "root"])
def test_an_exec_cannot_run_init_through_proc_1_exe(user):
    p = run(["/proc/1/exe", "--version"], opts=["--user", user])
    assert "cela" not in p.stdout, f"init's binary ran inside the sandbox: {p.stdout!r}"
    assert p.returncode == 126, (p.returncode, p.stderr)


# ---- init's /proc entries -----------------------------------------------------------

INIT_PROC_PROBE = r"""
import json, os
out = {}
for name, data in (("oom_score_adj", "1000"), ("oom_adj", "15"), ("coredump_filter", "0x7f"), ("clear_refs", "1")):
    try:
        with open(f"/proc/1/{name}", "w") as f:
            f.write(data)
        out[name] = "written"
    except OSError as e:
        out[name] = e.errno
for name, fn in (("fd", lambda: os.listdir("/proc/1/fd")), ("exe", lambda: os.readlink("/proc/1/exe")),
                 ("open exe", lambda: open("/proc/1/exe", "rb").read(4)),
                 ("environ", lambda: open("/proc/1/environ").read()),
                 ("mem", lambda: open("/proc/1/mem", "rb").read(1)), ("root", lambda: os.listdir("/proc/1/root")),
                 ("cwd", lambda: os.listdir("/proc/1/cwd")), ("maps", lambda: open("/proc/1/maps").read())):
    try:
        fn()
        out[name] = "allowed"
    except OSError as e:
        out[name] = e.errno
out["score"] = open("/proc/1/oom_score_adj").read().strip()
print(json.dumps(out))
"""


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("user", ["root", "user"])
def test_sandbox_code_cannot_touch_inits_proc_entries(user):
    p = py(INIT_PROC_PROBE, opts=["--user", user])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    score = out.pop("score")
    reached = {k: v for k, v in out.items() if v not in (EACCES, EPERM)}
    assert not reached, f"init's /proc entries reachable from inside as {user}: {reached}"
    assert score != "1000"


# ---- what /proc shows of the host ---------------------------------------------------

@pytest.mark.usefixtures("runner")
def test_kernel_command_line_host_locks_and_inits_command_line_are_neutral():
    # Hold a lock inside too: /proc/locks shows nothing at all.
    p = py("import fcntl, json\nf = open('/tmp/l', 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
           "print(json.dumps({k: open(p, 'rb').read().decode(errors='replace') for k, p in "
           "(('cmdline', '/proc/cmdline'), ('locks', '/proc/locks'), ('init', '/proc/1/cmdline'))}))")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["cmdline"] == "", out["cmdline"]
    assert out["locks"] == "", out["locks"]
    assert out["init"] == "cela-init\0", out["init"]


# ---- the dev-only `host` template ---------------------------------------------------

def create(daemon, template="host", **kw):
    return daemon.request("POST", "/v1/sessions", {"template": template, "limits": {"memory_mb": 128}}, **kw)


def assert_refused(answer):
    status, err, _ = answer
    assert status == 403, (status, err)
    assert err["error"]["code"] == "forbidden" and "dev" in err["error"]["message"], err


def test_without_dev_mode_no_session_gets_the_host_template():
    d = Daemon({"max_sessions": 5}, dev=False).start()
    try:
        assert_refused(create(d))  # not even local root
        assert_refused(create(d, tcp=True, key=d.key))
        assert d.request("GET", "/v1/sessions")[1]["sessions"] == []
    finally:
        d.close()


@pytest.mark.parametrize("how", ["flag", "config"])
def test_in_dev_mode_only_local_root_gets_the_host_template(how):
    d = (Daemon({"max_sessions": 5}) if how == "flag" else Daemon({"max_sessions": 5, "dev_mode": True}, dev=False))
    d.start()
    try:
        status, s, _ = create(d)
        assert status == 201, s
        d.delete(s["id"])
        # The operator's own key over TCP is not local root.
        assert_refused(create(d, tcp=True, key=d.key))
    finally:
        d.close()
