"""Shared kernel budgets (docs/security.md "Kernel budgets"): per-user counters,
host-wide tables, memory the kernel spends on a session's behalf and block I/O are
bounded per session. Each test attacks from inside a sandbox, and while the attacker
still holds what it took, host root and a second sandbox must get their share."""
import contextlib
import errno
import json
import subprocess
import sys
import time

import pytest

import conftest
import ownership
from conftest import CELA, run

TEMPLATE = "base"  # python3 with ctypes; the host template may be dev-only
CGROUP_BLKIO = conftest.CGROUP_ROOT / "blkio"
pytestmark = pytest.mark.skipif(not conftest.base_available(), reason="base template not built")


# ---- helpers ---------------------------------------------------------------------------

@contextlib.contextmanager
def held(code, user="user", timeout=60):
    """Runs python3 CODE in a sandbox (with the current runner) until it prints one
    JSON line; yields that line while the process keeps running (holding what it
    took), and ends the sandbox afterwards."""
    if conftest._runner["kind"] == "session":
        d = conftest._runner["daemon"]
        st, s, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "limits": {"memory_mb": 256}})
        assert st == 201, s
        try:
            st, e, _ = d.request("POST", f"/v1/sessions/{s['id']}/execs",
                                 {"argv": ["python3", "-c", code], "user": user})
            assert st == 202, e
            end = time.monotonic() + timeout
            while True:
                st, body, _ = d.request("GET", f"/v1/sessions/{s['id']}/files?path=/tmp/held.json", raw=True)
                if st == 200:
                    yield json.loads(body)
                    break
                st, rec, _ = d.request("GET", f"/v1/sessions/{s['id']}/execs/{e['id']}")
                assert rec["state"] == "running", rec
                assert time.monotonic() < end, "the attacker printed nothing"
                time.sleep(0.05)
        finally:
            d.request("DELETE", f"/v1/sessions/{s['id']}")
        return
    p = subprocess.Popen([CELA, "run", "--template", TEMPLATE, "--user", user, "--",
                          "python3", "-c", code],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ownership.register_process(p.pid)
    try:
        line = p.stdout.readline()
        assert line.strip(), f"the attacker printed nothing: {p.wait(10)} {p.stderr.read()}"
        yield json.loads(line)
    finally:
        conftest.stop_process(p, grace=20)


def host_py(code):
    """Runs python3 CODE on the host as root; returns its JSON answer."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def inside(code, user="user"):
    """Runs python3 CODE in a fresh sandbox to its end; returns its JSON answer."""
    p = run(["python3", "-c", code], template=TEMPLATE, opts=["--user", user])
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout.splitlines()[-1])


# Publishes `result` (stdout for `cela run`, /tmp/held.json for a session) and keeps
# the process, and so what it holds, alive.
HOLD = r"""
import os, time
with open("/tmp/held.tmp", "w") as f:
    f.write(json.dumps(result))
os.rename("/tmp/held.tmp", "/tmp/held.json")
print(json.dumps(result), flush=True)
time.sleep(600)
"""


# ---- per-user counters (the session's user namespace is its own) ------------------------

@contextlib.contextmanager
def exhausted(script, what, err, small=8):
    """Holds a sandbox that took all it could of one budget (script(n, tag) is code
    leaving {"count", "errno", ...} in `result`), checks host root and a second sandbox
    each still get `small` of it, and yields the attacker's result."""
    with held(script(200000, "in") + HOLD) as got:
        assert got["errno"] == err, got
        host = host_py(script(small, "host") + "print(json.dumps(result))")
        assert host["count"] == small, f"host root starved of {what}: {host}"
        other = inside(script(small, "other") + "print(json.dumps(result))")
        assert other["count"] == small, f"a second sandbox starved of {what}: {other}"
        yield got


INOTIFY = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
fds, err = [], 0
while len(fds) < {n}:
    fd = libc.inotify_init1(0)
    if fd < 0:
        err = ctypes.get_errno()
        break
    fds.append(fd)
result = {{"count": len(fds), "errno": err,
          "limit": int(open("/proc/sys/user/max_inotify_instances").read())}}
"""


@pytest.mark.usefixtures("runner")
def test_inotify_instances_are_counted_per_session():
    with exhausted(lambda n, tag: INOTIFY.format(n=n), "inotify instances", errno.EMFILE) as got:
        # The session's own namespace limit, not a child namespace's unbounded default.
        assert got["limit"] == 128 and got["count"] <= 128, got


SIGQUEUE = r"""
import json, resource, signal, threading
sig = signal.SIGRTMIN + 1
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
n, err = 0, 0
try:
    while n < {n}:
        signal.pthread_kill(threading.get_ident(), sig)  # queued: SI_TKILL, refused past the limit
        n += 1
except OSError as e:
    err = e.errno
result = {{"count": n, "errno": err, "rlimit": resource.getrlimit(resource.RLIMIT_SIGPENDING)[0]}}
"""


@pytest.mark.usefixtures("runner")
def test_queued_signals_are_counted_per_session():
    with exhausted(lambda n, tag: SIGQUEUE.format(n=n), "queued signals", errno.EAGAIN) as got:
        assert got["rlimit"] == 4096 and got["count"] <= 4096, got


@pytest.mark.usefixtures("runner")
def test_queued_signals_share_one_ceiling_across_uids_inside():
    # Root queues 3000, then a uid-1000 child queues what it can: each uid has its own
    # counter, but both are charged to the session's owner, whose ceiling is the
    # session's RLIMIT_SIGPENDING.
    code = SIGQUEUE.format(n=3000) + r"""
import os
r, w = os.pipe()
if os.fork() == 0:
    os.setgroups([]); os.setresgid(1000, 1000, 1000); os.setresuid(1000, 1000, 1000)
    n = 0
    try:
        while n < 10000:
            signal.pthread_kill(threading.get_ident(), sig)
            n += 1
    except OSError:
        pass
    os.write(w, str(n).encode())
    os._exit(0)
os.wait()
result["second_uid"] = int(os.read(r, 64))
print(json.dumps(result))
"""
    got = inside(code, user="root")
    assert got["count"] == 3000, got
    assert 0 < got["second_uid"] <= 4096 - 3000, got


MQUEUE = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
attr = Attr(0, 10, 8192, 0)
names, err = [], 0
while len(names) < {n}:
    name = "/cela-budget-{tag}-%d-%d" % (os.getpid(), len(names))
    fd = libc.mq_open(name.encode(), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, ctypes.byref(attr))
    if fd < 0:
        err = ctypes.get_errno()
        break
    names.append(name)
result = {{"count": len(names), "errno": err}}
if {unlink}:
    for name in names:
        libc.mq_unlink(name.encode())
"""


@pytest.mark.usefixtures("runner")
def test_posix_message_queue_bytes_are_counted_per_session():
    script = lambda n, tag: MQUEUE.format(n=n, tag=tag, unlink=tag != "in")  # noqa: E731
    with exhausted(script, "message queues", errno.EMFILE, small=2) as got:
        assert 1 <= got["count"] <= 10, got  # 819200 bytes of 80 KiB queues


# ---- host-wide tables ----------------------------------------------------------------

AIO = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
n, err = 0, 0
while n < {n}:
    ctx = ctypes.c_ulong(0)
    if libc.syscall(ctypes.c_long(206), ctypes.c_long(256), ctypes.byref(ctx)) != 0:  # io_setup
        err = ctypes.get_errno()
        break
    n += 1
result = {{"count": n, "errno": err}}
"""


@pytest.mark.usefixtures("runner")
def test_aio_contexts_are_not_available_inside():
    # fs.aio-max-nr is one host-wide table no cgroup bounds: 128 contexts of 256
    # events used it up for everyone. Inside, io_setup is a kernel without AIO.
    with held(AIO.format(n=100000) + HOLD) as got:
        host = host_py(AIO.format(n=4) + "print(json.dumps(result))")
        assert host["count"] == 4, f"host root could not set up AIO contexts: {host}"
        assert got == {"count": 0, "errno": errno.ENOSYS}, got


PTYS = r"""
import json, os
ptys, err = [], 0
try:
    while len(ptys) < {n}:
        ptys.append(os.openpty())
except OSError as e:
    err = e.errno
result = {{"count": len(ptys), "errno": err}}
"""


@pytest.mark.usefixtures("runner")
def test_ptys_are_capped_per_session():
    # kernel.pty.max is shared by every devpts instance; the session's own has max=64.
    with held(PTYS.format(n=1000) + HOLD) as got:
        assert got == {"count": 64, "errno": errno.ENOSPC}, got
        host = host_py(PTYS.format(n=4) + "print(json.dumps(result))")
        assert host["count"] == 4, host
        other = inside(PTYS.format(n=4) + "print(json.dumps(result))")
        assert other["count"] == 4, other


# ---- memory the kernel spends on the session's behalf ------------------------------------

def flood(code, memory="64m"):
    """Runs a flood in a session of `memory`; returns (result, outcome record)."""
    r, out, _ = conftest.run_json(["python3", "-c", code], template=TEMPLATE, opts=["--memory", memory])
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return (json.loads(lines[-1]) if lines else None), r


TCP_FLOOD = r"""
import json, socket, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(128)
conns, peers = [], []
for _ in range(96):
    c = socket.create_connection(srv.getsockname())
    conns.append(c)
    peers.append(srv.accept()[0])  # never read: everything queues in the kernel
chunk = b"x" * 65536
queued, err, last = 0, 0, time.monotonic()
for c in conns:
    c.setblocking(False)
while time.monotonic() - last < 1.0 and queued < (600 << 20):
    for c in conns:
        try:
            queued += c.send(chunk)
            last = time.monotonic()
        except BlockingIOError:
            pass
        except OSError as e:
            err = e.errno
print(json.dumps({"queued_mib": queued >> 20, "errno": err}), flush=True)
"""


@pytest.mark.usefixtures("runner")
def test_tcp_socket_buffers_are_charged_to_the_session():
    # Loopback TCP buffers of a 64 MiB session: 403 MiB queued without an OOM before
    # cgroup v1's tcp accounting was switched on.
    got, r = flood(TCP_FLOOD)
    assert r["state"] in ("exited", "oom_killed"), r
    if got is not None:
        assert got["queued_mib"] < 96, got


UDP_FLOOD = r"""
import json, socket
receivers = []
for _ in range(500):
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    r.bind(("127.0.0.1", 0))
    receivers.append(r)  # never read
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
for r in receivers:
    for _ in range(8):
        try:
            s.sendto(b"x" * 60000, r.getsockname())
        except OSError:
            pass
queued = sum(int(l.split()[4].split(":")[1], 16) for l in open("/proc/net/udp").read().splitlines()[1:])
print(json.dumps({"queued_mib": queued >> 20}), flush=True)
"""


@pytest.mark.usefixtures("runner")
def test_udp_receive_queues_are_charged_to_the_session():
    # Datagrams queued at never-read loopback receivers: 232 MiB in a 32 MiB session
    # before socket memory was charged.
    got, r = flood(UDP_FLOOD, memory="32m")
    assert r["state"] in ("exited", "oom_killed"), r
    if got is not None:
        assert got["queued_mib"] < 48, got


PIPE_FLOOD = r"""
import fcntl, json, os
total, err, pipes = 0, 0, []
chunk = b"x" * 65536
try:
    while total < (400 << 20) and len(pipes) < 1500:
        r, w = os.pipe()
        pipes.append((r, w))
        try:
            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError:
            pass
        os.set_blocking(w, False)
        while True:
            try:
                total += os.write(w, chunk)
            except BlockingIOError:
                break
except OSError as e:
    err = e.errno
print(json.dumps({"queued_mib": total >> 20, "errno": err}), flush=True)
"""


UNIX_FLOOD = r"""
import json, socket
total, pairs = 0, []
try:
    while total < (400 << 20) and len(pairs) < 1500:
        a, b = socket.socketpair()
        pairs.append((a, b))
        a.setblocking(False)
        while True:
            try:
                total += a.send(b"x" * 65536)
            except BlockingIOError:
                break
except OSError:
    pass
print(json.dumps({"queued_mib": total >> 20}), flush=True)
"""


TMPFS_FLOOD = r"""
import json
total, err = 0, 0
try:
    with open("/tmp/fill", "wb") as f:
        while total < (200 << 20):
            f.write(b"x" * (1 << 20))
            f.flush()
            total += 1 << 20
except OSError as e:
    err = e.errno
print(json.dumps({"queued_mib": total >> 20, "errno": err}), flush=True)
"""


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("what,code", [("pipe buffers", PIPE_FLOOD), ("unix socket buffers", UNIX_FLOOD),
                                       ("tmpfs pages", TMPFS_FLOOD)])
def test_kernel_memory_is_charged_to_the_session(what, code):
    # Each was charged before this suite (kept as a guard): uncharged, one uid could
    # keep ~80 MiB in pipes (pipe-user-pages-soft plus two pages per further pipe) and
    # far more in unix sockets or the tmpfs writable layer; charged, a 32 MiB session
    # cannot.
    got, r = flood(code, memory="32m")
    assert r["state"] in ("exited", "oom_killed"), (what, r)
    if got is not None:
        assert got["queued_mib"] < 32, (what, got)
    assert r["peak_memory_bytes"] <= 32 << 20, (what, r)


# ---- block I/O --------------------------------------------------------------------------

DIRECT_READ = r"""
import json, mmap, os, sys, time
path = os.path.realpath(sys.executable)  # a template file on the host's disk
buf = mmap.mmap(-1, 1 << 20)  # O_DIRECT needs an aligned buffer
try:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    direct = True
except OSError:
    fd, direct = os.open(path, os.O_RDONLY), False
size = os.fstat(fd).st_size
total, end, off = 0, time.monotonic() + 1.5, 0
start = time.monotonic()
while time.monotonic() < end:
    if not direct:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the next read goes to the disk
    n = os.preadv(fd, [buf], off)
    total += n
    off = off + n if n and off + n + (1 << 20) <= size else 0
print(json.dumps({"mib_per_s": total / (time.monotonic() - start) / (1 << 20), "direct": direct}))
"""


def _direct_read_rate(d):
    sid = d.session(template=TEMPLATE)
    try:
        st, rec, _ = d.request("POST", f"/v1/sessions/{sid}/run", {"argv": ["python3", "-c", DIRECT_READ]})
        assert st == 200 and rec["exit_code"] == 0, rec
        return json.loads(rec["stdout"])
    finally:
        d.request("DELETE", f"/v1/sessions/{sid}")


def test_block_io_throttle_bounds_a_session_reading_the_disk():
    # Reads that miss the page cache, from a session throttled to 2 MiB/s on the disk
    # holding the templates (the default devices).
    if not (CGROUP_BLKIO.exists() or (conftest.CGROUP_ROOT / "cgroup.controllers").exists()):
        pytest.skip("no block I/O controller on this host")
    from daemon_util import Daemon
    d = Daemon({"block_io": {"read_bps": 2 << 20}}).start()
    try:
        got = _direct_read_rate(d)
        assert got["mib_per_s"] < 3.5, got
        assert "not applied" not in d.logs() and "not throttled" not in d.logs(), d.logs()
    finally:
        d.close()



# ---- host admission ----------------------------------------------------------------------

def _create(d, body, n):
    ids = []
    for _ in range(n):
        st, s, _ = d.request("POST", "/v1/sessions", body)
        assert st == 201, s
        ids.append(s["id"])
    return ids


@pytest.mark.parametrize("table,config,limits", [
    ("memory", {"host": {"memory_mb": 1024}, "overcommit": {"memory": 1.0}}, {"memory_mb": 512}),
    ("pids", {"host": {"pids": 600}, "overcommit": {"pids": 1.0}}, {"memory_mb": 64, "pids": 256}),
    # Open files: RLIMIT_NOFILE 4096 of each exec times 256 pids, per session.
    ("open files", {"host": {"files": 5 * 4096 * 128}, "overcommit": {"files": 1.0}},
     {"memory_mb": 64, "pids": 256}),
])
def test_admission_refuses_past_the_host_grant_budget(table, config, limits):
    from daemon_util import Daemon
    d = Daemon({"admission": config}).start()
    try:
        body = {"template": TEMPLATE, "limits": limits}
        ids = _create(d, body, 2)
        st, err, _ = d.request("POST", "/v1/sessions", body)
        assert st == 503, err
        assert err["error"]["code"] == "capacity_exceeded", err
        assert table in err["error"]["message"], err
        d.delete(ids.pop())  # an ended session gives its grant back
        ids += _create(d, body, 1)
        for sid in ids:
            d.delete(sid)
    finally:
        d.close()


def test_admission_measures_the_hosts_memory():
    # No capacity configured: MemTotal times the ratio. Two sessions of 45% of it
    # fit under 1.0; a third does not.
    mem_mb = int(open("/proc/meminfo").read().split("MemTotal:")[1].split()[0]) // 1024
    size = mem_mb * 45 // 100
    from daemon_util import Daemon
    d = Daemon({"admission": {"overcommit": {"memory": 1.0}}, "maxima": {"memory_mb": size},
                "tenant_quotas": {"max_sessions": 10, "max_memory_mb": 10 * size, "max_cpus": 4}}).start()
    try:
        body = {"template": TEMPLATE, "limits": {"memory_mb": size}}
        ids = _create(d, body, 2)
        st, err, _ = d.request("POST", "/v1/sessions", body)
        assert st == 503 and err["error"]["code"] == "capacity_exceeded", err
        for sid in ids:
            d.delete(sid)
    finally:
        d.close()


def test_daemon_config_sets_the_session_budgets():
    from daemon_util import Daemon
    d = Daemon({"session_budgets": {"sigpending": 100, "msgqueue_bytes": 200000, "memlock_bytes": 65536, "ptys": 8,
                                    "user_namespace": {"max_inotify_instances": 5}}}).start()
    code = (INOTIFY.format(n=50) + "ino = result\n" + PTYS.format(n=50) + "pty = result\n" + r"""
import resource
print(json.dumps({"inotify": ino["count"], "ptys": pty["count"],
                  "sigpending": resource.getrlimit(resource.RLIMIT_SIGPENDING)[0],
                  "msgqueue": resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0],
                  "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK),
                  "userns": int(open("/proc/sys/user/max_user_namespaces").read())}))
""")
    try:
        sid = d.session(template=TEMPLATE)
        st, rec, _ = d.request("POST", f"/v1/sessions/{sid}/run", {"argv": ["python3", "-c", code]})
        assert st == 200 and rec["exit_code"] == 0, rec
        assert json.loads(rec["stdout"]) == {"inotify": 5, "ptys": 8, "sigpending": 100, "msgqueue": 200000,
                                             "memlock": [65536, 65536], "userns": 0}
        d.delete(sid)
    finally:
        d.close()
