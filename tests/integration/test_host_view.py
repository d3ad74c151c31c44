"""Nothing of the host is visible or runnable from inside, and init survives OOM and a
full disk (docs/security.md; issue 7). Each test attacks from inside a
sandbox; those marked with the runner run with `cela run` and again in a daemon
session (conftest.runner)."""
import json

import pytest

import ownership
from conftest import py, run, run_json
from daemon_util import Daemon

EACCES, EPERM = 13, 1


def init_host_pid(sid):
    """The host pid of a session's init: the member of its own cgroup that is pid 1
    of the sandbox (execs live in child cgroups)."""
    for parent in list(ownership.CGROUP_ROOT.glob("*/cela")) + [ownership.CGROUP_ROOT / "cela"]:
        procs = parent / sid / "cgroup.procs"
        if not procs.exists():
            continue
        for pid in procs.read_text().split():
            status = open(f"/proc/{pid}/status").read()
            nspid = next(l for l in status.splitlines() if l.startswith("NSpid:")).split()
            if nspid[-1] == "1":
                return int(pid)
    raise AssertionError(f"no init found for {sid}")


def host_can_lower_oom_scores():
    """CAP_SYS_RESOURCE in our effective set (some containers drop it)."""
    eff = next(l for l in open("/proc/self/status") if l.startswith("CapEff:")).split()[1]
    return bool(int(eff, 16) >> 24 & 1)


class Session:
    """One daemon session for tests that need several execs in the same sandbox."""

    def __init__(self, daemon, **body):
        self.d = daemon
        body.setdefault("template", "host")
        body.setdefault("limits", {"memory_mb": 256})
        status, s, _ = daemon.request("POST", "/v1/sessions", body)
        assert status == 201, s
        self.id = s["id"]

    def run(self, argv, **extra):
        status, rec, _ = self.d.request("POST", f"/v1/sessions/{self.id}/run", {"argv": argv, **extra}, timeout=120)
        assert status == 200, rec
        return rec

    def state(self):
        return self.d.request("GET", f"/v1/sessions/{self.id}")[1]["state"]

    def close(self):
        self.d.request("DELETE", f"/v1/sessions/{self.id}")


@pytest.fixture
def session(runner_daemon):
    sessions = []

    def make(**body):
        s = Session(runner_daemon, **body)
        sessions.append(s)
        return s

    yield make
    for s in sessions:
        s.close()


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


def test_a_root_exec_resolves_its_program_and_cwd_with_its_own_capabilities(session):
    # A root exec never holds CAP_SYS_PTRACE; init does. Were the exec's program and
    # cwd resolved before the exec dropped to its own capabilities, it could execute
    # or enter another process's /proc/PID/exe and /proc/PID/cwd.
    s = session()
    rec = s.run(["sh", "-c", "sleep 120 >/dev/null 2>&1 & echo $!"])
    pid = rec["stdout"].strip()
    assert rec["exit_code"] == 0 and pid.isdigit(), rec
    ran = s.run([f"/proc/{pid}/exe", "0"], user="root")
    assert ran["state"] == "failed" and ran["exit_code"] == 126, ran
    assert "Permission denied" in ran["reason"], ran
    entered = s.run(["pwd"], user="root", cwd=f"/proc/{pid}/cwd")
    assert entered["state"] == "failed" and "Permission denied" in entered["reason"], entered
    # Its own capabilities still work: root reads a root-only file, as uid 1000 cannot.
    assert s.run(["ls", "/root"], user="root")["exit_code"] == 0
    assert s.run(["ls", "/root"], user="user")["exit_code"] != 0


@pytest.mark.usefixtures("runner")
def test_a_user_exec_cannot_start_in_or_from_a_root_only_directory():
    p = run(["pwd"], opts=["--user", "user", "--cwd", "/root"])
    assert p.returncode != 0 and "/root" not in p.stdout, (p.returncode, p.stdout, p.stderr)
    p = run(["/root/../root/x"], opts=["--user", "user"])
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


def test_init_is_protected_from_the_oom_killer_and_execs_are_not(session):
    s = session()
    pid = init_host_pid(s.id)
    init_score = int(open(f"/proc/{pid}/oom_score_adj").read())
    own_score = int(open("/proc/self/oom_score_adj").read())
    # Lowering a score takes CAP_SYS_RESOURCE; without it init keeps the daemon's.
    assert init_score == (-1000 if host_can_lower_oom_scores() else own_score)
    rec = s.run(["cat", "/proc/self/oom_score_adj"])
    assert rec["stdout"].strip() == "1000", rec


@pytest.mark.usefixtures("runner")
def test_execs_start_first_in_line_for_the_oom_killer_and_cannot_step_below_0():
    p = py("import os\nprint(open('/proc/self/oom_score_adj').read().strip())\n"
           "for v in ('0', '-1'):\n"
           "    try:\n        with open('/proc/self/oom_score_adj', 'w') as f:\n            f.write(v)\n        print(v, 'ok')\n"
           "    except OSError as e:\n        print(v, e.errno)\n", opts=["--user", "root"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:3] == ["1000", "0 ok", f"-1 {EACCES}"], p.stdout


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


# ---- OOM and a full disk ------------------------------------------------------------

# Memory that is in no process's RSS (a memfd's pages): the OOM killer, choosing by
# size, would pick init (a few MB resident) over dd (one).
MEMFD_HOG = ("import os\nfd = os.memfd_create('hog', 0)\nos.set_inheritable(fd, True)\n"
             "os.execvp('dd', ['dd', 'if=/dev/zero', f'of=/proc/self/fd/{fd}', 'bs=1M'])")


@pytest.mark.usefixtures("runner")
def test_an_exec_killed_by_the_oom_killer_is_reported_oom_killed():
    result, _, _ = run_json(["python3", "-c", MEMFD_HOG], opts=["--memory", "128m"])
    assert result["state"] == "oom_killed", result


def test_after_an_oom_kill_the_session_stays_usable(session):
    s = session(limits={"memory_mb": 128})
    pid = init_host_pid(s.id)
    rec = s.run(["python3", "-c", MEMFD_HOG])
    assert rec["state"] == "oom_killed", rec
    assert s.run(["echo", "again"])["stdout"] == "again\n"
    assert s.state() == "ready" and init_host_pid(s.id) == pid


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("where,memory", [("/tmp/fill", "128m"), ("/dev/shm/fill", "64m")])
def test_filling_a_tmpfs_gives_enospc_to_the_writer(where, memory):
    # The writable layer (512 MiB asked) and /dev/shm (64 MiB by default) are larger
    # than the memory limit their pages count against: the writer must hit ENOSPC,
    # not the OOM killer (nor kill init).
    p = run(["sh", "-c", f"dd if=/dev/zero of={where} bs=1M; echo survived"],
            opts=["--memory", memory, "--disk", "512m"])
    assert "No space left on device" in p.stderr, (p.returncode, p.stderr)
    assert p.stdout.strip().endswith("survived") and p.returncode == 0, (p.returncode, p.stdout, p.stderr)


def test_after_filling_the_disk_the_session_stays_usable(session):
    s = session(limits={"memory_mb": 128, "disk_mb": 512})
    pid = init_host_pid(s.id)
    rec = s.run(["dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M"])
    assert rec["state"] == "exited" and "No space left on device" in rec["stderr"], rec
    # The full disk stays full; processes still have their memory.
    assert s.run(["python3", "-c", "b = bytearray(32 << 20); print('ok')"])["stdout"] == "ok\n"
    assert s.run(["rm", "/tmp/fill"])["exit_code"] == 0
    assert s.state() == "ready" and init_host_pid(s.id) == pid
