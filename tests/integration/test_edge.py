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


# ---- NUL bytes: refused, never truncated ----

def test_nul_in_exec_fields_is_400_and_runs_nothing(daemon, sid):
    marker = "/tmp/nul-marker"
    bodies = [
        {"cmd": f"touch {marker}\u0000; exit 3"},
        {"argv": ["touch", marker + "\u0000x"]},
        {"cmd": f"touch {marker}", "cwd": "/tmp\u0000/no/such/dir"},
        {"cmd": f"touch {marker}", "env": {"K\u0000EY": "v"}},
        {"cmd": f"touch {marker}", "env": {"KEY": "v\u0000w"}},
    ]
    for route in ("execs", "run"):
        for body in bodies:
            status, err, _ = daemon.request("POST", f"/v1/sessions/{sid}/{route}", body)
            assert status == 400 and err["error"]["code"] == "invalid_request", (route, body, err)
    status, _, _ = daemon.request("HEAD", f"/v1/sessions/{sid}/files?path={marker}")
    assert status == 404  # nothing ran, truncated or not


def test_nul_in_session_create_fields_is_400(daemon):
    for body in ({"template": TEMPLATE + "\u0000x"}, {"template": TEMPLATE, "env": {"A\u0000B": "1"}},
                 {"template": TEMPLATE, "env": {"A": "1\u00002"}}):
        status, err, _ = daemon.request("POST", "/v1/sessions", body)
        assert status == 400 and err["error"]["code"] == "invalid_request", (body, err)


def test_nul_in_file_paths_is_400(daemon, sid):
    daemon.run(sid, "echo secret > /tmp/real")
    nul = urllib.parse.quote("/tmp/real\x00.txt")
    nul_b64 = urllib.parse.quote(b64(b"/tmp/real\x00.txt"))
    for method, target, body in [
        ("PUT", f"files?path={nul}", b"x"), ("GET", f"files?path={nul}", None),
        ("DELETE", f"files?path={nul}", None), ("GET", f"fs?path={nul}", None),
        ("GET", f"archive?path={urllib.parse.quote('/tmp' + chr(0))}", None),
        ("GET", f"files?path_b64={nul_b64}", None), ("PUT", f"files?path_b64={nul_b64}", b"x"),
        ("POST", "fs/mkdir", {"path": "/tmp/d\u0000x"}), ("POST", "fs/mkdir", {"path_b64": b64(b"/tmp/d\x00x")}),
        ("POST", "fs/move", {"from": "/tmp/real\u0000.txt", "to": "/tmp/moved"}),
        ("POST", "fs/move", {"from": "/tmp/real", "to": "/tmp/moved\u0000x"}),
    ]:
        status, err, _ = daemon.request(method, f"/v1/sessions/{sid}/{target}", body)
        assert status == 400 and err["error"]["code"] == "invalid_request", (method, target, err)
    status, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path=/tmp/real", raw=True)
    assert (status, data) == (200, b"secret\n")  # not moved, not deleted, not overwritten


def test_nul_in_a_tenant_name_is_400(daemon):
    status, err, _ = daemon.request("POST", "/v1/tenants", {"name": "acme\u0000evil"})
    assert status == 400 and err["error"]["code"] == "invalid_request", err


# ---- names that are not UTF-8 ----

BAD = b"a\xffb\xc3"  # a lone 0xff and a cut-off two-byte character
BAD_DIR = "/home/user/names"


@pytest.fixture
def bad_names(daemon, sid):
    """A directory made by sandbox code holding a file, a directory and a symlink whose
    names (and the link's target) are not UTF-8."""
    daemon.run(sid, f"mkdir -p {BAD_DIR} && cd {BAD_DIR} && printf 'content' > \"$(printf 'a\\377b\\303')\" && "
                    "mkdir \"$(printf 'd\\376')\" && ln -s \"$(printf 't\\375')\" link && echo plain > plain")
    return BAD_DIR


def test_listing_non_utf8_names_is_valid_utf8_with_b64_siblings(daemon, sid, bad_names):
    status, payload, _ = daemon.request("GET", f"/v1/sessions/{sid}/fs?path={bad_names}", raw=True)
    assert status == 200, payload
    listing = strict_json(payload)
    by_name = {}
    for e in listing["entries"]:
        exact = base64.b64decode(e["name_b64"]) if "name_b64" in e else e["name"].encode()
        by_name[exact] = e
    assert set(by_name) == {BAD, b"d\xfe", b"link", b"plain"}, by_name
    f = by_name[BAD]
    assert f["type"] == "file" and f["size"] == 7
    assert base64.b64decode(f["path_b64"]) == BAD_DIR.encode() + b"/" + BAD
    assert "\ufffd" in f["name"]  # the display form
    assert base64.b64decode(by_name[b"d\xfe"]["path_b64"]) == BAD_DIR.encode() + b"/d\xfe"
    link = by_name[b"link"]
    assert link["type"] == "symlink" and base64.b64decode(link["symlink_target_b64"]) == b"t\xfd"
    plain = by_name[b"plain"]  # UTF-8 names carry no sibling
    assert "name_b64" not in plain and "path_b64" not in plain and plain["symlink_target"] is None


def test_non_utf8_path_round_trips_through_path_b64(daemon, sid, bad_names):
    exact = BAD_DIR.encode() + b"/" + BAD
    q = urllib.parse.quote(b64(exact))
    status, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path_b64={q}", raw=True)
    assert (status, data) == (200, b"content")
    status, _, resp = daemon.request("HEAD", f"/v1/sessions/{sid}/files?path_b64={q}", raw=True)
    assert status == 200 and resp.getheader("X-Cela-Size") == "7"
    # The percent-encoded bytes name the same file.
    status, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path={urllib.parse.quote(exact)}", raw=True)
    assert (status, data) == (200, b"content")
    # Writing under a new non-UTF-8 name: the answer is UTF-8 and names the exact bytes.
    new = BAD_DIR.encode() + b"/new\xfa"
    status, payload, _ = daemon.request("PUT", f"/v1/sessions/{sid}/files?path_b64={urllib.parse.quote(b64(new))}",
                                        b"fresh", raw=True)
    assert status == 201, payload
    assert base64.b64decode(strict_json(payload)["path_b64"]) == new
    r = daemon.run(sid, f"cat {BAD_DIR}/\"$(printf 'new\\372')\"")
    assert r["stdout"] == "fresh"
    # mkdir and move take the same form in their bodies.
    status, payload, _ = daemon.request("POST", f"/v1/sessions/{sid}/fs/mkdir",
                                        {"path_b64": b64(BAD_DIR.encode() + b"/m\xf9")}, raw=True)
    assert status == 201 and base64.b64decode(strict_json(payload)["path_b64"]).endswith(b"/m\xf9"), payload
    status, payload, _ = daemon.request("POST", f"/v1/sessions/{sid}/fs/move",
                                        {"from_b64": b64(new), "to_b64": b64(new + b"\xf8")}, raw=True)
    assert status == 200, payload
    moved = strict_json(payload)
    assert base64.b64decode(moved["from_b64"]) == new and base64.b64decode(moved["to_b64"]) == new + b"\xf8"
    for bad in ({"path": "/tmp/x", "path_b64": b64(b"/tmp/x")}, {"path_b64": "not base64!"}):
        status, err, _ = daemon.request("POST", f"/v1/sessions/{sid}/fs/mkdir", bad)
        assert status == 400, err
    status, err, _ = daemon.request("GET", f"/v1/sessions/{sid}/files?path=/tmp/x&path_b64={b64(b'/tmp/x')}")
    assert status == 400, err


def test_errors_about_non_utf8_paths_are_valid_utf8(daemon, sid):
    for target in ("files?path=" + urllib.parse.quote(b"/nope/\xff\xfe"),
                   "fs?path=" + urllib.parse.quote(b"/nope\xff"),
                   "files?path_b64=" + urllib.parse.quote(b64(b"/nope/\x80"))):
        status, payload, _ = daemon.request("GET", f"/v1/sessions/{sid}/{target}", raw=True)
        assert status == 404, payload
        assert strict_json(payload)["error"]["code"] == "not_found"
    # An id that is not UTF-8 is echoed in the error's session_id.
    status, payload, _ = daemon.request("GET", "/v1/sessions/s-%FF%FE", raw=True)
    assert status == 404 and strict_json(payload)["error"]["session_id"] in (None, "s-\ufffd\ufffd"), payload


def test_tar_export_keeps_non_utf8_names_exact(daemon, sid, bad_names):
    status, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/archive?path={bad_names}", raw=True)
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as t:
        names = {m.name.encode("utf-8", "surrogateescape").lstrip(b"./") for m in t.getmembers()}
        member = next(m for m in t.getmembers() if m.name.encode("utf-8", "surrogateescape").endswith(BAD))
        assert t.extractfile(member).read() == b"content"
    assert {BAD, b"d\xfe", b"link", b"plain"} <= names, names


# ---- tenants: only a host admin key acts across tenants ----

@pytest.fixture
def tenants(daemon):
    """Tenants A and B (made by the host admin key), with their keys and one session of B's."""
    host = daemon.key

    def call(method, path, body=None, key=host):
        return daemon.request(method, path, body, tcp=True, key=key)

    out = {"call": call, "host": host}
    for name in ("A", "B"):
        status, t, _ = call("POST", "/v1/tenants", {"name": f"edge-{name}-{os.urandom(4).hex()}"})
        assert status == 201, t
        out[name] = t["id"]
        for role, body in (("admin", {"admin": True}), ("user", {})):
            status, k, _ = call("POST", f"/v1/tenants/{t['id']}/keys", body)
            assert status == 201 and k["admin"] == (role == "admin") and not k.get("host_admin"), k
            out[f"{name}_{role}"] = k["key"]
    status, s, _ = call("POST", "/v1/sessions", {"template": TEMPLATE, "limits": {"memory_mb": 256}},
                        key=out["B_user"])
    assert status == 201, s
    out["B_session"] = s["id"]
    yield out
    call("DELETE", f"/v1/sessions/{s['id']}", key=out["B_user"])


def test_tenant_admin_cannot_create_tenants(tenants):
    call = tenants["call"]
    status, err, _ = call("POST", "/v1/tenants", {"name": "edge-by-A"}, key=tenants["A_admin"])
    assert status == 403 and err["error"]["code"] == "forbidden", err
    assert call("POST", "/v1/tenants", {"name": "edge-by-A-user"}, key=tenants["A_user"])[0] == 403


def test_tenant_admin_cannot_mint_keys_for_another_tenant(tenants):
    call, a_admin = tenants["call"], tenants["A_admin"]
    for body in ({}, {"admin": True}, {"host_admin": True}):
        status, err, _ = call("POST", f"/v1/tenants/{tenants['B']}/keys", body, key=a_admin)
        assert status == 404 and err["error"]["code"] == "not_found", (body, err)
    # Its own tenant: yes, but never a host admin key.
    status, k, _ = call("POST", f"/v1/tenants/{tenants['A']}/keys", {"admin": True}, key=a_admin)
    assert status == 201 and k["tenant_id"] == tenants["A"] and k["host_admin"] is False, k
    status, err, _ = call("POST", f"/v1/tenants/{tenants['A']}/keys", {"host_admin": True}, key=a_admin)
    assert status == 403 and err["error"]["code"] == "forbidden", err
    # A minted key of A's is A's: it cannot create tenants either.
    assert call("POST", "/v1/tenants", {"name": "edge-by-A2"}, key=k["key"])[0] == 403
    # A non-admin key manages nothing, not even its own tenant.
    assert call("POST", f"/v1/tenants/{tenants['A']}/keys", {}, key=tenants["A_user"])[0] == 403


def test_tenant_admin_lists_and_reads_only_its_own_tenant(tenants):
    call, a_admin = tenants["call"], tenants["A_admin"]
    status, listing, _ = call("GET", "/v1/tenants", key=a_admin)
    assert status == 200 and [t["id"] for t in listing["tenants"]] == [tenants["A"]], listing
    assert call("GET", f"/v1/tenants/{tenants['A']}", key=a_admin)[0] == 200
    status, err, _ = call("GET", f"/v1/tenants/{tenants['B']}", key=a_admin)
    assert status == 404 and err["error"]["code"] == "not_found"
    assert call("GET", "/v1/tenants", key=tenants["A_user"])[0] == 403
    # The host admin key sees every tenant.
    status, listing, _ = call("GET", "/v1/tenants")
    assert {tenants["A"], tenants["B"]} <= {t["id"] for t in listing["tenants"]}
    assert call("GET", f"/v1/tenants/{tenants['B']}")[0] == 200


def test_tenant_admin_cannot_reach_another_tenants_sessions(tenants):
    call, a_admin, sid = tenants["call"], tenants["A_admin"], tenants["B_session"]
    for method, path, body in [
        ("GET", f"/v1/sessions/{sid}", None), ("PATCH", f"/v1/sessions/{sid}", {"ttl_s": 60}),
        ("POST", f"/v1/sessions/{sid}/execs", {"cmd": "true"}), ("POST", f"/v1/sessions/{sid}/run", {"cmd": "true"}),
        ("GET", f"/v1/sessions/{sid}/files?path=/etc/hostname", None),
        ("PUT", f"/v1/sessions/{sid}/files?path=/tmp/x", "x"), ("GET", f"/v1/sessions/{sid}/fs?path=/", None),
        ("GET", f"/v1/sessions/{sid}/archive?path=/tmp", None), ("DELETE", f"/v1/sessions/{sid}", None),
    ]:
        status, err, _ = call(method, path, body, key=a_admin)
        assert status == 404 and err["error"]["code"] == "not_found", (method, path, err)
    status, listing, _ = call("GET", "/v1/sessions", key=a_admin)
    assert sid not in [s["id"] for s in listing["sessions"]]
    # No field puts a session into another tenant.
    status, err, _ = call("POST", "/v1/sessions", {"template": TEMPLATE, "tenant": tenants["B"]}, key=a_admin)
    assert status == 400, err
    # Still alive for its owner.
    status, s, _ = call("GET", f"/v1/sessions/{sid}", key=tenants["B_user"])
    assert status == 200 and s["state"] == "ready"


def test_host_admin_key_acts_across_tenants_and_can_mint_host_keys(tenants):
    call = tenants["call"]
    status, k, _ = call("POST", f"/v1/tenants/{tenants['B']}/keys", {"admin": True})
    assert status == 201 and k["tenant_id"] == tenants["B"], k
    status, hk, _ = call("POST", f"/v1/tenants/{tenants['A']}/keys", {"host_admin": True})
    assert status == 201 and hk["admin"] is True and hk["host_admin"] is True, hk
    status, t, _ = call("POST", "/v1/tenants", {"name": "edge-by-new-host-key"}, key=hk["key"])
    assert status == 201, t


# ---- the CLI: sandbox output cannot drive the user's terminal ----

# OSC 0 (window title), OSC 52 (clipboard), CSI (colour, clear screen), a C1 CSI as UTF-8,
# a lone 0x9b byte, BEL: everything a terminal acts on.
EVIL = "printf 'A\\033]0;pwned\\007B\\033]52;c;cHduZWQ=\\007C\\033[31mD\\033[2JE\\302\\233F\\233G\\tH\\r\\n'"
EVIL_RAW = b"A\x1b]0;pwned\x07B\x1b]52;c;cHduZWQ=\x07C\x1b[31mD\x1b[2JE\xc2\x9bF\x9bG\tH\r\n"
EVIL_SHOWN = b"A\\x1b]0;pwned\\x07B\\x1b]52;c;cHduZWQ=\\x07C\\x1b[31mD\\x1b[2JE\\u009bF\\x9bG\tH\r\n"


def on_pty(args, timeout=120):
    """Runs `args` with stdout and stderr on a pseudo-terminal; returns (exit code, bytes)."""
    master, slave = pty.openpty()
    attrs = __import__("termios").tcgetattr(slave)
    attrs[1] &= ~__import__("termios").ONLCR  # see the bytes as written, no \n -> \r\n
    __import__("termios").tcsetattr(slave, __import__("termios").TCSANOW, attrs)
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    ownership.register_process(p.pid)
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        return p.wait(30), out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def cli_variants(daemon, sid):
    url = f"unix://{daemon.socket}"
    status, e, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": EVIL + "; " + EVIL + " >&2"})
    assert status == 202, e
    for _ in range(100):
        if daemon.request("GET", f"/v1/sessions/{sid}/execs/{e['id']}")[1]["state"] != "running":
            break
        time.sleep(0.1)
    return {
        "run": [CELA, "run", "--template", TEMPLATE, "--", "sh", "-c", EVIL + "; " + EVIL + " >&2"],
        "exec": [CELA, "exec", "--url", url, sid, "--", "sh", "-c", EVIL + "; " + EVIL + " >&2"],
        "logs": [CELA, "logs", "--url", url, sid, e["id"]],
        "logs_follow": [CELA, "logs", "--url", url, "--follow", sid, e["id"]],
    }


@pytest.mark.parametrize("command", ["run", "exec", "logs", "logs_follow"])
def test_cli_escapes_control_sequences_on_a_terminal_and_raw_keeps_them(daemon, sid, command):
    args = cli_variants(daemon, sid)[command]
    code, shown = on_pty(args)
    assert code == 0, shown
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\x9b" not in shown, shown
    assert shown == EVIL_SHOWN * 2, shown  # stdout and stderr, each escaped
    code, raw = on_pty(args[:2] + ["--raw"] + args[2:])
    assert code == 0 and raw == EVIL_RAW * 2, raw
    # A pipe gets the exact bytes, with no flag.
    p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (0, EVIL_RAW, EVIL_RAW), p


def test_cli_escaping_keeps_utf8_text_whole_across_reads(daemon, sid):
    # Multibyte characters written one byte at a time still arrive as themselves.
    script = "for b in '\\303' '\\251' '\\342' '\\202' '\\254'; do printf \"$b\"; sleep 0.05; done; printf '\\n'"
    code, shown = on_pty([CELA, "exec", "--url", f"unix://{daemon.socket}", sid, "--", "sh", "-c", script])
    assert code == 0 and shown == "é€\n".encode(), shown
