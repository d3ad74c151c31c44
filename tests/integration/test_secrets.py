"""Tenant secrets and session grants (API.md "Secrets", SECURITY.md "Secrets"), from a
real HTTP client: the value never comes back from the API, it is sealed at rest, env and
file grants are visible inside (0400, the sandbox user's), gone after their TTL and after
teardown, and every form of the value printed inside is redacted from the live SSE
stream, the stored output and the exec record, also when written one byte at a time."""
import base64
import binascii
import json
import os
import socket
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import wait_until
from daemon_util import Daemon, UnixConnection

# A value with bytes that URL-encoding changes, long enough for every base64 alignment.
SECRET = "tok-9f8e7d6c5b4a/x+y=z_0123456789"
TEMPLATE = "base"


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


def put_secret(d, name, value=SECRET, **extra):
    st, body, _ = d.request("PUT", f"/v1/secrets/{name}", {"value": value, **extra})
    assert st == 201, body
    return body


def session(d, grants, **extra):
    return d.session(template=TEMPLATE, secrets=grants, **extra)


def run(d, sid, cmd, **extra):
    return d.run(sid, cmd, **extra)


def forms(value):
    b = value.encode()
    return {
        "raw": b,
        "base64": base64.b64encode(b),
        "base64_nl": base64.b64encode(b + b"\n").rstrip(b"="),
        "hex": binascii.hexlify(b),
        "url": urllib.parse.quote(value, safe="").encode(),
    }


def assert_clean(data, value=SECRET):
    if isinstance(data, str):
        data = data.encode()
    for kind, f in forms(value).items():
        # The run of base64 that depends only on the value: its first 40 characters.
        needle = f[:40] if kind.startswith("base64") else f
        assert needle not in data, (kind, data[:400])


def sse_events(d, sid, eid, timeout=60):
    """Follows …/output?follow=1 to the exit event: [(event, data)]."""
    conn = UnixConnection(d.socket, timeout=timeout)
    conn.request("GET", f"/v1/sessions/{sid}/execs/{eid}/output?follow=1")
    resp = conn.getresponse()
    assert resp.status == 200
    events, event, data = [], None, []
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif line == "" and event:
            events.append((event, "\n".join(data)))
            if event == "exit":
                break
            event, data = None, []
    conn.close()
    return events


def test_store_never_answers_values_and_seals_them(daemon):
    info = put_secret(daemon, "GH_TOKEN", ttl_s=3600)
    assert info["name"] == "GH_TOKEN" and info["set_by"] == "local-root" and "value" not in info
    assert info["expires_at"]
    st, listed, _ = daemon.request("GET", "/v1/secrets")
    assert st == 200 and [s["name"] for s in listed["secrets"]] == ["GH_TOKEN"]
    assert SECRET not in json.dumps(listed)
    key = Path(daemon.state) / "secrets.key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
    # Another tenant does not see it and cannot grant it.
    st, t, _ = daemon.request("POST", "/v1/tenants", {"name": "other-secrets"})
    assert st == 201, t
    st, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    assert st == 201, k
    st, other, _ = daemon.request("GET", "/v1/secrets", tcp=True, key=k["key"])
    assert st == 200 and other["secrets"] == []
    st, err, _ = daemon.request("POST", "/v1/sessions", {"template": TEMPLATE, "secrets": [{"name": "GH_TOKEN"}]},
                                tcp=True, key=k["key"])
    assert st == 404 and err["error"]["code"] == "not_found", err
    # Bad input.
    st, err, _ = daemon.request("PUT", "/v1/secrets/bad%20name", {"value": SECRET})
    assert st == 400, err
    st, err, _ = daemon.request("PUT", "/v1/secrets/SHORT", {"value": "ab"})
    assert st == 400, err


def test_unknown_secret_is_not_found(daemon):
    st, err, _ = daemon.request("POST", "/v1/sessions", {"template": TEMPLATE, "secrets": [{"name": "NOPE"}]})
    assert st == 404 and err["error"]["code"] == "not_found", err


def test_env_and_file_grants_visible_inside(daemon):
    put_secret(daemon, "API_KEY")
    sid = session(daemon, [{"name": "API_KEY", "as": "env", "env": "MY_KEY"},
                           {"name": "API_KEY", "as": "file"}])
    try:
        r = run(daemon, sid, 'test "$MY_KEY" = "$(cat /run/secrets/API_KEY)" && echo same; '
                             'stat -c "%a %U" /run/secrets/API_KEY; id -un; '
                             'stat -f -c %T /run/secrets; printf %s "$MY_KEY" | wc -c')
        out = r["stdout"].split("\n")
        assert out[0] == "same", r
        assert out[1] == "400 " + out[2], r  # mode 0400, the sandbox user
        assert out[3] == "tmpfs", r
        assert int(out[4]) == len(SECRET), r
        # Not on the writable layer: a name under /run/secrets is not in the overlay.
        r = run(daemon, sid, "cat /run/secrets/API_KEY > /dev/null && echo readable; "
                             "grep -c ' /run/secrets ' /proc/self/mounts")
        assert r["stdout"].split() == ["readable", "1"], r
    finally:
        st, rec, _ = daemon.delete(sid)
        assert st == 200 and rec["cleanup"]["secrets_wiped"] == 2, rec


def test_redacted_everywhere(daemon):
    put_secret(daemon, "TOKEN")
    sid = session(daemon, [{"name": "TOKEN", "as": "env"}])
    try:
        cmd = ('echo "$TOKEN"; printf %s "$TOKEN" | base64 -w0; echo; echo "$TOKEN" | base64 -w0; echo; '
               'printf %s "$TOKEN" | od -An -tx1 | tr -d " \\n"; echo; '
               'python3 -c "import os,urllib.parse; print(urllib.parse.quote(os.environ[\'TOKEN\'], safe=\'\'))"; '
               'echo "$TOKEN" >&2; echo done')
        st, started, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": cmd})
        assert st == 202, started
        events = sse_events(daemon, sid, started["id"])
        live = b"".join(base64.b64decode(d) for e, d in events if e in ("stdout", "stderr"))
        assert b"[REDACTED:TOKEN]" in live and b"done" in live, live
        assert_clean(live)
        assert live.count(b"[REDACTED:TOKEN]") >= 6, live
        exit_record = json.loads([d for e, d in events if e == "exit"][0])
        assert_clean(json.dumps(exit_record))
        st, out, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{started['id']}/output")
        assert st == 200
        assert_clean(json.dumps(out))
        assert out["stdout"].startswith("[REDACTED:TOKEN]\n"), out
        # A command line holding the value is redacted in the record too.
        r = run(daemon, sid, f"echo {SECRET} >/dev/null; false")
        assert "[REDACTED:TOKEN]" in r["cmd"] and SECRET not in json.dumps(r), r
        st, rec, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{r['id']}")
        assert_clean(json.dumps(rec))
    finally:
        daemon.delete(sid)


def test_one_byte_per_write_still_redacted(daemon):
    put_secret(daemon, "SLOW")
    sid = session(daemon, [{"name": "SLOW", "as": "env"}])
    try:
        cmd = ("python3 -c \"import os,sys,time\n"
               "for c in os.environ['SLOW']:\n"
               "    sys.stdout.write(c); sys.stdout.flush(); time.sleep(0.01)\n"
               "print()\"")
        st, started, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": cmd})
        assert st == 202, started
        events = sse_events(daemon, sid, started["id"])
        chunks = [base64.b64decode(d) for e, d in events if e == "stdout"]
        live = b"".join(chunks)
        assert live == b"[REDACTED:SLOW]\n", (live, len(chunks))
        st, out, _ = daemon.request("GET", f"/v1/sessions/{sid}/execs/{started['id']}/output")
        assert out["stdout"] == "[REDACTED:SLOW]\n", out
    finally:
        daemon.delete(sid)


def test_a_reset_session_keeps_its_live_file_grants(daemon):
    """A reset boots a new sandbox from the template: the grants of the session are
    still its, so their files come back (the env grant needs nothing: execs get it)."""
    put_secret(daemon, "AFTER_RESET")
    sid = session(daemon, [{"name": "AFTER_RESET", "as": "file"}, {"name": "AFTER_RESET", "as": "env", "env": "AR"}])
    try:
        run(daemon, sid, "echo gone-after-reset > /tmp/scratch")
        st, info, _ = daemon.request("POST", f"/v1/sessions/{sid}/reset")
        assert st == 200 and info["resets"] == 1, info
        r = run(daemon, sid, 'test -e /tmp/scratch || echo wiped; test "$AR" = "$(cat /run/secrets/AFTER_RESET)" && '
                             'echo same; stat -c %a /run/secrets/AFTER_RESET')
        assert r["stdout"] == "wiped\nsame\n400\n", r
    finally:
        st, rec, _ = daemon.delete(sid)
        assert st == 200 and rec["cleanup"]["secrets_wiped"] == 2, rec


def test_grants_gone_after_ttl(daemon):
    put_secret(daemon, "SHORT_LIVED")
    sid = session(daemon, [{"name": "SHORT_LIVED", "as": "file", "ttl_s": 2},
                           {"name": "SHORT_LIVED", "as": "env", "env": "SL", "ttl_s": 2}])
    try:
        r = run(daemon, sid, 'test -f /run/secrets/SHORT_LIVED && echo file; test -n "$SL" && echo env')
        assert r["stdout"] == "file\nenv\n", r
        time.sleep(3)
        r = run(daemon, sid, 'test -e /run/secrets/SHORT_LIVED || echo no-file; test -z "$SL" && echo no-env')
        assert r["stdout"] == "no-file\nno-env\n", r
        # Still redacted after the grant ended (a copy may still be printed).
        r = run(daemon, sid, f"echo {SECRET}")
        assert r["stdout"] == "[REDACTED:SHORT_LIVED]\n", r
    finally:
        daemon.delete(sid)


def test_files_wiped_at_teardown(daemon):
    put_secret(daemon, "TORN")
    sid = session(daemon, [{"name": "TORN", "as": "file"}])
    # A process that keeps the file open sees its content zeroed at teardown.
    st, started, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs",
                                    {"cmd": "exec 3</run/secrets/TORN; sleep 30"})
    assert st == 202
    st, rec, _ = daemon.delete(sid)
    assert st == 200 and rec["cleanup"]["secrets_wiped"] == 1, rec
    st, err, _ = daemon.request("POST", f"/v1/sessions/{sid}/run", {"cmd": "true"})
    assert st == 410


def test_state_dir_never_holds_the_plaintext(daemon):
    put_secret(daemon, "PLAIN_CHECK")
    sid = session(daemon, [{"name": "PLAIN_CHECK", "as": "env"}, {"name": "PLAIN_CHECK", "as": "file"}],
                  env={"OTHER": "x"})
    run(daemon, sid, 'echo "$PLAIN_CHECK"; cat /run/secrets/PLAIN_CHECK')
    daemon.delete(sid)
    needles = [f for k, f in forms(SECRET).items() if k in ("raw", "hex", "base64", "url")]
    for root, _, files in os.walk(daemon.state):
        for name in files:
            data = Path(root, name).read_bytes()
            for n in needles:
                assert n not in data, (name, n)
    log = daemon.logs().encode()
    for n in needles:
        assert n not in log
