"""The Python SDK (sdk/python) against a real `cela serve` started by this module."""
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

import cela  # noqa: E402
from conftest_daemon import CelaDaemon  # noqa: E402

LIMITS = {"memory_mb": 256}
NUMBERED = ("i=1; while [ $i -le 40 ]; do echo \"out $i\"; echo \"err $i\" >&2; "
            "[ $((i % 4)) -eq 0 ] && sleep 0.1; i=$((i+1)); done")
EXPECTED_OUT = "".join(f"out {i}\n" for i in range(1, 41)).encode()
EXPECTED_ERR = "".join(f"err {i}\n" for i in range(1, 41)).encode()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = CelaDaemon.start(tmp_path_factory.mktemp("sdk"))
    try:
        yield d
    finally:
        rc = d.stop()
        assert rc == 0, f"cela serve exited with {rc}:\n{d.log()}"


@pytest.fixture
def unix(daemon):
    return {"url": daemon.unix_url}


@pytest.fixture
def tcp(daemon):
    return {"url": daemon.tcp_url, "api_key": daemon.api_key}


@pytest.fixture(params=["unix", "tcp"])
def either(request, daemon):
    """Runs a test over the unix socket and again over TCP with the key."""
    if request.param == "unix":
        return {"url": daemon.unix_url}
    return {"url": daemon.tcp_url, "api_key": daemon.api_key}


def create(conn, **kw):
    # The dev-only `host` template is for local root; key holders over TCP get `base`.
    kw.setdefault("template", "base" if conn.get("api_key") else "host")
    kw.setdefault("limits", LIMITS)
    return cela.Sandbox.create(**conn, **kw)


def session_state(daemon, sid):
    status, body = daemon.request("GET", f"/v1/sessions/{sid}")
    return body.get("state") if status == 200 else status


# -- sessions over both transports ----------------------------------------------------

def test_create_run_delete_over_unix_socket(unix, daemon):
    with create(unix, metadata={"suite": "sdk"}) as sb:
        assert sb.id
        info = sb.info()
        assert info["id"] == sb.id and info["state"] in ("ready", "running")
        assert info["metadata"] == {"suite": "sdk"}
        assert info["limits"]["memory_mb"] == 256
        r = sb.run("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.stdout, r.stderr, r.state) == (3, "out\n", "err\n", "exited")
        assert isinstance(r.record, dict) and r.record["id"]
        assert r.duration_ms is not None and r.cpu_ms is not None and r.peak_memory_bytes is not None
        r = sb.run(["echo", "a b", "$HOME"])
        assert r.stdout == "a b $HOME\n" and r.ok
        final = sb.delete()
        assert final["state"] == "terminated" and "cleanup" in final, final
        assert final["termination"]["reason"] == "deleted"
        again = sb.delete()  # idempotent
        assert again["id"] == sb.id and again["state"] == "terminated"
    assert session_state(daemon, sb.id) == "terminated"


def test_create_run_delete_over_tcp_with_key(tcp):
    with create(tcp) as sb:
        r = sb.run(["sh", "-c", "echo $((6 * 7))"])
        assert r.exit_code == 0 and r.stdout == "42\n"
        assert sb.info()["state"] in ("ready", "running")


def test_tcp_without_or_with_a_wrong_key_is_unauthorized(daemon):
    for key in ("", "not-a-key"):
        with pytest.raises(cela.Unauthorized) as ei:
            cela.Sandbox.create(template="host", limits=LIMITS, url=daemon.tcp_url, api_key=key)
        e = ei.value
        assert e.status == 401 and e.code == "unauthorized" and isinstance(e, cela.CelaError)


def test_environment_variables_pick_the_endpoint(daemon, monkeypatch):
    monkeypatch.setenv("CELA_URL", daemon.tcp_url)
    monkeypatch.setenv("CELA_API_KEY", daemon.api_key)
    assert cela.default_url() == daemon.tcp_url
    with cela.Sandbox.create(template="base", limits=LIMITS) as sb:
        assert sb.run("echo env").stdout == "env\n"


def test_run_env_cwd_stdin_and_binary_output(unix):
    with create(unix, env={"SESSION_VAR": "s"}) as sb:
        r = sb.run("echo $SESSION_VAR $EXEC_VAR; pwd", env={"EXEC_VAR": "e"}, cwd="/tmp")
        assert r.stdout == "s e\n/tmp\n", r
        assert sb.run(["cat"], stdin="from stdin").stdout == "from stdin"
        r = sb.run(["printf", "\\377\\376ok"])
        assert r.stdout_raw == b"\xff\xfeok" and r.stdout.endswith("ok") and "\ufffd" in r.stdout


# -- execs ------------------------------------------------------------------------------

def test_exec_output_streams_incrementally(either):
    with create(either) as sb:
        t0 = time.monotonic()
        h = sb.exec(["sh", "-c", "echo a; sleep 2; echo b"])
        assert h.id and h.state == "running"
        seen = []
        for chunk in h.output():
            seen.append((time.monotonic() - t0, chunk.stream, chunk.data))
        assert b"".join(d for _, s, d in seen if s == "stdout") == b"a\nb\n"
        first_at, _, first = seen[0]
        assert first == b"a\n" and first_at < 1.8, seen  # before the process ended
        assert seen[-1][0] >= 1.9, seen
        r = h.wait()
        assert (r.state, r.exit_code, r.stdout) == ("exited", 0, "a\nb\n")


def test_exec_wait_without_reading_output(unix):
    with create(unix) as sb:
        h = sb.exec("sleep 1; echo done; echo warn >&2; exit 5", stdin_open=False)
        r = h.wait(timeout=60)
        assert (r.state, r.exit_code, r.stdout, r.stderr) == ("exited", 5, "done\n", "warn\n")
        assert h.info()["state"] == "exited"
        h2 = sb.exec(["sleep", "5"])
        with pytest.raises(cela.ExecTimeout):
            h2.wait(timeout=0.5)
        h2.kill(signal="SIGKILL", grace_s=0)
        assert h2.wait(timeout=30).state == "killed"


def test_write_stdin_and_close_stdin(unix):
    with create(unix) as sb:
        h = sb.exec(["cat"])
        h.write_stdin("hello ")
        h.write_stdin(b"world\n")
        time.sleep(0.2)
        assert h.info()["state"] == "running"
        h.close_stdin()
        r = h.wait(timeout=30)
        assert (r.state, r.exit_code, r.stdout) == ("exited", 0, "hello world\n")
        with pytest.raises(cela.Conflict):
            h.write_stdin("late")


def test_kill_ends_the_whole_tree_including_a_setsid_grandchild(unix):
    with create(unix) as sb:
        h = sb.exec(["sh", "-c", "(setsid sh -c 'echo $$ > /tmp/gc.pid; exec sleep 300' &); exec sleep 300"])
        deadline = time.monotonic() + 20
        pid = ""
        while time.monotonic() < deadline and not pid:
            r = sb.run("cat /tmp/gc.pid 2>/dev/null")
            pid = r.stdout.strip()
            time.sleep(0.1)
        assert pid.isdigit(), "the grandchild never started"
        assert sb.run(f"kill -0 {pid}").exit_code == 0  # alive, in another session/process group
        h.kill()
        r = h.wait(timeout=30)
        assert r.state == "killed", r.record
        assert sb.run(f"kill -0 {pid}").exit_code != 0, "the setsid grandchild survived the kill"


def test_timeout_marks_the_exec_timed_out(unix):
    with create(unix) as sb:
        t0 = time.monotonic()
        r = sb.run(["sleep", "30"], timeout_s=1)
        assert r.state == "timed_out", r.record
        assert time.monotonic() - t0 < 15
        h = sb.exec(["sleep", "30"], timeout_s=1)
        assert h.wait(timeout=30).state == "timed_out"


# -- output resume ------------------------------------------------------------------------

def _split(chunks):
    out = b"".join(c.data for c in chunks if c.stream == "stdout")
    err = b"".join(c.data for c in chunks if c.stream == "stderr")
    return out, err


def test_output_resumes_on_a_new_connection_with_last_event_id(either):
    with create(either) as sb:
        h = sb.exec(["sh", "-c", NUMBERED])
        first = []
        gen = h.output()
        for chunk in gen:
            first.append(chunk)
            if len(first) == 3:
                break
        gen.close()  # the first connection goes away mid-stream
        assert first[-1].id and "," in first[-1].id
        rest = list(h.output(last_event_id=first[-1].id))
        out, err = _split(first + rest)
        assert out == EXPECTED_OUT
        assert err == EXPECTED_ERR
        # A late reader from the start gets everything once, too.
        assert _split(list(h.output())) == (EXPECTED_OUT, EXPECTED_ERR)
        assert h.wait().exit_code == 0


def test_output_reconnects_by_itself_when_the_connection_drops(unix):
    with create(unix) as sb:
        h = sb.exec(["sh", "-c", NUMBERED])
        opened = []
        follow = h._follow

        def counting_follow(position, timeout):
            opened.append(position)
            return follow(position, timeout)

        h._follow = counting_follow
        chunks = []
        for chunk in h.output():
            chunks.append(chunk)
            if len(chunks) in (2, 5):
                h._drop_stream()  # the socket dies under the iterator
        assert len(opened) >= 2 and opened[0] is None and opened[1], opened
        assert _split(chunks) == (EXPECTED_OUT, EXPECTED_ERR)


# -- files ------------------------------------------------------------------------------

def test_files_round_trip(either):
    with create(either) as sb:
        blob = bytes(range(256)) * 64
        w = sb.files.write("/tmp/sdk/blob.bin", blob, parents=True)
        assert w["size"] == len(blob) and len(w["sha256"]) == 64
        assert sb.files.read("/tmp/sdk/blob.bin") == blob
        sb.files.write("/tmp/sdk/hello.txt", "héllo\n", mode=0o600)
        assert sb.files.read("/tmp/sdk/hello.txt") == "héllo\n".encode()
        assert sb.run("cat /tmp/sdk/hello.txt; stat -c %a /tmp/sdk/hello.txt").stdout == "héllo\n600\n"
        sb.files.mkdir("/tmp/sdk/a/b", parents=True)
        entries = {e["name"]: e for e in sb.files.list("/tmp/sdk")}
        assert set(entries) == {"blob.bin", "hello.txt", "a"}, entries
        assert entries["blob.bin"]["type"] == "file" and entries["blob.bin"]["size"] == len(blob)
        assert entries["a"]["type"] == "dir"
        deep = {e["path"] for e in sb.files.list("/tmp/sdk", depth=3)}
        assert "/tmp/sdk/a/b" in deep, deep
        sb.run("echo made inside > /tmp/sdk/inside.txt")
        assert sb.files.read("/tmp/sdk/inside.txt") == b"made inside\n"
        sb.files.remove("/tmp/sdk/hello.txt")
        with pytest.raises(cela.NotFound):
            sb.files.read("/tmp/sdk/hello.txt")
        with pytest.raises(cela.CelaError):
            sb.files.remove("/tmp/sdk/a")  # not empty
        sb.files.remove("/tmp/sdk/a", recursive=True)
        assert {e["name"] for e in sb.files.list("/tmp/sdk")} == {"blob.bin", "inside.txt"}


# -- errors -----------------------------------------------------------------------------

def test_unknown_session_is_not_found(unix):
    with pytest.raises(cela.NotFound) as ei:
        cela.Sandbox.connect("s-does-not-exist", **unix)
    e = ei.value
    assert e.status == 404 and e.code == "not_found" and e.category == "user" and e.request_id


def test_a_deleted_session_answers_gone(unix):
    sb = create(unix)
    sid = sb.id
    sb.delete()
    with pytest.raises((cela.Gone, cela.NotFound)):
        sb.run(["true"])
    with pytest.raises(cela.Gone) as ei:
        sb.exec(["true"])
    assert ei.value.status == 410 and ei.value.session_id == sid
    with pytest.raises((cela.Gone, cela.NotFound)):
        cela.Sandbox.connect(sid, **unix)


def test_bad_limits_are_invalid_request(unix):
    with pytest.raises(cela.InvalidRequest) as ei:
        create(unix, limits={"memory_mb": "lots"})
    assert ei.value.status == 400 and "memory_mb" in ei.value.message


def test_network_beyond_the_tenant_ceiling_is_policy_denied(unix, daemon):
    status, tenants = daemon.request("GET", "/v1/tenants")
    url = f"/v1/tenants/{tenants['tenants'][0]['id']}/network_ceiling"
    assert daemon.request("PUT", url, {"allow": ["only.test"]})[0] == 200
    try:
        with pytest.raises(cela.PolicyDenied) as ei:
            create(unix, network={"mode": "allowlist", "allow": ["example.com"]})
        assert ei.value.status == 403 and ei.value.code == "policy_denied" and ei.value.category == "policy"
    finally:
        daemon.request("DELETE", url)


def test_context_manager_deletes_on_exception(unix, daemon):
    sid = None
    with pytest.raises(RuntimeError):
        with create(unix) as sb:
            sid = sb.id
            sb.run(["true"])
            raise RuntimeError("boom")
    assert sid and session_state(daemon, sid) == "terminated"


def test_connect_to_an_existing_session(unix, tcp):
    with create(unix) as sb:
        sb.files.write("/tmp/marker", "m")
        other = cela.Sandbox.connect(sb.id, **tcp)
        assert other.id == sb.id and other.info()["id"] == sb.id
        assert other.run("cat /tmp/marker").stdout == "m"
        listed = [s["id"] for s in cela.Sandbox.list(metadata=None, **tcp)]
        assert sb.id in listed


def test_list_filters_by_metadata(unix):
    with create(unix, metadata={"owner": "alice"}) as a, create(unix, metadata={"owner": "bob"}) as b:
        ids = [s["id"] for s in cela.Sandbox.list(metadata={"owner": "alice"}, **unix)]
        assert a.id in ids and b.id not in ids
        assert a.id not in [s["id"] for s in cela.Sandbox.list(state="terminated", **unix)]
        paged = [s["id"] for s in cela.Sandbox.list(limit=1, **unix)]
        assert a.id in paged and b.id in paged and len(paged) == len(set(paged))


def test_concurrent_runs_share_one_sandbox(unix):
    with create(unix) as sb:
        results = [None] * 4

        def work(i):
            results[i] = sb.run(["sh", "-c", f"sleep 0.5; echo {i}"])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]


def test_a_pooled_connection_the_server_closed_is_replaced(unix):
    with create(unix) as sb:
        assert sb.run(["true"]).ok
        idle = list(sb._client._idle)
        assert idle, "the keep-alive connection should be pooled"
        for conn in idle:
            conn.sock.shutdown(socket.SHUT_RDWR)  # as if the daemon's idle timeout closed it
        assert sb.run(["echo", "again"]).stdout == "again\n"


def test_run_as_root_and_a_session_that_outlives_an_oom(unix):
    with create(unix) as sb:
        assert sb.run("id -u").stdout == "1000\n"
        assert sb.run("id -u", user="root").stdout == "0\n"
        r = sb.run(["python3", "-c", "x = bytearray(600 * 1024 * 1024)"])
        assert r.state == "oom_killed" and "memory" in r.reason, r.record
        assert sb.run(["echo", "alive"]).stdout == "alive\n"


def test_capacity_exceeded_then_wait_s_waits_for_room(tmp_path):
    d = CelaDaemon.start(tmp_path, extra_args=["--max-sessions", "1"])
    try:
        conn = {"url": d.unix_url}
        first = create(conn)
        try:
            with pytest.raises(cela.CapacityExceeded) as ei:
                create(conn)
            e = ei.value
            assert e.status == 503 and e.retryable and e.retry_after_s and e.category == "platform"
            timer = threading.Timer(1.0, first.delete)
            timer.start()
            t0 = time.monotonic()
            with create(conn, wait_s=30) as second:
                assert time.monotonic() - t0 >= 0.9
                assert second.run(["true"]).ok
            timer.join()
        finally:
            first.delete()
    finally:
        assert d.stop() == 0, d.log()
