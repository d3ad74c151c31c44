"""ANY /v1/sessions/{id}/ports/{port}/{path...} (API.md "Processes, terminals, ports"):
HTTP and WebSocket proxied into 127.0.0.1:PORT inside a session through its init, with
real servers inside (python3 -m http.server, an echo server, a WebSocket echo) and real
clients outside; what the proxy must not do (forward the key, add a network, serve
another tenant, grow the daemon with a large body)."""
import asyncio
import hashlib
import http.client
import json
import socket
import time
from pathlib import Path

import pytest

from daemon_util import Daemon, UnixConnection, wait_for

TEMPLATE = "base"
SERVERS = (Path(__file__).parent / "port_servers.py").read_bytes()
STATIC_PORT, ECHO_PORT = 8000, 8100


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


def wait_until(fn, timeout=15.0):
    return wait_for(fn, timeout)


def put_file(d, sid, path, data):
    st, body, _ = d.request("PUT", f"/v1/sessions/{sid}/files?path={path}", data)
    assert st in (200, 201), body


def start(d, sid, argv):
    st, e, _ = d.request("POST", f"/v1/sessions/{sid}/execs", {"argv": argv})
    assert st == 202, e
    return e["id"]


def proxied(d, sid, port, path, method="GET", body=None, headers=None, tcp=False, key=None, timeout=60):
    return d.request(method, f"/v1/sessions/{sid}/ports/{port}{path}", body, headers=headers, tcp=tcp, key=key,
                     raw=True, timeout=timeout)


def serving(d, sid, port, path="/"):
    def up():
        st, _, _ = proxied(d, sid, port, path)
        return st != 502
    return wait_until(up)


@pytest.fixture
def session(daemon):
    sid = daemon.session(template=TEMPLATE, limits={"memory_mb": 512})
    daemon.run(sid, "mkdir -p /tmp/www/sub && echo 'hello through the proxy' > /tmp/www/sub/hello.txt")
    put_file(daemon, sid, "/tmp/servers.py", SERVERS)
    start(daemon, sid, ["python3", "-m", "http.server", str(STATIC_PORT), "--bind", "127.0.0.1",
                        "--directory", "/tmp/www"])
    start(daemon, sid, ["python3", "/tmp/servers.py", str(ECHO_PORT)])
    assert serving(daemon, sid, STATIC_PORT) and serving(daemon, sid, ECHO_PORT), daemon.logs()
    yield sid
    daemon.delete(sid)


def test_static_file_through_python_http_server(daemon, session):
    st, body, resp = proxied(daemon, session, STATIC_PORT, "/sub/hello.txt")
    assert st == 200 and body == b"hello through the proxy\n", (st, body)
    assert resp.getheader("Content-Length") == str(len(body))
    # The directory listing, with a query string kept.
    st, body, _ = proxied(daemon, session, STATIC_PORT, "/sub/?x=1")
    assert st == 200 and b"hello.txt" in body, body
    st, body, _ = proxied(daemon, session, STATIC_PORT, "/missing")
    assert st == 404  # the server's own answer, relayed


def test_post_body_headers_and_path_rewriting(daemon, session):
    payload = b"a=1&b=" + bytes(range(256)) * 4
    st, body, resp = proxied(daemon, session, ECHO_PORT, "/some/path%20x?q=a%2Fb&r=2", method="POST", body=payload,
                             headers={"Content-Type": "application/octet-stream", "X-Custom": "kept",
                                      "Connection": "X-Hop", "X-Hop": "dropped", "Keep-Alive": "timeout=5"},
                             tcp=True, key=daemon.key)
    assert st == 200, body
    echo = json.loads(body)
    assert echo["method"] == "POST" and echo["path"] == "/some/path%20x?q=a%2Fb&r=2", echo
    assert echo["body_len"] == len(payload) and echo["body_sha256"] == hashlib.sha256(payload).hexdigest()
    headers = {k.lower(): v for k, v in echo["headers"]}
    # The daemon's key never enters the sandbox; hop-by-hop fields stop at the proxy.
    assert "authorization" not in headers and daemon.key not in body.decode("latin-1"), headers
    assert "x-hop" not in headers and "keep-alive" not in headers, headers
    assert headers["host"] == f"127.0.0.1:{ECHO_PORT}" and headers["x-custom"] == "kept", headers
    assert headers["x-forwarded-prefix"] == f"/v1/sessions/{session}/ports/{ECHO_PORT}", headers
    assert resp.getheader("X-Echo") == "yes"
    # Other methods and an empty path.
    for method in ("PUT", "PATCH", "DELETE", "OPTIONS"):
        st, body, _ = proxied(daemon, session, ECHO_PORT, "", method=method, body=b"m" if method != "OPTIONS" else None)
        assert st == 200 and json.loads(body)["method"] == method and json.loads(body)["path"] == "/", body
    st, body, resp = proxied(daemon, session, ECHO_PORT, "/h", method="HEAD")
    assert st == 200 and body == b"" and int(resp.getheader("Content-Length")) > 0


def test_chunked_request_body_and_keep_alive(daemon, session):
    conn = UnixConnection(daemon.socket, timeout=30)
    try:
        def gen():
            for i in range(20):
                yield bytes([65 + i]) * 10000
        conn.request("POST", f"/v1/sessions/{session}/ports/{ECHO_PORT}/chunked", body=gen(),
                     headers={"Transfer-Encoding": "chunked"}, encode_chunked=True)
        r = conn.getresponse()
        echo = json.loads(r.read())
        want = b"".join(bytes([65 + i]) * 10000 for i in range(20))
        assert r.status == 200 and echo["body_len"] == len(want), echo
        assert echo["body_sha256"] == hashlib.sha256(want).hexdigest()
        # The same connection serves the next request (keep-alive through the proxy).
        conn.request("GET", f"/v1/sessions/{session}/ports/{STATIC_PORT}/sub/hello.txt")
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b"hello through the proxy\n"
        conn.request("GET", f"/v1/sessions/{session}/processes")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["processes"]
    finally:
        conn.close()


def _vm_hwm_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def test_large_download_streams_with_bounded_daemon_memory(daemon, session):
    size = 50 << 20
    daemon.run(session, f"head -c {size} /dev/urandom > /tmp/www/big.bin")
    want = daemon.run(session, "sha256sum /tmp/www/big.bin")["stdout"].split()[0]
    before = _vm_hwm_kb(daemon.proc.pid)
    conn = UnixConnection(daemon.socket, timeout=120)
    try:
        conn.request("GET", f"/v1/sessions/{session}/ports/{STATIC_PORT}/big.bin")
        r = conn.getresponse()
        assert r.status == 200 and int(r.getheader("Content-Length")) == size
        h, got = hashlib.sha256(), 0
        while True:
            chunk = r.read(1 << 16)
            if not chunk:
                break
            h.update(chunk)
            got += len(chunk)
            if got == (16 << 20):
                time.sleep(0.5)  # a slow reader: the daemon must not buffer ahead of it
        assert got == size and h.hexdigest() == want
    finally:
        conn.close()
    # A close-delimited body (no Content-Length) goes out chunked.
    st, body, resp = proxied(daemon, session, ECHO_PORT, f"/stream?n={5 << 20}")
    assert st == 200 and len(body) == 5 << 20 and resp.getheader("Transfer-Encoding") == "chunked"
    # An upload of the same size streams into the sandbox too.
    payload = (b"0123456789abcdef" * 4096) * 640  # 40 MiB
    st, body, _ = proxied(daemon, session, ECHO_PORT, "/up", method="PUT", body=payload, timeout=120)
    assert st == 200 and json.loads(body)["body_sha256"] == hashlib.sha256(payload).hexdigest()
    grew_mb = (_vm_hwm_kb(daemon.proc.pid) - before) / 1024
    assert grew_mb < 16, f"daemon VmHWM grew by {grew_mb:.1f} MiB for a 50 MiB download and a 40 MiB upload"


def test_websocket_echo_through_the_daemon(daemon, session):
    import websockets  # Debian's python3-websockets

    async def talk():
        uri = f"ws://127.0.0.1:{daemon.port}/v1/sessions/{session}/ports/{ECHO_PORT}/ws"
        async with websockets.connect(uri, extra_headers={"Authorization": f"Bearer {daemon.key}"},
                                      max_size=None) as ws:
            await ws.send("hello")
            assert await ws.recv() == "hello"
            big = bytes(range(256)) * 1024  # 256 KiB binary frame
            await ws.send(big)
            assert await ws.recv() == big
            for i in range(50):
                await ws.send(f"m{i}")
            assert [await ws.recv() for _ in range(50)] == [f"m{i}" for i in range(50)]
            pong = await ws.ping()
            await asyncio.wait_for(pong, 10)
    asyncio.run(talk())


def test_nothing_listening_is_502(daemon, session):
    st, body, _ = proxied(daemon, session, 8999, "/")
    err = json.loads(body)
    assert st == 502 and err["error"]["code"] == "bad_gateway" and err["error"]["session_id"] == session, err
    for bad in ("0", "65536", "http"):
        st, body, _ = proxied(daemon, session, bad, "/")
        assert st == 400, (bad, body)


def test_another_tenant_and_no_key_are_refused(daemon, session):
    st, t, _ = daemon.request("POST", "/v1/tenants", {"name": "other-ports"})
    assert st == 201, t
    st, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    assert st == 201, k
    st, body, _ = proxied(daemon, session, STATIC_PORT, "/sub/hello.txt", tcp=True, key=k["key"])
    assert st == 404 and b"hello" not in body, body
    st, body, _ = proxied(daemon, session, STATIC_PORT, "/sub/hello.txt", tcp=True)
    assert st == 401, body
    st, body, _ = proxied(daemon, "s-nope", STATIC_PORT, "/")
    assert st == 404, body


def test_the_sandbox_still_has_only_loopback(daemon, session):
    # After every proxied exchange above: one interface, lo, and no route anywhere.
    st, _, _ = proxied(daemon, session, STATIC_PORT, "/sub/hello.txt")
    assert st == 200
    r = daemon.run(session, "tail -n +3 /proc/net/dev | cut -d: -f1; echo ---; tail -n +2 /proc/net/route | wc -l")
    names, routes = r["stdout"].split("---")
    assert names.split() == ["lo"] and routes.strip() == "0", r
    # And nothing inside reaches the outside: a host listener stays unreachable.
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    try:
        port = host.getsockname()[1]
        r = daemon.run(session, f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"")
        assert r["exit_code"] != 0, r
        host.settimeout(0.5)
        with pytest.raises(socket.timeout):
            host.accept()
    finally:
        host.close()


def test_egress_door_port_is_refused():
    """A session with an egress door: its port (the daemon's own proxy) is no preview."""
    d = Daemon().start()
    try:
        st, s, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "network": {"mode": "allowlist", "allow": ["example.org:443"]}})
        if st != 201:
            pytest.skip(f"no egress door here: {s}")
        st, body, _ = proxied(d, s["id"], 3128, "/")
        assert st == 403, body
        d.delete(s["id"])
    finally:
        d.close()


def test_connection_cap_and_idle_timeout():
    d = Daemon(config={"ports": {"max_connections": 2, "idle_timeout_s": 2}}).start()
    try:
        sid = d.session(template=TEMPLATE)
        put_file(d, sid, "/tmp/servers.py", SERVERS)
        start(d, sid, ["python3", "/tmp/servers.py", str(ECHO_PORT)])
        assert serving(d, sid, ECHO_PORT)
        # Two upgraded sockets held open: the third proxied request is refused 429.
        held = []
        for _ in range(2):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            s.sendall(f"GET /v1/sessions/{sid}/ports/{ECHO_PORT}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\n\r\n".encode())
            s.settimeout(10)
            head = s.recv(4096)
            assert head.startswith(b"HTTP/1.1 101"), head
            held.append(s)
        st, body, resp = proxied(d, sid, ECHO_PORT, "/")
        assert st == 429 and resp.getheader("Retry-After"), body
        # Idle past idle_timeout_s: the daemon ends the tunnel, and the slot is free again.
        for s in held:
            s.settimeout(10)
            end = time.monotonic() + 10
            while time.monotonic() < end and s.recv(4096):
                pass
            s.close()
        assert wait_until(lambda: proxied(d, sid, ECHO_PORT, "/")[0] == 200, timeout=10)
        d.delete(sid)
    finally:
        d.close()
