"""Metrics, limit events, session events, Prometheus and the daemon's logs (issue 10,
"Metrics and events"), from a real client against a private daemon. Each limit is hit
from inside a sandbox and must show in the exec's reason, the session's events, its
metrics and the audit."""
import http.client
import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_until
from daemon_util import Daemon, UnixConnection


@pytest.fixture
def daemon():
    d = Daemon({"max_sessions": 20, "metrics": {"sample_interval_s": 1},
                "tenant_quotas": {"max_sessions": 20, "max_memory_mb": 16384, "max_cpus": 2}}).start()
    yield d
    d.close()


def events(d, sid, key=None, tcp=False):
    status, body, _ = d.request("GET", f"/v1/sessions/{sid}/events", tcp=tcp, key=key)
    assert status == 200, body
    return body["events"]


def limit_kinds(d, sid):
    return [e["data"]["kind"] for e in events(d, sid) if e["kind"].startswith("limit.")]


def metrics(d, sid):
    status, m, _ = d.request("GET", f"/v1/sessions/{sid}/metrics")
    assert status == 200, m
    return m


def audit_kinds(d, sid):
    status, page, _ = d.request("GET", f"/v1/audit?session={sid}&limit=1000")
    assert status == 200, page
    return [r["kind"] for r in page["records"]]


# ---- limits hit from inside: reason, events, metrics, audit ------------------------------

def test_oom_names_the_memory_limit_everywhere(daemon):
    sid = daemon.session(limits={"memory_mb": 96})
    status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run", {"argv": ["python3", "-c", "a = 'x' * (400 << 20)"]})
    assert status == 200, r
    assert r["state"] == "oom_killed", r
    assert "memory limit" in r["reason"], r
    assert "oom" in limit_kinds(daemon, sid)
    m = metrics(daemon, sid)
    assert m["oom_kills"] >= 1
    assert any(e["kind"] == "oom" and e["exec_id"] == r["id"] for e in m["limit_events"]), m
    assert "limit.oom" in audit_kinds(daemon, sid)
    daemon.delete(sid)


def test_refused_forks_name_the_pids_limit(daemon):
    sid = daemon.session(limits={"memory_mb": 256, "pids": 12})
    r = daemon.run(sid, "for i in $(seq 40); do sleep 3 & done; wait; true")
    assert "pids limit 12 reached" in r["reason"], r
    assert "pids" in limit_kinds(daemon, sid)
    ev = [e for e in events(daemon, sid) if e["kind"] == "limit.pids"][0]
    assert ev["exec_id"] == r["id"] and "fork" in ev["data"]["detail"]
    daemon.delete(sid)


def test_disk_full_run_that_exits_0_still_says_disk(daemon):
    # Without this, a disk-full run answers only "exited with code 0".
    sid = daemon.session(limits={"memory_mb": 256, "disk_mb": 16})
    r = daemon.run(sid, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null; exit 0")
    assert r["state"] == "exited" and r["exit_code"] == 0, r
    assert "disk limit 16 MiB reached" in r["reason"], r
    assert "disk" in limit_kinds(daemon, sid)
    daemon.run(sid, "rm -f /tmp/fill")
    daemon.delete(sid)


def test_file_past_the_disk_limit_is_sigxfsz_and_says_disk(daemon):
    sid = daemon.session(limits={"memory_mb": 256, "disk_mb": 16})
    status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run", {"argv": ["truncate", "-s", "200M", "/tmp/sparse"]})
    assert status == 200, r
    assert r["state"] == "killed" and r["signal"] == 25, r  # SIGXFSZ
    assert "SIGXFSZ" in r["reason"] and "disk limit" in r["reason"], r
    assert "disk" in limit_kinds(daemon, sid)
    daemon.delete(sid)


def test_exec_timeout_is_a_limit_event(daemon):
    sid = daemon.session(limits={"memory_mb": 256})
    r = daemon.run(sid, "sleep 30", timeout_s=1)
    assert r["state"] == "timed_out", r
    assert "timeout" in limit_kinds(daemon, sid)
    assert "limit.timeout" in audit_kinds(daemon, sid)
    daemon.delete(sid)


def test_cpu_throttling_is_a_limit_event(daemon):
    sid = daemon.session(limits={"memory_mb": 256, "cpus": 0.2})
    r = daemon.run(sid, "timeout 2 sh -c 'while :; do :; done'; true")
    assert r["state"] == "exited", r
    m = metrics(daemon, sid)
    assert m["cpu_throttled_ms"] >= 100, m
    assert "cpu_throttle" in limit_kinds(daemon, sid)
    daemon.delete(sid)


def test_ttl_expiry_is_a_limit_event_and_ends_a_follower(daemon):
    sid = daemon.session(limits={"memory_mb": 256, "ttl_s": 2})
    got = []
    done = threading.Event()

    def follow():
        conn = UnixConnection(daemon.socket, timeout=30)
        conn.request("GET", f"/v1/sessions/{sid}/events?follow=1")
        resp = conn.getresponse()
        assert resp.status == 200
        for line in resp:  # ends when the daemon closes the stream
            line = line.decode().strip()
            if line.startswith("event: "):
                got.append(line[7:])
        conn.close()
        done.set()

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert done.wait(20), got
    assert got[0] == "session.create", got
    assert "limit.ttl" in got and got[-1] == "session.terminate", got
    status, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}")
    assert "ttl_expired" in json.dumps(rec), rec


def test_follow_resumes_after_last_event_id(daemon):
    sid = daemon.session(limits={"memory_mb": 256})
    first = events(daemon, sid)
    assert [e["kind"] for e in first] == ["session.create"]
    daemon.delete(sid)
    conn = UnixConnection(daemon.socket, timeout=10)
    conn.request("GET", f"/v1/sessions/{sid}/events?follow=1", headers={"Last-Event-ID": str(first[0]["seq"])})
    resp = conn.getresponse()
    body = resp.read().decode()  # the session ended: the stream closes after its end
    conn.close()
    assert "event: session.create" not in body
    assert "event: session.terminate" in body


# ---- metrics read on demand ------------------------------------------------------------------

def test_metrics_move_with_what_the_session_does(daemon):
    sid = daemon.session(limits={"memory_mb": 256})
    before = metrics(daemon, sid)
    assert before["live"] is True and before["state"] == "ready"
    daemon.run(sid, "head -c 8000000 /dev/urandom > /tmp/blob; "
                    "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); "
                    "c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.sendall(b\"x\"*300000); "
                    "n=0\nwhile n<300000: n+=len(a.recv(65536))'; "
                    "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
    after = metrics(daemon, sid)
    assert after["cpu_ms"] > before["cpu_ms"]
    assert after["disk_used_bytes"] >= before["disk_used_bytes"] + 7_000_000
    assert after["net_rx_bytes"] >= before["net_rx_bytes"] + 300_000
    assert after["net_tx_bytes"] >= before["net_tx_bytes"] + 300_000
    assert after["processes_executed"] >= before["processes_executed"] + 3  # sh, head, python3
    assert after["memory_peak_bytes"] > 0 and after["pids_peak"] >= 1
    assert after["wall_ms"] > before["wall_ms"]
    assert wait_until(lambda: len(metrics(daemon, sid)["history"]) >= 2, timeout=10)
    h = metrics(daemon, sid)["history"]
    assert h[-1]["disk_used_bytes"] >= 7_000_000
    daemon.delete(sid)
    ended = metrics(daemon, sid)
    assert ended["live"] is False and ended["state"] == "terminated"


def test_disk_metrics_agree_with_the_session_record(daemon):
    """A disk-backed layer counts what reached its image; metrics read the same meter as
    the session's record, live and after the end."""
    sid = daemon.session(limits={"memory_mb": 256}, disk={"kind": "disk"})
    daemon.run(sid, "head -c 6000000 /dev/urandom > /tmp/blob && sync")
    m = metrics(daemon, sid)
    status, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}")
    assert m["disk_written_bytes"] is not None and m["disk_written_bytes"] >= 6_000_000, m
    assert abs(m["disk_used_bytes"] - rec["disk_used_bytes"]) < 1_000_000, (m, rec)
    daemon.delete(sid)
    ended = metrics(daemon, sid)
    assert ended["disk_written_bytes"] >= m["disk_written_bytes"], ended


def test_other_tenant_cannot_read_metrics_or_events(daemon):
    sid = daemon.session(limits={"memory_mb": 256})
    status, t, _ = daemon.request("POST", "/v1/tenants", {"name": f"obs-other-{time.monotonic_ns()}"})
    status, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    for path in (f"/v1/sessions/{sid}/metrics", f"/v1/sessions/{sid}/events"):
        status, body, _ = daemon.request("GET", path, tcp=True, key=k["key"])
        assert status == 404, (path, body)
    daemon.delete(sid)


# ---- Prometheus --------------------------------------------------------------------------------

def test_prometheus_exposition_parses_and_counts(daemon):
    sid = daemon.session(limits={"memory_mb": 256})
    daemon.run(sid, "true")
    daemon.request("GET", "/v1/sessions/s-doesnotexist")  # a not_found error
    daemon.delete(sid)
    status, text, _ = daemon.request("GET", "/metrics", raw=True)
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    # The client library drops _total from counter family names.
    created = families["cela_sessions_created"]
    assert created.type == "counter"
    ok = [s for s in created.samples if s.labels.get("result") == "ok"]
    assert ok and all(s.labels["tenant"].startswith("t-") for s in ok) and sum(s.value for s in ok) >= 1
    hist = families["cela_exec_seconds"]
    assert hist.type == "histogram"
    assert any(s.name == "cela_exec_seconds_count" and s.value >= 1 for s in hist.samples)
    assert any(s.name == "cela_session_create_seconds_bucket" for s in families["cela_session_create_seconds"].samples)
    errors = families["cela_errors"]
    assert any(s.labels["code"] == "not_found" and s.value >= 1 for s in errors.samples)
    routes = {s.labels["route"] for s in families["cela_http_requests"].samples}
    assert "/v1/sessions/{id}" in routes  # patterns, never raw ids
    assert not any("s-" in r for r in routes)
    assert "cela_sessions" in families and families["cela_sessions"].type == "gauge"
    for hook in ("cela_egress_verdicts", "cela_package_installs", "cela_pool_requests", "cela_limit_events"):
        assert hook in families, hook
    # No family carries a session id as a label.
    for f in families.values():
        for s in f.samples:
            assert not any(v.startswith("s-") for v in s.labels.values()), s


def test_metrics_endpoint_needs_the_host_admin(daemon):
    status, body, _ = daemon.request("GET", "/metrics", tcp=True)
    assert status == 401
    status, t, _ = daemon.request("POST", "/v1/tenants", {"name": f"obs-prom-{time.monotonic_ns()}"})
    status, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {"admin": True})
    status, body, _ = daemon.request("GET", "/metrics", tcp=True, key=k["key"])
    assert status == 403, body
    status, body, _ = daemon.request("GET", "/metrics", tcp=True, key=daemon.key, raw=True)
    assert status == 200 and b"# TYPE cela_sessions_created_total counter" in body


# ---- logs ---------------------------------------------------------------------------------------

def test_logs_are_json_lines_with_an_access_line_per_request(daemon):
    status, body, resp = daemon.request("GET", "/v1/sessions/s-nope", tcp=True, key=daemon.key)
    assert status == 404
    rid = resp.getheader("X-Request-Id")
    access = None
    for _ in range(50):
        for line in daemon.logs().splitlines():
            if not line.startswith("{"):
                continue
            entry = json.loads(line)  # every JSON-looking line parses
            assert {"ts", "level", "msg"} <= entry.keys()
            if entry["msg"] == "access" and entry.get("request_id") == rid:
                access = entry
        if access:
            break
        time.sleep(0.05)
    assert access, daemon.logs()[-2000:]
    assert access["method"] == "GET" and access["route"] == "/v1/sessions/{id}" and access["status"] == 404
    assert access["tenant"].startswith("t-") and access["level"] == "info"
    assert isinstance(access["duration_ms"], int)
