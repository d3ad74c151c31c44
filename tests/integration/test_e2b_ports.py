"""E2B's data plane to a sandbox's other ports (docs/e2b.md "Code interpreter"): a
request naming the sandbox in `E2b-Sandbox-Id` and a port in `E2b-Sandbox-Port` is
relayed by the session's port proxy to 127.0.0.1:PORT inside, for a caller holding
that sandbox's envd or traffic token; at the HTTP edge: no token, another sandbox's
token, a forged one are 401; nothing listening and an ended sandbox are E2B's 502."""
import hashlib
import hmac
import http.client
import json
import os

import pytest

from daemon_util import Daemon, wait_for

PORT = 8000


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


def token(d, kind, tenant, sid):
    # The daemon's derivation (api/e2b/tokens.h), from its secret file: root reads it.
    with open(os.path.join(d.state, "e2b-token.key")) as f:
        secret = f.read().split("\n")[0].encode()
    mac = hmac.new(secret, kind.encode() + b"\0" + tenant.encode() + b"\0" + sid.encode(), hashlib.sha256)
    return tenant + "." + mac.hexdigest()


def e2b(d, sid, port, path, method="GET", headers=None, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(port), **(headers or {})}
    conn.request(method, path, body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def tenant_of(d, sid):
    # Sessions made on the unix socket by local root are the default tenant's.
    st, s, _ = d.request("GET", f"/v1/sessions/{sid}")
    assert st == 200, s
    st, tenants, _ = d.request("GET", "/v1/tenants")
    assert st == 200, tenants
    return next(t["id"] for t in tenants["tenants"] if t["name"] == "default")


@pytest.fixture
def served(daemon):
    """A session with a web server on PORT inside, and a second session."""
    sid = daemon.session(template="host")
    other = daemon.session(template="host")
    daemon.run(sid, "mkdir -p /tmp/www && echo hello-from-inside > /tmp/www/hi.txt")
    st, e, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs",
                              {"argv": ["python3", "-m", "http.server", str(PORT), "--bind", "127.0.0.1",
                                        "--directory", "/tmp/www"]})
    assert st == 202, e
    tenant = tenant_of(daemon, sid)
    envd = {"X-Access-Token": token(daemon, "envd", tenant, sid)}
    assert wait_for(lambda: e2b(daemon, sid, PORT, "/hi.txt", headers=envd)[0] == 200, 20), daemon.logs()
    yield sid, other, tenant
    daemon.delete(sid)
    daemon.delete(other)


def test_envd_or_traffic_token_reaches_the_port(daemon, served):
    sid, _, tenant = served
    for kind, header in (("envd", "X-Access-Token"), ("traffic", "E2B-Traffic-Access-Token")):
        st, body = e2b(daemon, sid, PORT, "/hi.txt?x=1", headers={header: token(daemon, kind, tenant, sid)})
        assert (st, body) == (200, b"hello-from-inside\n"), (kind, st, body)
    # The server's own answers come back as it gave them.
    st, _ = e2b(daemon, sid, PORT, "/missing", headers={"X-Access-Token": token(daemon, "envd", tenant, sid)})
    assert st == 404


def test_no_token_is_401(daemon, served):
    sid, _, _ = served
    st, body = e2b(daemon, sid, PORT, "/hi.txt")
    assert st == 401, body
    assert json.loads(body)["code"] == 401
    assert b"hello" not in body


def test_another_sandboxs_token_is_401(daemon, served):
    sid, other, tenant = served
    for kind, header in (("envd", "X-Access-Token"), ("traffic", "E2B-Traffic-Access-Token")):
        st, body = e2b(daemon, sid, PORT, "/hi.txt", headers={header: token(daemon, kind, tenant, other)})
        assert st == 401, (kind, st, body)
    # A token of the right form made with another secret.
    forged = tenant + "." + hmac.new(b"0" * 64, b"envd\0" + tenant.encode() + b"\0" + sid.encode(),
                                     hashlib.sha256).hexdigest()
    st, _ = e2b(daemon, sid, PORT, "/hi.txt", headers={"X-Access-Token": forged})
    assert st == 401


def test_nothing_listening_is_502_in_e2bs_shape(daemon, served):
    sid, _, tenant = served
    st, body = e2b(daemon, sid, PORT + 1, "/", headers={"X-Access-Token": token(daemon, "envd", tenant, sid)})
    assert st == 502, body
    err = json.loads(body)
    assert err["code"] == 502 and err["sandboxId"] == sid and err["message"], err


def test_ended_or_unknown_sandbox_is_502(daemon):
    sid = daemon.session(template="host")
    tenant = tenant_of(daemon, sid)
    daemon.delete(sid)
    st, body = e2b(daemon, sid, PORT, "/", headers={"X-Access-Token": token(daemon, "envd", tenant, sid)})
    assert st == 502, body
    err = json.loads(body)
    assert err["code"] == 502 and err["sandboxId"] == sid and "not found" in err["message"], err
    never = "s-" + "0" * 24
    st, body = e2b(daemon, never, PORT, "/", headers={"X-Access-Token": token(daemon, "envd", tenant, never)})
    assert st == 502 and json.loads(body)["sandboxId"] == never, body
