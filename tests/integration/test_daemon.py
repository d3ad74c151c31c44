"""The daemon end to end over its real API: lifecycle, limits enforced with no client
connected, capacity and quotas, bad input, recovery after kill -9."""
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

import ownership
from conftest import CGROUP_ROOT, sandbox_pids, wait_until
from daemon_util import Daemon


def session_cgroups():
    """Session cgroups of the daemons this test started."""
    return ownership.own_session_cgroups()


@pytest.fixture(scope="module")
def daemon():
    d = Daemon({"max_sessions": 3, "tenant_quotas": {"max_sessions": 2, "max_memory_mb": 4096, "max_cpus": 2}}).start()
    yield d
    d.close()
    assert not session_cgroups(), session_cgroups()


def test_create_run_delete_with_cleanup_report(daemon):
    t0 = time.monotonic()
    status, s, _ = daemon.request("POST", "/v1/sessions", {"template": "host", "limits": {"memory_mb": 256},
                                                           "metadata": {"user": "u-17"}})
    assert status == 201, s
    assert s["state"] == "ready" and s["startup_ms"] > 0 and s["metadata"] == {"user": "u-17"}
    r = daemon.run(s["id"], "echo out; echo err >&2; exit 7")
    assert (r["state"], r["exit_code"], r["stdout"], r["stderr"]) == ("exited", 7, "out\n", "err\n")
    status, d, _ = daemon.delete(s["id"])
    assert status == 200 and d["state"] == "terminated" and d["termination"]["reason"] == "deleted"
    assert d["cleanup"]["cgroup_removed"] is True
    status, again, _ = daemon.delete(s["id"])  # idempotent
    assert status == 200 and again["termination"] == d["termination"]
    status, e, _ = daemon.request("POST", f"/v1/sessions/{s['id']}/execs", {"cmd": "true"})
    assert status == 410 and e["error"]["code"] == "gone"
    assert not sandbox_pids()
    assert time.monotonic() - t0 < 10


def test_exec_timeout_fires_without_a_client(daemon):
    sid = daemon.session()
    status, e, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": "sleep 30", "timeout_s": 1})
    assert status == 202
    time.sleep(2)  # nobody is watching
    status, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{e['id']}")
    assert rec["state"] == "timed_out", rec
    daemon.delete(sid)


def test_session_ttl_and_idle_timeout_end_sessions(daemon):
    ttl = daemon.session(limits={"memory_mb": 256, "ttl_s": 1})
    idle = daemon.session(limits={"memory_mb": 256, "idle_timeout_s": 1})
    time.sleep(2.5)
    for sid, reason in ((ttl, "ttl_expired"), (idle, "idle_timeout")):
        status, s, _ = daemon.request("GET", f"/v1/sessions/{sid}")
        assert s["state"] == "terminated" and s["termination"]["reason"] == reason, s
    assert wait_until(lambda: not sandbox_pids(), 5)


def test_init_death_marks_session_failed(daemon):
    sid = daemon.session()
    _, s, _ = daemon.request("GET", f"/v1/sessions/{sid}")
    # Kill the session's init from the host (we started it: find it through its cgroup).
    procs = Path(f"/sys/fs/cgroup/pids/cela/{sid}/cgroup.procs").read_text().split()
    assert procs
    for pid in procs:
        os.kill(int(pid), signal.SIGKILL)
    assert wait_until(lambda: daemon.request("GET", f"/v1/sessions/{sid}")[1]["state"] == "failed", 5)
    _, s, _ = daemon.request("GET", f"/v1/sessions/{sid}")
    assert s["termination"]["reason"] == "init_died"
    assert wait_until(lambda: not session_cgroups(), 5)


def test_capacity_and_quota_answer_errors_never_hang(daemon):
    a, b = daemon.session(), daemon.session()
    status, err, resp = daemon.request("POST", "/v1/sessions", {"template": "host", "limits": {"memory_mb": 256}})
    assert status == 429 and err["error"]["code"] == "quota_exceeded" and err["error"]["category"] == "quota"
    # Another tenant fills the host: 503 with Retry-After.
    status, t, _ = daemon.request("POST", "/v1/tenants", {"name": "other"})
    assert status == 201
    status, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    # Over TCP with a key: `base` (the dev-only `host` template is for local root).
    c = daemon.request("POST", "/v1/sessions", {"template": "base", "limits": {"memory_mb": 256}}, tcp=True,
                       key=k["key"])
    assert c[0] == 201
    t0 = time.monotonic()
    status, err, resp = daemon.request("POST", "/v1/sessions?wait_s=1", {"template": "base"}, tcp=True, key=k["key"])
    assert status == 503 and err["error"]["code"] == "capacity_exceeded" and resp.getheader("Retry-After")
    assert 0.9 <= time.monotonic() - t0 < 5
    # Tenants are isolated: the other tenant's session is not found for us.
    status, err, _ = daemon.request("GET", f"/v1/sessions/{c[1]['id']}")
    assert status == 404
    for sid in (a, b):
        daemon.delete(sid)
    daemon.request("DELETE", f"/v1/sessions/{c[1]['id']}", tcp=True, key=k["key"])


def test_auth_on_tcp(daemon):
    assert daemon.request("GET", "/v1/sessions", tcp=True)[0] == 401
    assert daemon.request("GET", "/v1/sessions", tcp=True, key="cela_" + "0" * 64)[0] == 401
    assert daemon.request("GET", "/v1/sessions", tcp=True, key=daemon.key)[0] == 200
    assert daemon.request("GET", "/healthz", tcp=True)[0] == 200


@pytest.mark.parametrize("body,code", [
    ("{not json", "invalid_request"),
    ("[1,2]", "invalid_request"),
    ({"limits": {"memory_mb": "lots"}}, "invalid_request"),
    ({"limits": {"cpus": -1}}, "invalid_request"),
    ({"limits": {"bogus": 1}}, "invalid_request"),
    ({"template": "no-such-template"}, "invalid_request"),
    ({"network": {"mode": "allowlist", "allow": ["not a host!"]}}, "invalid_request"),
    ({"network": {"mode": "open"}}, "invalid_request"),
    ({"unknown_field": 1}, "invalid_request"),
])
def test_bad_create_bodies(daemon, body, code):
    status, err, _ = daemon.request("POST", "/v1/sessions", body)
    assert err["error"]["code"] == code, err
    assert err["error"]["request_id"].startswith("r-")
    assert status in (400, 403)


def test_bad_exec_requests_and_wrong_state(daemon):
    sid = daemon.session()
    for body in ({}, {"argv": []}, {"argv": "ls"}, {"cmd": "x", "argv": ["y"]}, {"cmd": "x", "timeout_s": 0},
                 {"cmd": "x", "user": "admin"}, {"cmd": "x", "cwd": "relative"}):
        status, err, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", body)
        assert status == 400 and err["error"]["code"] == "invalid_request", (body, err)
    status, e, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": "sleep 5"})
    status, err, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{e['id']}/output")
    assert status == 409 and err["error"]["code"] == "conflict"
    assert daemon.request("GET", f"/v1/sessions/{sid}/execs/e-0000000000000000")[0] == 404
    for path in ("relative/x", "", "/tmp/a%00b"):
        status, err, _ = daemon.request("PUT", f"/v1/sessions/{sid}/files?path={path}", b"x")
        assert status == 400 and err["error"]["code"] == "invalid_request", (path, err)
    status, err, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path=/no/such/file")
    assert status == 404 and err["error"]["code"] == "not_found", err
    assert daemon.request("GET", "/v1/sessions/s-0000000000000000")[0] == 404
    daemon.delete(sid)


def test_huge_body_is_413_and_server_keeps_serving(daemon):
    status, err, _ = daemon.request("POST", "/v1/sessions", "x" * (2 << 20))
    assert status == 413 and err["error"]["code"] == "payload_too_large"
    assert daemon.request("GET", "/healthz")[0] == 200


def test_slow_client_is_cut_off_without_affecting_others(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finishes the header
    assert daemon.request("GET", "/healthz")[0] == 200
    s.settimeout(30)
    t0 = time.monotonic()
    data = s.recv(4096)
    while data:
        data = s.recv(4096)
    assert time.monotonic() - t0 < 25  # closed by the header timeout
    s.close()


def test_file_paths_stay_inside_the_session(daemon):
    sid = daemon.session()
    daemon.run(sid, "ln -s /etc /home/user/etc-link; ln -s ../../../../../../ /home/user/up")
    st, w, _ = daemon.request("PUT", "/v1/sessions/" + sid + "/files?path=/home/user/up/tmp/escape", b"x")
    # Resolved inside the sandbox root: it lands in the sandbox's /tmp, never the host's.
    assert not os.path.exists("/tmp/escape")
    st, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path=/home/user/etc-link/passwd", raw=True)
    assert st == 200 and b"user:x:1000" in data and b"root:x:0:0" in data
    host_passwd = Path("/etc/passwd").read_bytes()
    assert data != host_passwd
    daemon.delete(sid)


def test_recovery_after_kill_9(tmp_path):
    d = Daemon().start()
    try:
        sid = d.session()
        status, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": "sleep 1000"})
        assert status == 202
        assert wait_until(lambda: len(sandbox_pids()) >= 2, 5)
        d.stop(signal.SIGKILL)
        # Its sessions' processes die with it ...
        assert wait_until(lambda: not sandbox_pids(), 10), sandbox_pids()
        d.start()
        # ... and the restarted daemon closes the records and removes what was left.
        status, s, _ = d.request("GET", f"/v1/sessions/{sid}")
        assert s["state"] == "terminated" and s["termination"]["reason"] == "daemon_restart", s
        status, rec, _ = d.request("GET", f"/v1/sessions/{sid}/execs/{e['id']}")
        assert rec["state"] == "failed" and "restart" in rec["reason"], rec
        assert not session_cgroups()
        # The end is in the audit too, though the daemon that ran it could not write it.
        status, page, _ = d.request("GET", f"/v1/audit?session={sid}&kind=session.terminate")
        assert status == 200, page
        ends = [r["data"] for r in page["records"]]
        assert len(ends) == 1 and ends[0]["reason"] == "daemon_restart" and ends[0]["recovered"] is True, ends
    finally:
        d.close()


def test_archive_import_and_export_round_trip(daemon):
    import io
    import tarfile
    sid = daemon.session()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("a.txt", b"alpha"), ("sub/b.txt", b"beta")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    status, r, _ = daemon.request("PUT", f"/v1/sessions/{sid}/archive?path=/home/user/in", buf.getvalue())
    assert status == 404 and r["error"]["code"] == "not_found", r  # the target directory must exist first
    daemon.run(sid, "mkdir -p /home/user/in")
    status, r, _ = daemon.request("PUT", f"/v1/sessions/{sid}/archive?path=/home/user/in", buf.getvalue())
    assert status == 200 and r["entries"] >= 2, r
    assert daemon.run(sid, "cat /home/user/in/sub/b.txt; stat -c %U /home/user/in/a.txt")["stdout"] == "betauser\n"
    # A tar that points out is refused.
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        info = tarfile.TarInfo("../../../../etc/cela-evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    status, err, _ = daemon.request("PUT", f"/v1/sessions/{sid}/archive?path=/home/user/in", evil.getvalue())
    assert status == 400 and err["error"]["code"] == "invalid_request", err
    status, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/archive?path=/home/user/in", raw=True)
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = sorted(m.name.lstrip("./") for m in tar.getmembers() if m.isfile())
        assert names == ["a.txt", "sub/b.txt"], names
    daemon.delete(sid)
