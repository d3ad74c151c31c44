"""The Python SDK's WebSocket transport (sdk/python/cela/_ws.py, Sandbox.interactive)
against a real `cela serve`, and the REST transport with the optional `websockets`
package hidden (it must keep working; only interactive() refuses)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("websockets")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

import cela  # noqa: E402
from conftest_daemon import CelaDaemon  # noqa: E402

LIMITS = {"memory_mb": 256}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = CelaDaemon.start(tmp_path_factory.mktemp("sdkws"))
    try:
        yield d
    finally:
        rc = d.stop()
        assert rc == 0, f"cela serve exited with {rc}:\n{d.log()}"


@pytest.fixture(params=["unix", "tcp"])
def either(request, daemon):
    if request.param == "unix":
        return {"url": daemon.unix_url}
    return {"url": daemon.tcp_url, "api_key": daemon.api_key}


def events_until_exit(ws, exec_id):
    out, err, record = b"", b"", None
    for ev in ws:
        if ev.exec_id != exec_id:
            continue
        if ev.type == "stdout":
            out += ev.data
        elif ev.type == "stderr":
            err += ev.data
        elif ev.type == "exit":
            record = ev.record
            break
    return out, err, record


@pytest.fixture
def session_id(daemon):
    """A `host` session (dev-only: created by local root), reached over either transport."""
    sb = cela.Sandbox.create(template="host", limits=LIMITS, url=daemon.unix_url)
    yield sb.id
    sb.delete()


def test_interactive_exec_stdin_kill_resize_attach(either, session_id):
    with cela.Sandbox.connect(session_id, **either) as sb:
        with sb.interactive() as ws:
            cat = ws.exec(["cat"])
            assert cat.startswith("e-")
            ws.send_stdin(cat, "hello\n")
            ws.send_stdin(cat, b"\x00bytes\n")
            ws.resize(cat, 80, 24)
            seen = b""
            with pytest.raises(cela.Conflict):
                for ev in ws:  # the refusal arrives as an event carrying the error
                    if ev.type == "stdout":
                        seen += ev.data
                    if ev.type == "error":
                        assert ev.exec_id == cat
                        raise ev.error
            ws.close_stdin(cat)
            out, _, rec = events_until_exit(ws, cat)
            out = seen + out
            assert out == b"hello\n\x00bytes\n" and rec["exit_code"] == 0
            assert ws.offset(cat) == f"{len(out)},0"

            sleeper = ws.exec("sleep 60")
            ws.kill(sleeper, signal="SIGKILL")
            _, _, rec = events_until_exit(ws, sleeper)
            assert rec["signal"] == 9

            ws.attach(cat, "6,0")
            out, _, rec = events_until_exit(ws, cat)
            assert out == b"\x00bytes\n"
            with pytest.raises(cela.InvalidRequest):
                ws.exec(["true"], timeout_s=-5)

def test_reconnect_and_attach_from_the_last_offset(daemon, session_id):
    expected = b"".join(b"%d\n" % i for i in range(1, 30001))
    with cela.Sandbox.connect(session_id, url=daemon.tcp_url, api_key=daemon.api_key) as sb:
        ws = sb.interactive()
        eid = ws.exec("seq 1 15000; sleep 1; seq 15001 30000")
        got = b""
        for ev in ws:
            if ev.type == "stdout":
                got += ev.data
                if len(got) > 1000:
                    break
        offset = ws.offset(eid)
        ws.close()  # mid-stream
        assert offset == f"{len(got)},0"
        with sb.ws() as ws2:
            ws2.attach(eid, offset)
            out, _, rec = events_until_exit(ws2, eid)
        assert got + out == expected and rec["exit_code"] == 0


def test_auth_errors_are_typed(daemon):
    with cela.Sandbox.create(template="host", limits=LIMITS, url=daemon.unix_url) as sb:
        bad = cela.Sandbox(cela.Client(daemon.tcp_url, api_key="cela_nope_" + "0" * 40), {"id": sb.id})
        with pytest.raises(cela.Unauthorized):
            bad.interactive()


def test_rest_transport_works_without_websockets(daemon):
    """A Python without the websockets package: the SDK imports, REST works, interactive()
    says what is missing."""
    code = f"""
import sys
sys.modules["websockets"] = None  # import websockets -> ImportError
sys.path.insert(0, {str(ROOT / "sdk" / "python")!r})
import cela
assert not cela._ws.available()
with cela.Sandbox.create(template="host", limits={{"memory_mb": 256}}, url={daemon.unix_url!r}) as sb:
    r = sb.run(["echo", "rest"])
    assert r.exit_code == 0 and r.stdout == "rest\\n", r
    h = sb.exec(["cat"])
    h.write_stdin("x")
    h.close_stdin()
    assert h.wait().stdout == "x"
    try:
        sb.interactive()
    except cela.TransportError as e:
        assert "websockets" in str(e)
        print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
