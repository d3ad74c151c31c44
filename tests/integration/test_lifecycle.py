"""Pause/resume and warm pools (issue 9), from a real client: the Python SDK (sdk/python)
against a private `cela serve`, plus the host's view of the session's cgroup (the CPU
time the kernel charged it) to check that a paused session really uses none."""
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_until
from daemon_util import Daemon, cgroup_cpu_ns

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

import cela  # noqa: E402

LIMITS = {"memory_mb": 256}
BUSY = "while :; do :; done"


def cgroup_memory_bytes(sid):
    v1 = Path(f"/sys/fs/cgroup/memory/cela/{sid}/memory.usage_in_bytes")
    if v1.exists():
        return int(v1.read_text())
    return int(Path(f"/sys/fs/cgroup/cela/{sid}/memory.current").read_text())


def cpu_over(sid, seconds):
    a = cgroup_cpu_ns(sid)
    time.sleep(seconds)
    return (cgroup_cpu_ns(sid) - a) / 1e9


@pytest.fixture(scope="module")
def daemon():
    d = Daemon({"max_sessions": 20,
                "tenant_quotas": {"max_sessions": 20, "max_memory_mb": 16384, "max_cpus": 2}}).start()
    yield d
    d.close()


@pytest.fixture
def conn(daemon):
    return {"url": "unix://" + daemon.socket}


def create(conn, **kw):
    kw.setdefault("template", "host")
    kw.setdefault("limits", LIMITS)
    return cela.Sandbox.create(**conn, **kw)


def state_of(sb):
    return sb.info()["state"]


# ---- pause and resume ------------------------------------------------------------------

def test_pause_stops_cpu_use_and_keeps_memory_processes_and_files(conn):
    with create(conn) as sb:
        sb.files.write("/tmp/kept.txt", b"written before the pause\n")
        busy = sb.exec(BUSY)
        # A process holding 64 MiB of a known pattern; it prints its hash, waits for a
        # line on stdin, then hashes the same memory again.
        holder = sb.exec(["python3", "-c",
                          "import hashlib,sys\n"
                          "b=bytearray(range(256))*(256*1024)\n"
                          "print(hashlib.sha256(b).hexdigest(),flush=True)\n"
                          "sys.stdin.readline()\n"
                          "print(hashlib.sha256(b).hexdigest(),flush=True)\n"], stdin_open=True)
        assert wait_until(lambda: cgroup_memory_bytes(sb.id) > 64 << 20, 10), "the holder never allocated"
        assert cpu_over(sb.id, 1.0) > 0.05, "the busy loop is not running"

        t0 = time.monotonic()
        rec = sb.pause()
        pause_ms = (time.monotonic() - t0) * 1000
        assert rec["state"] == "paused"
        assert state_of(sb) == "paused"
        used = cpu_over(sb.id, 1.0)
        assert used < 0.02, f"a paused session used {used:.3f} s of CPU in 1 s"
        assert cgroup_memory_bytes(sb.id) > 64 << 20, "a paused session lost its memory"

        t0 = time.monotonic()
        rec = sb.resume()
        resume_ms = (time.monotonic() - t0) * 1000
        assert rec["state"] == "ready"
        assert cpu_over(sb.id, 1.0) > 0.05, "the busy loop did not run again after resume"
        assert busy.info()["state"] == "running"

        holder.write_stdin(b"\n", close=True)
        out = holder.wait(timeout=30)
        first, second = out.stdout.split()
        assert first == second, "the held memory changed across the pause"
        assert sb.files.read("/tmp/kept.txt") == b"written before the pause\n"
        busy.kill("SIGKILL")
        assert pause_ms < 1000 and resume_ms < 1000, (pause_ms, resume_ms)


def test_paused_session_without_auto_resume_refuses_exec_and_file_calls(conn, daemon):
    with create(conn) as sb:
        sb.pause()
        with pytest.raises(cela.CelaError) as err:
            sb.run("true")
        assert err.value.status == 409 and err.value.code == "conflict", err.value
        assert "paused" in str(err.value) and "resume" in str(err.value)
        with pytest.raises(cela.CelaError) as err:
            sb.files.read("/etc/hostname")
        assert err.value.status == 409, err.value
        assert state_of(sb) == "paused"
        # Pause and resume are idempotent.
        assert sb.pause()["state"] == "paused"
        assert sb.resume()["state"] == "ready"
        assert sb.resume()["state"] == "ready"
        assert sb.run("echo back").stdout == "back\n"


def test_auto_pause_when_idle_then_auto_resume_on_exec_and_on_a_file_call(conn):
    with create(conn, auto_pause_s=1, auto_resume=True) as sb:
        info = sb.info()
        assert info["auto_pause_s"] == 1 and info["auto_resume"] is True
        sb.run("sleep 1000 >/dev/null 2>&1 &")  # a process left behind keeps no clock going
        # The idle clock runs while no exec runs: a running exec keeps it from pausing.
        long = sb.exec("sleep 2")
        time.sleep(1.5)
        assert state_of(sb) == "ready"
        long.wait(timeout=10)
        assert wait_until(lambda: state_of(sb) == "paused", 5), "the idle session did not pause itself"
        assert cpu_over(sb.id, 0.3) < 0.01
        r = sb.run("echo resumed")
        assert r.stdout == "resumed\n"
        assert state_of(sb) == "ready"
        assert wait_until(lambda: state_of(sb) == "paused", 5)
        assert sb.files.read("/etc/hostname")
        assert state_of(sb) == "ready"


def test_ttl_runs_while_paused_and_the_idle_clock_does_not(conn, daemon):
    with create(conn, limits={**LIMITS, "idle_timeout_s": 1}) as idle:
        idle.pause()
        time.sleep(2.5)
        assert state_of(idle) == "paused", "the idle timeout ran while paused"
        idle.resume()
        # From the resume on, the idle clock runs again.
        assert wait_until(lambda: state_of(idle) == "terminated", 5)
        assert idle.info()["termination"]["reason"] == "idle_timeout"
    with create(conn, limits={**LIMITS, "ttl_s": 2}) as ttl:
        ttl.pause()
        assert wait_until(lambda: state_of(ttl) == "terminated", 6), "the TTL stopped while paused"
        assert ttl.info()["termination"]["reason"] == "ttl_expired"
        assert not Path(f"/sys/fs/cgroup/memory/cela/{ttl.id}").exists()


def test_exec_timeout_does_not_run_while_paused(conn):
    with create(conn) as sb:
        e = sb.exec("sleep 100", timeout_s=1.5)
        t0 = time.monotonic()
        sb.pause()
        time.sleep(2.5)
        assert e.info()["state"] == "running", "the exec timed out while frozen"
        sb.resume()
        rec = e.wait(timeout=10)
        assert rec.record["state"] == "timed_out"
        assert time.monotonic() - t0 > 3.5


def test_delete_of_a_paused_session_kills_everything(conn, daemon):
    sb = create(conn)
    sb.exec(BUSY)
    sb.pause()
    final = sb.delete()
    assert final["state"] == "terminated"
    assert final["cleanup"]["cgroup_removed"] is True, final
    assert not Path(f"/sys/fs/cgroup/memory/cela/{sb.id}").exists()
    assert not Path(f"/sys/fs/cgroup/freezer/cela/{sb.id}").exists()


# ---- warm pools ------------------------------------------------------------------------

POOL_LIMITS = {"memory_mb": 256}


def pooled_ids(d):
    con = sqlite3.connect(f"file:{d.state}/cela.db?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in con.execute("SELECT id FROM pooled_sessions")}
    finally:
        con.close()


def pools(d):
    status, body, _ = d.request("GET", "/v1/pools")
    assert status == 200, body
    return body["pools"]


def wait_ready(d, n, timeout=30):
    assert wait_until(lambda: pools(d)[0]["ready"] == n, timeout), pools(d)


def new_tenant_key(d):
    status, t, _ = d.request("POST", "/v1/tenants", {"name": f"pool-{time.monotonic_ns()}"})
    assert status == 201, t
    status, k, _ = d.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    assert status == 201, k
    return t["id"], k["key"]


def tcp(d, key):
    return {"url": f"http://127.0.0.1:{d.port}", "api_key": key}


@pytest.fixture
def pooled():
    """Per test: the pool's ready sandboxes live as long as their daemon, and every test
    must end with none of its own left."""
    d = Daemon({"max_sessions": 20,
                "tenant_quotas": {"max_sessions": 20, "max_memory_mb": 16384, "max_cpus": 2},
                "pools": [{"template": "base", "size": 2, "limits": POOL_LIMITS}]}).start()
    yield d
    d.close()


def test_pool_fills_in_the_background_and_get_pools_reports_it(pooled):
    wait_ready(pooled, 2)
    [p] = pools(pooled)
    assert p["template"] == "base" and p["size"] == 2 and p["limits"]["memory_mb"] == 256
    assert p["booting"] == 0 and p["refill_ms_p50"] > 0 and p["last_error"] is None
    assert len(pooled_ids(pooled)) == 2
    # Host numbers: a tenant's key may not read them.
    _, key = new_tenant_key(pooled)
    status, body, _ = pooled.request("GET", "/v1/pools", tcp=True, key=key)
    assert status == 403, body


def pool_requests(d, result):
    """cela_pool_requests_total{template="base", result=…} from a real Prometheus parser."""
    from prometheus_client.parser import text_string_to_metric_families
    _, text, _ = d.request("GET", "/metrics", raw=True)
    return sum(s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples
               if s.name == "cela_pool_requests_total" and s.labels == {"template": "base", "result": result})


def test_claim_is_fresh_belongs_to_the_claimer_and_the_pool_refills(pooled):
    wait_ready(pooled, 2)
    before = pools(pooled)[0]
    prom_hits, prom_misses = pool_requests(pooled, "hit"), pool_requests(pooled, "miss")
    tenant, key = new_tenant_key(pooled)
    _, other = new_tenant_key(pooled)
    ids_before = pooled_ids(pooled)
    # A cold session for comparison: the pid its first exec gets.
    with cela.Sandbox.create(**tcp(pooled, key), template="base", limits=POOL_LIMITS, pool=False) as cold:
        assert cold.id not in ids_before
        cold_pid = cold.run("echo $$").stdout.strip()
    a = cela.Sandbox.create(**tcp(pooled, key), template="base", limits=POOL_LIMITS, metadata={"turn": "1"})
    try:
        assert a.id in ids_before, "the create did not claim a pooled session"
        info = a.info()
        assert info["metadata"] == {"turn": "1"} and info["state"] == "ready"
        assert info["startup_ms"] <= 5, info
        # Claimed: the session is the claimer's, and nobody else's.
        status, _, _ = pooled.request("GET", f"/v1/sessions/{a.id}", tcp=True, key=other)
        assert status == 404
        assert a.id not in pooled_ids(pooled)
        # It never ran code before the claim: its first exec is the first process init starts.
        assert a.run("echo $$").stdout.strip() == cold_pid
        a.files.write("/tmp/left-by-a", b"x")
        a.exec("sleep 1000")
    finally:
        a.delete()
    b = cela.Sandbox.create(**tcp(pooled, key), template="base", limits=POOL_LIMITS)
    try:
        assert b.id in ids_before and b.id != a.id
        assert not b.files.exists("/tmp/left-by-a"), "a claim saw files of an earlier claim"
        procs = b.run("ps -eo comm=").stdout.split()
        assert "sleep" not in procs, procs
    finally:
        b.delete()
    after = pools(pooled)[0]
    assert after["hits"] == before["hits"] + 2, after
    assert after["misses"] == before["misses"], after  # the pool:false create is neither
    assert (pool_requests(pooled, "hit") - prom_hits, pool_requests(pooled, "miss") - prom_misses) == (2, 0)
    assert after["claim_ms_p50"] is not None and after["claim_ms_p50"] < 5, after
    wait_ready(pooled, 2)
    assert not (pooled_ids(pooled) & {a.id, b.id}), "a claimed sandbox went back to the pool"


def test_creates_beyond_the_pool_are_misses_and_other_shapes_are_neither(pooled):
    wait_ready(pooled, 2)
    before = pools(pooled)[0]
    prom_misses = pool_requests(pooled, "miss")
    made = []
    errors = []

    def one():
        try:
            made.append(cela.Sandbox.create(url="unix://" + pooled.socket, template="base", limits=POOL_LIMITS))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other = cela.Sandbox.create(url="unix://" + pooled.socket, template="base", limits={"memory_mb": 300})
    try:
        assert not errors, errors
        after = pools(pooled)[0]
        hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
        assert hits + misses == 5, after
        assert hits >= 2 and misses >= 1, after
        assert pool_requests(pooled, "miss") - prom_misses == misses
    finally:
        for s in made + [other]:
            s.delete()
    wait_ready(pooled, 2)


def test_pooled_sessions_count_against_host_capacity():
    d = Daemon({"max_sessions": 3,
                "tenant_quotas": {"max_sessions": 20, "max_memory_mb": 16384, "max_cpus": 2},
                "pools": [{"template": "base", "size": 2, "limits": POOL_LIMITS}]}).start()
    try:
        wait_ready(d, 2)
        conn = {"url": "unix://" + d.socket}
        # Two of three host slots are the pool's: one cold create fits, a second does not.
        one = cela.Sandbox.create(**conn, template="base", limits=POOL_LIMITS, pool=False)
        with pytest.raises(cela.CelaError) as err:
            cela.Sandbox.create(**conn, template="base", limits=POOL_LIMITS, pool=False)
        assert err.value.status == 503, err.value
        status, _, _ = d.request("GET", "/readyz")
        assert status == 503, "a host full of pooled sessions is not ready for more"
        # A claim needs no new slot; with the host full the pool cannot refill.
        claimed = cela.Sandbox.create(**conn, template="base", limits=POOL_LIMITS)
        time.sleep(1)
        p = pools(d)[0]
        assert p["ready"] == 1 and p["booting"] == 0, p
        one.delete()
        wait_ready(d, 2)  # the freed slot goes to the pool
        claimed.delete()
    finally:
        d.close()


@pytest.mark.skipif(not Path("/var/lib/cela/templates/code-interpreter").exists(),
                    reason="make code-interpreter-template builds it")
def test_a_template_with_a_start_command_is_never_handed_out_from_a_pool():
    """A pooled sandbox has not run its template's start command (that runs with the
    session it serves): a pool of such a template boots nothing and says why, and a
    create starts cold with its server up."""
    d = Daemon({"pools": [{"template": "code-interpreter", "size": 1, "limits": {"memory_mb": 1024}}]}).start()
    try:
        assert wait_until(lambda: "start command" in (pools(d)[0]["last_error"] or ""), 30), pools(d)
        assert pools(d)[0]["ready"] == 0 and not pooled_ids(d)
        sid = d.session(template="code-interpreter", limits={"memory_mb": 1024})
        r = d.run(sid, "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:49999/health').status)\"")
        assert r["exit_code"] == 0 and r["stdout"].strip() == "200", r
        d.delete(sid)
    finally:
        d.close()


def test_pooled_sessions_end_with_the_daemon_and_after_a_crash():
    d = Daemon({"pools": [{"template": "base", "size": 2, "limits": POOL_LIMITS}]}).start()
    try:
        wait_ready(d, 2)
        first = pooled_ids(d)
        assert all(Path(f"/sys/fs/cgroup/memory/cela/{i}").exists() for i in first)
        # A crash: the inits die with the daemon (PDEATHSIG), the cgroups and rows stay.
        d.stop(signal.SIGKILL)
        assert pooled_ids(d) == first
        d.start()
        wait_ready(d, 2)
        second = pooled_ids(d)
        assert not (first & second)
        for i in first:
            assert not Path(f"/sys/fs/cgroup/memory/cela/{i}").exists(), f"recovery left {i}"
        # A clean stop tears the pool down.
        d.stop()
        assert pooled_ids(d) == set()
        for i in second:
            assert not Path(f"/sys/fs/cgroup/memory/cela/{i}").exists(), f"stop left {i}"
    finally:
        d.close()
