"""Artifact policy (API.md "File policy") attacked at the HTTP edge: uploads respect the
sandbox user's permissions and the writable paths, downloads and archives only leave from
the exportable paths and under the size caps, a file holding a granted secret is refused
or redacted per `scan_secrets`, and every export is recorded with its sha256."""
import hashlib
import io
import json
import tarfile

import pytest

from daemon_util import Daemon

SECRET = "exp0rt-S3cret/value+42="
TEMPLATE = "base"
POLICY = {"writable": ["/home/user/**", "/tmp/**"], "exportable": ["/home/user/out/**"],
          "max_upload_mb": 1, "max_export_mb": 1}


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    st, body, _ = d.request("PUT", "/v1/secrets/EXPORTED", {"value": SECRET})
    assert st == 201, body
    yield d
    d.close()


def session(d, **extra):
    st, s, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "limits": {"memory_mb": 256}, **extra})
    assert st == 201, s
    return s["id"]


def put(d, sid, path, data):
    return d.request("PUT", f"/v1/sessions/{sid}/files?path={path}", data)


def get(d, sid, path):
    return d.request("GET", f"/v1/sessions/{sid}/files?path={path}", raw=True)


def run(d, sid, cmd):
    st, r, _ = d.request("POST", f"/v1/sessions/{sid}/run", {"cmd": cmd})
    assert st == 200, r
    return r


def code(body):
    return json.loads(body)["error"]["code"] if isinstance(body, bytes) else body["error"]["code"]


def test_upload_respects_the_sandbox_users_permissions(daemon):
    sid = session(daemon)
    try:
        st, body, _ = put(daemon, sid, "/etc/evil", b"pwned")
        assert st == 403, body
        st, body, _ = put(daemon, sid, "/usr/bin/evil", b"pwned")
        assert st == 403, body
        assert run(daemon, sid, "test -e /etc/evil || test -e /usr/bin/evil || echo absent")["stdout"] == "absent\n"
        # Where the user may write, it works, and the file is the user's.
        st, body, _ = put(daemon, sid, "/home/user/ok.txt", b"fine")
        assert st == 201, body
        assert run(daemon, sid, "stat -c %U /home/user/ok.txt")["stdout"] == run(daemon, sid, "id -un")["stdout"]
        # A root-owned file in the sticky /tmp is not the user's to replace.
        run_root = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                  {"cmd": "echo root > /tmp/rootfile", "user": "root"})
        assert run_root[0] == 200
        st, body, _ = put(daemon, sid, "/tmp/rootfile", b"replaced")
        assert st == 403, body
        assert run(daemon, sid, "cat /tmp/rootfile")["stdout"] == "root\n"
        # mkdir and delete follow the same rule.
        st, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/fs/mkdir", {"path": "/etc/evil.d"})
        assert st == 403, body
        st, body, _ = daemon.request("DELETE", f"/v1/sessions/{sid}/files?path=/etc/hostname")
        assert st == 403, body
    finally:
        daemon.delete(sid)


def test_writable_exportable_and_size_caps(daemon):
    sid = session(daemon, files=POLICY)
    try:
        st, body, _ = put(daemon, sid, "/var/tmp/x", b"x")
        assert st == 403 and code(body) == "policy_denied", body
        st, body, _ = put(daemon, sid, "/home/user/in.txt", b"in")
        assert st == 201, body
        # Over the session's upload cap (1 MiB).
        st, body, _ = put(daemon, sid, "/home/user/big", b"x" * (2 << 20))
        assert st == 413, body
        # Downloads only from the exportable paths.
        st, data, _ = get(daemon, sid, "/home/user/in.txt")
        assert st == 403 and code(data) == "policy_denied", data
        st, data, _ = get(daemon, sid, "/etc/passwd")
        assert st == 403 and code(data) == "policy_denied", data
        run(daemon, sid, "mkdir -p /home/user/out && echo result > /home/user/out/r.txt && "
                         "ln -s /etc/passwd /home/user/out/pw && ln -s /etc /home/user/out/etc && "
                         "head -c 2000000 /dev/zero > /home/user/out/huge")
        st, data, _ = get(daemon, sid, "/home/user/out/r.txt")
        assert st == 200 and data == b"result\n", data
        for path in ("/home/user/out/pw", "/home/user/out/etc/passwd", "/home/user/out/../in.txt"):
            st, data, _ = get(daemon, sid, path)
            assert st == 403 and code(data) == "policy_denied", (path, data)
        st, data, _ = get(daemon, sid, "/home/user/out/huge")
        assert st == 413, data
        # Archives: only an exportable directory, and within the export cap.
        st, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/archive?path=/home/user", raw=True)
        assert st == 403 and code(data) == "policy_denied", data
        run(daemon, sid, "rm /home/user/out/huge")
        st, data, _ = daemon.request("GET", f"/v1/sessions/{sid}/archive?path=/home/user/out", raw=True)
        assert st == 200, data
        names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
        assert "r.txt" in names and "in.txt" not in names, names
        # Every export is recorded: path, size and sha256.
        st, page, _ = daemon.request("GET", f"/v1/audit?limit=1000&session={sid}&kind=file.exported")
        assert st == 200, page
        records = [r["data"] for r in page["records"]]
        assert any(r["path"] == "/home/user/out/r.txt" and r["size"] == 7 and
                   r["sha256"] == hashlib.sha256(b"result\n").hexdigest() for r in records), records
        assert any(r["export"] == "archive" and r["sha256"] == hashlib.sha256(data).hexdigest()
                   for r in records), records
    finally:
        daemon.delete(sid)


def test_session_cannot_widen_the_tenant_policy():
    d = Daemon(config={"files": {"writable": ["/home/**", "/tmp/**"], "exportable": ["/home/**"],
                                 "max_upload_mb": 4, "scan_secrets": "refuse"}}).start()
    try:
        for files in ({"writable": ["/etc/**"]}, {"exportable": ["/**"]}, {"max_upload_mb": 8},
                      {"scan_secrets": "off"}):
            st, body, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "files": files})
            assert st == 403 and body["error"]["code"] == "policy_denied", (files, body)
        st, body, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "files": {"writable": ["/etc"]}})
        assert st == 400, body
        # The tenant default applies without asking.
        st, s, _ = d.request("POST", "/v1/sessions", {"template": TEMPLATE, "limits": {"memory_mb": 256}})
        assert st == 201, s
        try:
            st, body, _ = d.request("PUT", f"/v1/sessions/{s['id']}/files?path=/var/tmp/x", b"x")
            assert st == 403 and body["error"]["code"] == "policy_denied", body
        finally:
            d.delete(s["id"])
    finally:
        d.close()


@pytest.mark.parametrize("mode", ["refuse", "redact"])
def test_exported_file_holding_a_secret(daemon, mode):
    sid = session(daemon, secrets=[{"name": "EXPORTED", "as": "env"}],
                  files={"scan_secrets": mode, "exportable": ["/home/user/**"]})
    try:
        run(daemon, sid, 'mkdir -p /home/user/art && echo "key=$EXPORTED" > /home/user/art/leak.txt && '
                         'printf %s "$EXPORTED" | base64 > /home/user/art/leak.b64 && echo fine > /home/user/art/ok')
        st, data, _ = get(daemon, sid, "/home/user/art/ok")
        assert st == 200 and data == b"fine\n"
        st, data, _ = get(daemon, sid, "/home/user/art/leak.txt")
        st_b64, data_b64, _ = get(daemon, sid, "/home/user/art/leak.b64")
        st_tar, tar, _ = daemon.request("GET", f"/v1/sessions/{sid}/archive?path=/home/user/art", raw=True)
        if mode == "refuse":
            assert st == 403 and code(data) == "policy_denied", data
            assert st_b64 == 403, data_b64
            assert st_tar == 403 and code(tar) == "policy_denied", tar[:200]
        elif mode == "redact":
            assert st == 200 and data == b"key=[REDACTED:EXPORTED]\n", data
            assert st_b64 == 200 and SECRET.encode() not in data_b64 and b"[REDACTED:EXPORTED]" in data_b64
            assert st_tar == 200
            files = {m.name: tarfile.open(fileobj=io.BytesIO(tar)).extractfile(m).read()
                     for m in tarfile.open(fileobj=io.BytesIO(tar)).getmembers() if m.isfile()}
            assert files["leak.txt"] == b"key=[REDACTED:EXPORTED]\n", files
            assert files["ok"] == b"fine\n"
    finally:
        daemon.delete(sid)
