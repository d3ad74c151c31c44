"""The HTTP edge attacked as a hostile client or hostile sandbox code would: request
smuggling over raw sockets (unix and TCP), NUL bytes meant to truncate a path or a
command, file names that are not UTF-8, a tenant admin key reaching for another tenant,
and terminal control sequences printed by sandbox code to a user's terminal."""
import base64
import io
import json
import os
import pty
import select
import socket
import subprocess
import tarfile
import time
import urllib.parse

import pytest

import ownership
from conftest import CELA
from daemon_util import Daemon

TEMPLATE = "base"


@pytest.fixture(scope="module")
def daemon():
    d = Daemon({"max_sessions": 8}).start()
    yield d
    d.close()


# Function-scoped: every test must end with no sandbox process of its own (conftest).
@pytest.fixture
def sid(daemon):
    s = daemon.session(template=TEMPLATE)
    yield s
    daemon.delete(s)


def strict_json(payload):
    """The answer parsed only if it is valid UTF-8 JSON (json.loads on bytes would guess)."""
    return json.loads(payload.decode("utf-8", errors="strict"))


def b64(data):
    return base64.b64encode(data).decode()


# ---- request smuggling, over raw sockets ----

def connect(daemon, transport):
    if transport == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(daemon.socket)
    else:
        s = socket.create_connection(("127.0.0.1", daemon.port))
    s.settimeout(10)
    return s


def exchange(daemon, transport, data, timeout=10):
    """Sends `data`, reads until the daemon closes; returns (bytes, closed_by_daemon)."""
    s = connect(daemon, transport)
    try:
        s.sendall(data)
        out = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
            if not r:
                break
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return out, True
            if not chunk:
                return out, True
            out += chunk
        return out, False
    finally:
        s.close()


def responses(data):
    """(status, headers, body) of each HTTP response in `data` (bodies by Content-Length)."""
    found = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        n = int(headers.get("content-length", "0"))
        found.append((status, headers, rest[:n]))
        data = rest[n:]
    return found


# The second request rides in what the first one's framing leaves unread: a daemon
# that frames the first differently from a proxy answers it (404) as if it were its own.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
CHUNKED_EMPTY = b"0\r\n\r\n"

FRAMINGS = {
    "identity": b"Transfer-Encoding: identity\r\n",
    "gzip": b"Transfer-Encoding: gzip\r\n",
    "unknown_coding": b"Transfer-Encoding: x-cela-unknown\r\n",
    "empty_coding": b"Transfer-Encoding: \r\n",
    "chunked_then_identity": b"Transfer-Encoding: chunked, identity\r\n",
    "gzip_then_chunked": b"Transfer-Encoding: gzip, chunked\r\n",
    "chunked_twice_in_a_list": b"Transfer-Encoding: chunked, chunked\r\n",
    "repeated_header_gzip_chunked": b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
    "repeated_header_chunked": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "chunked_and_content_length": b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    "content_length_and_chunked": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    "differing_content_lengths": b"Content-Length: 5\r\nContent-Length: 0\r\n",
    "content_length_list": b"Content-Length: 0, 5\r\n",
    "same_content_length_twice": b"Content-Length: 5\r\nContent-Length: 5\r\n",
    "vertical_tab_before_chunked": b"Transfer-Encoding: \x0bchunked\r\n",
    "space_before_colon": b"Transfer-Encoding : chunked\r\n",
}


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("name", sorted(FRAMINGS))
def test_ambiguous_framing_is_400_and_the_connection_closes(daemon, transport, name):
    request = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + FRAMINGS[name] + b"\r\n" + CHUNKED_EMPTY + SMUGGLED)
    t0 = time.monotonic()
    data, closed = exchange(daemon, transport, request)
    assert closed, (name, data)
    assert time.monotonic() - t0 < 5
    answers = responses(data)
    assert len(answers) == 1, (name, [a[0] for a in answers])  # the smuggled request was never read
    status, headers, body = answers[0]
    assert status == 400, (name, status, body)
    assert headers.get("connection", "").lower() == "close"
    err = strict_json(body)["error"]
    assert err["code"] == "invalid_request" and err["category"] == "user" and err["request_id"].startswith("r-")


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_transfer_encoding_on_http_1_0_is_400(daemon, transport):
    request = b"GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + CHUNKED_EMPTY + SMUGGLED
    data, closed = exchange(daemon, transport, request)
    answers = responses(data)
    assert closed and [a[0] for a in answers] == [400], data


@pytest.mark.parametrize("transport", ["unix", "tcp"])
@pytest.mark.parametrize("coding", [b"chunked", b"Chunked", b"\tchunked "])
def test_a_sole_chunked_coding_still_works_with_keep_alive(daemon, transport, coding):
    request = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding + b"\r\n\r\n"
               + b"3\r\nabc\r\n" + CHUNKED_EMPTY + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data, closed = exchange(daemon, transport, request)
    assert [a[0] for a in responses(data)] == [200, 200], data

