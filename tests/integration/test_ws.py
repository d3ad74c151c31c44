"""GET /v1/sessions/{id}/ws (API.md "WebSocket") against a real daemon, with a real
WebSocket client (Debian's python3-websockets): every client message type, several
execs on one socket, a connection killed mid-stream and re-attached by exec id and
offset without loss or duplication, auth refusals, malformed and binary frames, a
client that never reads (cut off while the daemon's memory stays bounded), and the
ping/pong keepalive (a raw socket that stops answering pings is closed)."""
import asyncio
import base64
import hashlib
import json
import os
import select
import socket
import struct
import time

import pytest

websockets = pytest.importorskip("websockets")

from conftest import wait_until
from daemon_util import Daemon

PING_S = 1
QUEUE_BYTES = 1 << 20


@pytest.fixture(scope="module")
def daemon():
    # The output cap is above the flood below, so that all of it reaches the socket live:
    # only the socket's bound keeps it out of the daemon's memory.
    d = Daemon(config={"connections": {"ws_ping_s": PING_S, "ws_queue_bytes": QUEUE_BYTES},
                       "output_cap_bytes": 256 << 20}).start()
    try:
        yield d
    finally:
        d.close()


@pytest.fixture
def sid(daemon):
    s = daemon.session()
    yield s
    daemon.delete(s)


def url(daemon, sid):
    return f"ws://127.0.0.1:{daemon.port}/v1/sessions/{sid}/ws"


def b64(data):
    return base64.b64encode(data).decode()


class Socket:
    """One WebSocket: messages in, frames out, the events of each exec collected."""

    def __init__(self, ws):
        self.ws = ws
        self.out = {}  # exec id -> bytes seen on stdout
        self.err = {}
        self.offsets = {}  # exec id -> last offset
        self.exits = {}

    async def send(self, **message):
        await self.ws.send(json.dumps(message))

    async def next(self, timeout=20):
        m = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        if m["type"] in ("stdout", "stderr"):
            store = self.out if m["type"] == "stdout" else self.err
            store[m["exec"]] = store.get(m["exec"], b"") + base64.b64decode(m["data"])
            self.offsets[m["exec"]] = m["offset"]
        elif m["type"] == "exit":
            self.exits[m["exec"]] = m["record"]
        return m

    async def until(self, pred, timeout=30):
        end = time.monotonic() + timeout
        while True:
            m = await self.next(max(0.1, end - time.monotonic()))
            if pred(m):
                return m

    async def start(self, ref, **body):
        await self.send(type="exec", ref=ref, **body)
        m = await self.until(lambda m: m["type"] in ("started", "error") and m.get("ref") == ref)
        assert m["type"] == "started", m
        return m["exec"]


def connect(daemon, sid, key=None, **kw):
    key = daemon.key if key is None else key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return websockets.connect(url(daemon, sid), extra_headers=headers, ping_interval=None,
                              max_size=None, **kw)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_every_client_message_type(daemon, sid):
    async def go():
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            # exec + stdin + close_stdin: cat echoes what it is given, then ends.
            await s.send(type="exec", ref="cat", cmd="cat", stdin_open=True)
            started = await s.until(lambda m: m["type"] == "started")
            assert started["ref"] == "cat" and started["exec"].startswith("e-") and started["pid"] > 0
            cat = started["exec"]
            await s.send(type="stdin", exec=cat, data=b64(b"hello\n"))
            await s.until(lambda m: s.out.get(cat) == b"hello\n")
            assert s.offsets[cat] == "6,0"
            # resize: this is a pipe exec, not a terminal.
            await s.send(type="resize", exec=cat, cols=100, rows=40)
            m = await s.until(lambda m: m["type"] == "error")
            assert m["exec"] == cat and m["error"]["code"] == "conflict", m
            assert "tty" in m["error"]["message"], m
            await s.send(type="close_stdin", exec=cat)
            m = await s.until(lambda m: m["type"] == "exit" and m["exec"] == cat)
            assert m["record"]["exit_code"] == 0 and m["record"]["state"] == "exited", m
            # The exit record is the REST one.
            status, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{cat}")
            assert status == 200 and rec == m["record"]
            # kill, with a signal and without.
            sleeper = await s.start("sleep", argv=["sleep", "60"])
            await s.send(type="kill", exec=sleeper, signal="SIGINT")
            m = await s.until(lambda m: m["type"] == "exit" and m["exec"] == sleeper)
            assert m["record"]["signal"] == 2, m
            sleeper = await s.start("sleep2", argv=["sleep", "60"])
            await s.send(type="kill", exec=sleeper)
            m = await s.until(lambda m: m["type"] == "exit" and m["exec"] == sleeper)
            assert m["record"]["state"] == "killed" or m["record"]["signal"] == 15, m
            # attach: an ended exec, from the start and from a position.
            s.out.pop(cat)
            await s.send(type="attach", exec=cat, offset="0,0")
            await s.until(lambda m: m["type"] == "exit" and m["exec"] == cat)
            assert s.out[cat] == b"hello\n"
            s.out.pop(cat)
            await s.send(type="attach", exec=cat, offset="3,0")
            await s.until(lambda m: m["type"] == "exit" and m["exec"] == cat)
            assert s.out[cat] == b"lo\n"
            # stderr comes as its own stream with its own offset.
            err = await s.start("err", cmd="printf oops >&2")
            await s.until(lambda m: m["type"] == "exit" and m["exec"] == err)
            assert s.err[err] == b"oops" and s.offsets[err] == "0,4" and err not in s.out
    run(go())


def test_refusals_are_error_messages_naming_the_request(daemon, sid):
    async def go():
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            cases = [
                ("not json", {}),
                (json.dumps({"exec": "e-1"}), {"exec": "e-1"}),  # no type
                (json.dumps({"type": "frobnicate", "exec": "e-1"}), {"exec": "e-1"}),
                (json.dumps({"type": "exec", "ref": "r1", "cmd": "true", "bogus": 1}), {"ref": "r1"}),
                (json.dumps({"type": "exec", "ref": "r2"}), {"ref": "r2"}),  # neither argv nor cmd
                (json.dumps({"type": "stdin", "exec": "e-2", "data": "!!"}), {"exec": "e-2"}),
                (json.dumps({"type": "attach", "exec": "e-3", "offset": "12"}), {"exec": "e-3"}),
                (json.dumps({"type": "resize", "exec": "e-4", "cols": 0, "rows": 10}), {"exec": "e-4"}),
                (json.dumps({"type": "kill", "exec": "e-5", "signal": "SIGBOGUS"}), {"exec": "e-5"}),
                (json.dumps({"type": "close_stdin"}), {}),  # no exec
            ]
            for text, ids in cases:
                await ws.send(text)
                m = await s.next()
                assert m["type"] == "error" and m["error"]["code"] == "invalid_request", (text, m)
                for k, v in ids.items():
                    assert m[k] == v, (text, m)
                assert m["error"]["session_id"] == sid and m["error"]["request_id"].startswith("r-")
            # Calls on an exec that does not exist: not_found, naming it.
            for t in ("stdin", "close_stdin", "kill", "attach"):
                extra = {"data": b64(b"x")} if t == "stdin" else {}
                await s.send(type=t, exec="e-0000000000000000", **extra)
                m = await s.next()
                assert m["type"] == "error" and m["error"]["code"] == "not_found", (t, m)
                assert m["exec"] == "e-0000000000000000"
            # The socket still works after all of that.
            e = await s.start("ok", cmd="echo fine")
            await s.until(lambda m: m["type"] == "exit" and m["exec"] == e)
            assert s.out[e] == b"fine\n"
    run(go())


def test_two_execs_at_once_on_one_socket(daemon, sid):
    async def go():
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            await s.send(type="exec", ref="a", cmd="for i in 1 2 3 4 5; do echo a$i; sleep 0.2; done")
            await s.send(type="exec", ref="b", cmd="for i in 1 2 3 4 5; do echo b$i; sleep 0.2; done")
            ids, order = {}, []
            while len(s.exits) < 2:
                m = await s.next()
                if m["type"] == "started":
                    ids[m["ref"]] = m["exec"]
                order.append((m["type"], m.get("exec")))
            a, b = ids["a"], ids["b"]
            assert s.out[a] == b"".join(b"a%d\n" % i for i in range(1, 6))
            assert s.out[b] == b"".join(b"b%d\n" % i for i in range(1, 6))
            # They ran at once: output of each arrived before the other's exit.
            first_exit = next(i for i, (t, _) in enumerate(order) if t == "exit")
            seen_before = {e for t, e in order[:first_exit] if t == "stdout"}
            assert seen_before == {a, b}, order
    run(go())


def test_reattach_after_the_connection_dies_loses_and_repeats_nothing(daemon, sid):
    expected = b"".join(b"%d\n" % i for i in range(1, 40001))
    async def go():
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            e = await s.start("big", cmd="seq 1 20000; sleep 1; seq 20001 40000")
            await s.until(lambda m: m["type"] == "stdout" and len(s.out.get(e, b"")) > 1000)
            got, offset = s.out[e], s.offsets[e]
            # Kill the TCP connection under the client: no close handshake.
            ws.transport.abort()
        assert expected.startswith(got) and len(got) < len(expected)
        assert offset == f"{len(got)},0"
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            await s.send(type="attach", exec=e, offset=offset)
            m = await s.until(lambda m: m["type"] == "exit" and m["exec"] == e)
            assert m["record"]["exit_code"] == 0
            assert got + s.out[e] == expected
            assert s.offsets[e] == f"{len(expected)},0"
    run(go())


def test_auth_as_for_rest(daemon, sid):
    async def refused(key, status):
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            async with connect(daemon, sid, key=key):
                pass
        assert e.value.status_code == status

    async def go():
        await refused("", 401)
        await refused("cela_nope_" + "0" * 40, 401)
        st, t, _ = daemon.request("POST", "/v1/tenants", {"name": f"ws-other-{time.monotonic_ns()}"})
        assert st == 201
        st, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
        assert st == 201
        # Another tenant's session does not exist for it: 404 before any upgrade.
        await refused(k["key"], 404)
        # Local root on the unix socket needs no key.
        async with websockets.unix_connect(daemon.socket, f"ws://localhost/v1/sessions/{sid}/ws",
                                           ping_interval=None) as ws:
            s = Socket(ws)
            e = await s.start("unix", cmd="echo over-unix")
            await s.until(lambda m: m["type"] == "exit")
            assert s.out[e] == b"over-unix\n"
    run(go())
    # A plain GET (no upgrade) is a JSON 400.
    status, body, _ = daemon.request("GET", f"/v1/sessions/{sid}/ws")
    assert status == 400 and body["error"]["code"] == "invalid_request"
    status, body, _ = daemon.request("GET", "/v1/sessions/s-0000000000000000/ws")
    assert status == 404 and body["error"]["code"] == "not_found"


def test_binary_and_oversize_messages_close_with_policy_codes(daemon, sid):
    async def go():
        async with connect(daemon, sid) as ws:
            await ws.send(b'{"type": "exec", "cmd": "true"}')
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 1008, (ws.close_code, ws.close_reason)
        async with connect(daemon, sid) as ws:
            # The close may come while the client is still sending it.
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                await ws.send(json.dumps({"type": "stdin", "exec": "e-1", "data": "A" * (2 << 20)}))
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == 1009, (ws.close_code, ws.close_reason)
    run(go())


# ---- raw sockets: a client that never reads, one that never answers pings

def raw_connect(daemon, sid, rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", daemon.port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /v1/sessions/{sid}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Authorization: Bearer {daemon.key}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert b"Sec-WebSocket-Accept: " + accept in head
    return s


def client_frame(opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(s):
    def exact(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError
            b += c
        return b
    b0, b1 = exact(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", exact(8))[0]
    return b0 & 0x0F, exact(n)


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_never_reads_is_cut_off_and_memory_stays_bounded(daemon, sid):
    pid = daemon.proc.pid
    before = vm_rss_kb(pid)
    s = raw_connect(daemon, sid, rcvbuf=4096)
    try:
        total = 200 * 1000 * 1000
        s.sendall(client_frame(1, json.dumps({"type": "exec", "ref": "flood",
                                              "cmd": f"head -c {total} /dev/zero"}).encode()))
        opcode, payload = read_frame(s)
        started = json.loads(payload)
        assert started["type"] == "started", started
        e = started["exec"]
        peak = before

        def ended():
            nonlocal peak
            peak = max(peak, vm_rss_kb(pid))
            st, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{e}")
            return rec["state"] != "running"
        # The exec is not held back by the client that does not read: it runs to its end.
        assert wait_until(ended, 60, 0.1)
        st, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{e}")
        assert rec["exit_code"] == 0 and rec["stdout_bytes"] == total, rec
        # The daemon's memory did not take the output: far less than 200 MB more.
        assert peak - before < 64 * 1024, (before, peak)
        # ...because it cut the client off: draining what the kernel holds ends in EOF.
        s.settimeout(10)
        got, closed = 0, False
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                c = s.recv(1 << 20)
            except ConnectionResetError:
                closed = True
                break
            if not c:
                closed = True
                break
            got += len(c)
        assert closed and got < 40 * 1000 * 1000, got
        assert "more than %d bytes waited for it" % QUEUE_BYTES in daemon.logs()
    finally:
        s.close()

    # The exec's output can be re-attached on a new socket (here its last MB).
    async def go():
        async with connect(daemon, sid) as ws:
            sock = Socket(ws)
            tail = 1000 * 1000
            await sock.send(type="attach", exec=e, offset=f"{total - tail},0")
            await sock.until(lambda m: m["type"] == "exit" and m["exec"] == e, 60)
            assert sock.out[e] == bytes(tail) and sock.offsets[e] == f"{total},0"
    run(go())


def test_ping_pong_keepalive(daemon, sid):
    # A client that answers pings (websockets does, in the background) stays connected
    # well past the point where a silent one is cut off.
    async def go():
        async with connect(daemon, sid) as ws:
            await asyncio.sleep(PING_S * 4)
            s = Socket(ws)
            e = await s.start("alive", cmd="echo alive")
            await s.until(lambda m: m["type"] == "exit")
            assert s.out[e] == b"alive\n"
    run(go())

    # A raw client sees the server's pings; once it stops answering it is closed.
    s = raw_connect(daemon, sid)
    try:
        s.settimeout(PING_S * 3)
        opcode, payload = read_frame(s)
        assert opcode == 0x9, opcode  # ping
        s.sendall(client_frame(0xA, payload))  # pong
        opcode, payload = read_frame(s)
        assert opcode == 0x9, opcode  # the next ping, a ping interval later
        t0 = time.monotonic()
        # No pong now: the server gives up within about two intervals.
        s.settimeout(PING_S * 5)
        closed = False
        try:
            while True:
                opcode, _ = read_frame(s)
                if opcode == 0x8:
                    closed = True
                    break
        except (EOFError, ConnectionResetError):
            closed = True
        assert closed and time.monotonic() - t0 < PING_S * 4
    finally:
        s.close()


def test_a_socket_holds_a_key_slot_and_the_daemon_stops_with_sockets_open():
    """A WebSocket is a request in flight for its key's per_key limit until it closes;
    a daemon stopping with sockets open closes them and exits cleanly."""
    d = Daemon(config={"connections": {"per_key": 2}}).start()
    try:
        sid = d.session()

        async def go():
            a = await connect(d, sid)
            b = await connect(d, sid)
            # Both of the key's slots are held by the sockets: a third request waits for none.
            st, body, _ = d.request("GET", f"/v1/sessions/{sid}", tcp=True, key=d.key)
            assert st == 429 and body["error"]["code"] == "rate_limited", body
            with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
                await connect(d, sid)
            assert e.value.status_code == 429
            await a.close()
            assert wait_until(lambda: d.request("GET", f"/v1/sessions/{sid}", tcp=True, key=d.key)[0] == 200, 5)
            # The other socket runs an exec while the daemon stops.
            s = Socket(b)
            await s.start("long", argv=["sleep", "60"])
            t0 = time.monotonic()
            d.stop()
            assert d.proc.returncode == 0, d.logs()
            with pytest.raises(websockets.exceptions.ConnectionClosed):
                while True:
                    await s.next(10)
            assert time.monotonic() - t0 < 20
        run(go())
    finally:
        d.close()


def test_resize_of_a_tty_exec_over_the_socket(daemon, sid):
    """A terminal exec driven entirely over the socket: its size, a resize (the
    process sees SIGWINCH and the new size), keystrokes, one output stream."""
    script = ("trap 'echo winch' WINCH; stty size; echo ready; "
              "until read line; do :; done; stty size; echo got:$line")  # a trapped signal ends a read

    async def go():
        async with connect(daemon, sid) as ws:
            s = Socket(ws)
            eid = await s.start("tty", cmd=script, tty=True, cols=80, rows=24, stdin_open=True)
            await s.until(lambda m: b"ready" in s.out.get(eid, b""))
            assert b"24 80" in s.out[eid], s.out[eid]
            await s.send(type="resize", exec=eid, cols=132, rows=43)
            await s.until(lambda m: b"winch" in s.out.get(eid, b""))
            await s.send(type="stdin", exec=eid, data=b64(b"hi\r"))
            m = await s.until(lambda m: m["type"] == "exit" and m["exec"] == eid)
            assert m["record"]["exit_code"] == 0, m
            text = s.out[eid].decode(errors="replace")
            assert "43 132" in text and "got:hi" in text, text
            assert s.err.get(eid, b"") == b"", "a terminal exec has one stream"
    run(go())
