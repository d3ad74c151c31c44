"""Egress only through policy (docs/security.md "Network"): real clients (curl, python,
git) inside the real base template reach the test's own loopback servers through the
session's door at 127.0.0.1:3128, and every way around or past the policy fails.

The daemon trusts a CA this test makes (egress.ca_file, handed to the sessions),
allows 127.0.0.0/8 on purpose (egress.allow_cidrs: the servers live on the host's
loopback) and names hosts through egress.hosts (no DNS in the test)."""
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import uuid

import pytest

from conftest import CELA, wait_until  # noqa: F401  (CELA: the binary the daemon runs)
from daemon_util import Daemon

pytestmark = pytest.mark.skipif(not os.path.isdir("/var/lib/cela/templates/base"), reason="needs the base template")


class Servers:
    """HTTP, HTTPS (a cert for allowed.test from the test's CA) and a fake metadata
    server, all on the host's loopback, serving one directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cela-egress-")
        self.www = os.path.join(self.dir, "www")
        os.makedirs(self.www)
        with open(os.path.join(self.www, "hello.txt"), "w") as f:
            f.write("hello through the door\n")
        self._make_ca()
        self._make_repo()
        self.metadata_hits = 0
        self.http = self._serve(self._handler())
        self.https = self._serve(self._handler(), tls=True)
        self.metadata = self._serve(self._metadata_handler())

    def _run(self, *args):
        subprocess.run(args, check=True, capture_output=True, cwd=self.dir)

    def _make_ca(self):
        d = self.dir
        self.ca = os.path.join(d, "ca.pem")
        self._run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", self.ca,
                  "-days", "2", "-subj", "/CN=cela egress test CA")
        with open(os.path.join(d, "ext.cnf"), "w") as f:
            f.write("subjectAltName=DNS:allowed.test,DNS:other.test\nbasicConstraints=CA:FALSE\n")
        self._run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
                  "-subj", "/CN=allowed.test")
        self._run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", self.ca, "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")

    def _make_repo(self):
        work = os.path.join(self.dir, "work")
        os.makedirs(work)
        env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                   GIT_COMMITTER_EMAIL="t@t")
        for args in (["git", "init", "-q", "-b", "main"],):
            subprocess.run(args, check=True, cwd=work, capture_output=True, env=env)
        with open(os.path.join(work, "README"), "w") as f:
            f.write("cloned over https through the door\n")
        subprocess.run(["git", "add", "README"], check=True, cwd=work, capture_output=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", "one"], check=True, cwd=work, capture_output=True, env=env)
        bare = os.path.join(self.www, "repo.git")
        subprocess.run(["git", "clone", "-q", "--bare", work, bare], check=True, capture_output=True, env=env)
        # The dumb HTTP protocol: static files a plain web server can serve.
        subprocess.run(["git", "update-server-info"], check=True, cwd=bare, capture_output=True, env=env)

    def _handler(self):
        www = self.www

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=www, **k)

            def log_message(self, *a):
                pass

        return Handler

    def _metadata_handler(self):
        servers = self

        class Metadata(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                servers.metadata_hits += 1
                body = b"iam-credentials"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        return Metadata

    def _serve(self, handler, tls=False):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(os.path.join(self.dir, "srv.pem"), os.path.join(self.dir, "srv.key"))
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    def port(self, srv):
        return srv.server_address[1]

    def close(self):
        for s in (self.http, self.https, self.metadata):
            s.shutdown()
            s.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def servers():
    s = Servers()
    yield s
    s.close()


@pytest.fixture(scope="module")
def daemon(servers):
    d = Daemon(config={"egress": {
        "allow_cidrs": ["127.0.0.0/8"],
        "ca_file": servers.ca,
        "hosts": {"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"],
                  "metadata.test": ["169.254.169.254"], "private.test": ["10.0.0.7"],
                  "cgnat.test": ["100.64.1.1"],
                  # A name that also points at the metadata address: refused whole.
                  "rebind.test": ["127.0.0.1", "169.254.169.254"]},
    }})
    d.start()
    yield d
    d.close()


def session(daemon, allow=(), deny=(), mode="allowlist", **extra):
    body = {"template": "base", "limits": {"memory_mb": 512}, **extra}
    if mode:
        body["network"] = {"mode": mode, "allow": list(allow), "deny": list(deny)} if mode != "none" else {"mode": mode}
    status, s, _ = daemon.request("POST", "/v1/sessions", body)
    assert status == 201, s
    return s["id"]


def sh(daemon, sid, cmd, timeout=60):
    r = daemon.run(sid, cmd, timeout_s=timeout)
    return r


def py_inside(daemon, sid, code, timeout=60):
    status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                  {"argv": ["python3", "-c", code], "timeout_s": timeout})
    assert status == 200, r
    return r


# A raw proxy request from inside: prints the first line and the body of the answer.
RAW = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(sys.argv[1].encode().decode("unicode_escape").encode())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.decode(errors="replace"))
"""


def raw_request(daemon, sid, request):
    status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                  {"argv": ["python3", "-c", RAW, request], "timeout_s": 60})
    assert status == 200, r
    assert r["exit_code"] == 0, r
    return r["stdout"]


def egress(daemon, sid, **query):
    q = "&".join(f"{k}={v}" for k, v in query.items())
    status, body, _ = daemon.request("GET", f"/v1/sessions/{sid}/egress" + ("?" + q if q else ""))
    assert status == 200, body
    return body


def test_curl_and_python_reach_allowed_hosts_over_http_and_https(daemon, servers):
    hp, sp = servers.port(servers.http), servers.port(servers.https)
    sid = session(daemon, allow=[f"allowed.test:{hp}", f"allowed.test:{sp}"])
    try:
        r = sh(daemon, sid, f"curl -sS --max-time 20 http://allowed.test:{hp}/hello.txt")
        assert r["exit_code"] == 0 and r["stdout"] == "hello through the door\n", r
        # HTTPS through CONNECT, verified against the operator's CA handed to the session.
        r = sh(daemon, sid, f"curl -sS --max-time 20 https://allowed.test:{sp}/hello.txt")
        assert r["exit_code"] == 0 and r["stdout"] == "hello through the door\n", r
        code = (f"import urllib.request; print(urllib.request.urlopen('https://allowed.test:{sp}/hello.txt', "
                f"timeout=20).read().decode(), end='')")
        r = py_inside(daemon, sid, code)
        assert r["exit_code"] == 0 and r["stdout"] == "hello through the door\n", r
        code = (f"import urllib.request; print(urllib.request.urlopen('http://allowed.test:{hp}/hello.txt', "
                f"timeout=20).read().decode(), end='')")
        r = py_inside(daemon, sid, code)
        assert r["exit_code"] == 0 and r["stdout"] == "hello through the door\n", r
    finally:
        daemon.delete(sid)


def test_git_clone_over_https(daemon, servers):
    sp = servers.port(servers.https)
    sid = session(daemon, allow=[f"allowed.test:{sp}"])
    try:
        r = sh(daemon, sid, f"git clone -q https://allowed.test:{sp}/repo.git /tmp/r && cat /tmp/r/README", timeout=120)
        assert r["exit_code"] == 0, r
        assert r["stdout"] == "cloned over https through the door\n", r
    finally:
        daemon.delete(sid)


def test_the_extra_ca_is_in_the_sessions_trust_store(daemon, servers):
    sid = session(daemon, allow=["allowed.test"])
    try:
        r = sh(daemon, sid, "env | grep -E '^(SSL_CERT_FILE|REQUESTS_CA_BUNDLE|PIP_CERT|NODE_EXTRA_CA_CERTS|"
                            "GIT_SSL_CAINFO|HTTPS_PROXY|https_proxy|ALL_PROXY|NO_PROXY)=' | sort")
        env = dict(line.split("=", 1) for line in r["stdout"].splitlines())
        assert env["HTTPS_PROXY"] == env["https_proxy"] == env["ALL_PROXY"] == "http://127.0.0.1:3128", env
        assert "127.0.0.1" in env["NO_PROXY"]
        for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO"):
            assert env[k] == "/etc/ssl/certs/ca-certificates.crt", env
        ca = open(servers.ca).read().strip()
        r = sh(daemon, sid, "cat /etc/ssl/certs/ca-certificates.crt; echo ===; cat \"$NODE_EXTRA_CA_CERTS\"")
        bundle, extra = r["stdout"].split("===\n")
        assert ca in bundle and bundle.count("BEGIN CERTIFICATE") > 10  # the system's CAs too
        assert extra.strip() == ca
    finally:
        daemon.delete(sid)


def test_a_reset_session_keeps_its_door_and_ca(daemon, servers):
    """A reset boots a new sandbox (a new init, a new netns): the egress door and the
    operator's CA come back with it, under the same policy."""
    sp = servers.port(servers.https)
    sid = session(daemon, allow=[f"allowed.test:{sp}"])
    try:
        st, info, _ = daemon.request("POST", f"/v1/sessions/{sid}/reset")
        assert st == 200 and info["resets"] == 1, info
        r = sh(daemon, sid, f"curl -sS --max-time 20 https://allowed.test:{sp}/hello.txt")
        assert r["exit_code"] == 0 and r["stdout"] == "hello through the door\n", r
        r = sh(daemon, sid, f"curl -s --max-time 20 -o /dev/null -w '%{{http_code}}' https://other.test:{sp}/")
        assert r["stdout"] == "000", r  # the CONNECT refused: the policy came back too
    finally:
        daemon.delete(sid)


def test_denied_hosts_get_403_naming_the_rule(daemon, servers):
    hp = servers.port(servers.http)
    sid = session(daemon, allow=[f"allowed.test:{hp}", "*.example.org"], deny=["other.test"])
    try:
        r = sh(daemon, sid, f"curl -s --max-time 20 -w '\\n%{{http_code}}' http://nowhere.test:{hp}/hello.txt")
        assert r["stdout"] == f"cela: nowhere.test:{hp} denied by session policy (no rule matches)\n\n403", r
        r = sh(daemon, sid, f"curl -s --max-time 20 -w '\\n%{{http_code}}' http://other.test:{hp}/hello.txt")
        assert r["stdout"] == f"cela: other.test:{hp} denied by session deny other.test (deny wins)\n\n403", r
        # HTTPS: curl sees the refused CONNECT; the proxy's body names the rule.
        r = sh(daemon, sid, "curl -sS --max-time 20 https://api.evil.com/")
        assert r["exit_code"] != 0 and "403" in r["stderr"], r
        out = raw_request(daemon, sid, "CONNECT api.evil.com:443 HTTP/1.1\\r\\nHost: api.evil.com\\r\\n\\r\\n")
        assert out.startswith("HTTP/1.1 403"), out
        assert out.rstrip().endswith("cela: api.evil.com:443 denied by session policy (no rule matches)"), out
        # A port suffix narrows; no suffix means 80 and 443 only.
        out = raw_request(daemon, sid, "CONNECT a.example.org:8443 HTTP/1.1\\r\\n\\r\\n")
        assert "403" in out.splitlines()[0], out
    finally:
        daemon.delete(sid)


def test_private_metadata_and_own_addresses_are_refused(daemon, servers):
    mp = servers.port(servers.metadata)
    sid = session(daemon, allow=["*:*"])
    try:
        targets = {
            "metadata.test:80": "169.254.169.254 is link-local",
            "169.254.169.254:80": "169.254.169.254 is link-local",
            "[fd00:ec2::254]:80": "fd00:ec2::254 is private",
            "[fe80::1]:80": "fe80::1 is link-local",
            "private.test:80": "10.0.0.7 is private",
            "192.168.1.1:80": "192.168.1.1 is private",
            "172.16.0.1:80": "172.16.0.1 is private",
            "cgnat.test:80": "100.64.1.1 is CGNAT",
            "[::ffff:169.254.169.254]:80": "169.254.169.254 is link-local",
            # Every address of a name is checked, not just the first.
            f"rebind.test:{mp}": "169.254.169.254 is link-local",
            # 127.0.0.0/8 is allowed here, the daemon's own API endpoint never is.
            f"127.0.0.1:{daemon.port}": f"127.0.0.1:{daemon.port} is the daemon's own endpoint",
        }
        for target, why in targets.items():
            out = raw_request(daemon, sid, f"CONNECT {target} HTTP/1.1\\r\\n\\r\\n")
            assert out.startswith("HTTP/1.1 403"), (target, out)
            assert f"denied by address policy ({why})" in out, (target, out)
            # Plain HTTP takes the same road.
        r = sh(daemon, sid, "curl -s --max-time 20 http://169.254.169.254/latest/meta-data/")
        assert "denied by address policy (169.254.169.254 is link-local)" in r["stdout"], r
        r = sh(daemon, sid, f"curl -s --max-time 20 http://rebind.test:{mp}/")
        assert "denied by address policy" in r["stdout"], r
        assert servers.metadata_hits == 0
    finally:
        daemon.delete(sid)


def test_no_way_around_the_proxy_and_no_dns(daemon, servers):
    hp = servers.port(servers.http)
    host_ips = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
                if ":" not in a]
    sid = session(daemon, allow=[f"allowed.test:{hp}"])
    code = r"""
import errno, json, socket, sys
hp, ips = int(sys.argv[1]), sys.argv[2:]
out = {}
def tcp(host, port):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", (host, port))
        return "sent"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
out["tcp_host_loopback_server"] = tcp("127.0.0.1", hp)   # the host's server: not this loopback
out["tcp_public"] = tcp("1.1.1.1", 443)
out["tcp_metadata"] = tcp("169.254.169.254", 80)
out["udp_dns"] = udp("1.1.1.1", 53)
out["udp_metadata"] = udp("169.254.169.254", 80)
for ip in ips:
    out["tcp_host_" + ip] = tcp(ip, hp)
for name in ("allowed.test", "localhost.localdomain.invalid", "example.com"):
    try:
        socket.getaddrinfo(name, 80)
        out["dns_" + name] = "resolved"
    except socket.gaierror as e:
        out["dns_" + name] = "failed"
print(json.dumps(out))
"""
    try:
        status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                      {"argv": ["python3", "-c", code, str(hp), *host_ips], "timeout_s": 60})
        assert status == 200 and r["exit_code"] == 0, r
        out = json.loads(r["stdout"])
        assert out["tcp_host_loopback_server"] == "ECONNREFUSED", out
        for k in ("tcp_public", "tcp_metadata", "udp_dns", "udp_metadata"):
            assert out[k] == "ENETUNREACH", (k, out)
        for ip in host_ips:
            assert out["tcp_host_" + ip] == "ENETUNREACH", out
        for k, v in out.items():
            if k.startswith("dns_"):
                assert v == "failed", out
        # The netns has loopback and nothing else.
        r = sh(daemon, sid, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
        assert r["stdout"].split() == ["lo"], r
    finally:
        daemon.delete(sid)


def test_host_unix_sockets_and_other_doors_are_out_of_reach(daemon, servers):
    hp = servers.port(servers.http)
    name = "cela-egress-test-" + uuid.uuid4().hex
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + name)
    abstract.listen(1)
    path_dir = tempfile.mkdtemp(prefix="cela-egress-unix-")
    path = os.path.join(path_dir, "s.sock")
    named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named.bind(path)
    named.listen(1)
    os.chmod(path_dir, 0o755)
    os.chmod(path, 0o777)
    a = session(daemon, allow=[f"allowed.test:{hp}"])
    b = session(daemon, allow=[f"allowed.test:{hp}"])
    code = r"""
import errno, json, socket, sys
out = {}
for label, addr in (("abstract", "\0" + sys.argv[1]), ("path", sys.argv[2]), ("daemon_api", sys.argv[3])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        out[label] = "connected"
    except OSError as e:
        out[label] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out))
"""
    try:
        for sid in (a, b):
            for user in ("user", "root"):
                status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run", {
                    "argv": ["python3", "-c", code, name, path, daemon.socket], "user": user, "timeout_s": 30})
                assert status == 200 and r["exit_code"] == 0, r
                out = json.loads(r["stdout"])
                assert out == {"abstract": "ECONNREFUSED", "path": "ENOENT", "daemon_api": "ENOENT"}, out
        # Each session's door is its own: a's traffic is recorded for a only.
        r = sh(daemon, a, f"curl -sS --max-time 20 http://allowed.test:{hp}/hello.txt")
        assert r["exit_code"] == 0, r
        assert [c["host"] for c in egress(daemon, a)["connections"]] == ["allowed.test"]
        assert egress(daemon, b)["connections"] == []
    finally:
        daemon.delete(a)
        daemon.delete(b)
        abstract.close()
        named.close()
        shutil.rmtree(path_dir, ignore_errors=True)


def test_patch_changes_the_allowlist_for_new_connections(daemon, servers):
    hp = servers.port(servers.http)
    sid = session(daemon, allow=[f"allowed.test:{hp}"])
    get_other = f"curl -s --max-time 20 -o /dev/null -w '%{{http_code}}' http://other.test:{hp}/hello.txt"
    try:
        assert sh(daemon, sid, get_other)["stdout"] == "403"
        status, s, _ = daemon.request("PATCH", f"/v1/sessions/{sid}",
                                      {"network": {"allow": [f"allowed.test:{hp}", f"other.test:{hp}"]}})
        assert status == 200, s
        assert s["network"]["allow"] == [f"allowed.test:{hp}", f"other.test:{hp}"]
        assert sh(daemon, sid, get_other)["stdout"] == "200"
        status, s, _ = daemon.request("PATCH", f"/v1/sessions/{sid}", {"network": {"deny": ["other.test"]}})
        assert status == 200, s
        assert sh(daemon, sid, get_other)["stdout"] == "403"
        status, s, _ = daemon.request("GET", f"/v1/sessions/{sid}")
        assert s["network"] == {"mode": "allowlist", "allow": [f"allowed.test:{hp}", f"other.test:{hp}"],
                                "deny": ["other.test"]}, s
        # A bad rule is refused and changes nothing.
        status, e, _ = daemon.request("PATCH", f"/v1/sessions/{sid}", {"network": {"allow": ["bad host!"]}})
        assert status == 400, e
        assert sh(daemon, sid, get_other)["stdout"] == "403"
    finally:
        daemon.delete(sid)


def test_a_session_without_network_has_no_door(daemon):
    sid = session(daemon, mode=None)
    try:
        status, s, _ = daemon.request("GET", f"/v1/sessions/{sid}")
        assert s["network"] == {"mode": "none"}
        r = sh(daemon, sid, "env | grep -ci proxy; curl -sS --max-time 5 -x http://127.0.0.1:3128 http://allowed.test/")
        assert r["stdout"].startswith("0\n"), r
        assert r["exit_code"] == 7, r  # connection refused: nothing listens on 3128
        status, e, _ = daemon.request("PATCH", f"/v1/sessions/{sid}", {"network": {"allow": ["allowed.test"]}})
        assert status == 409, e
    finally:
        daemon.delete(sid)


def test_every_attempt_is_recorded(daemon, servers):
    hp, sp = servers.port(servers.http), servers.port(servers.https)
    sid = session(daemon, allow=[f"allowed.test:{hp}", f"allowed.test:{sp}"])
    try:
        sh(daemon, sid, f"curl -sS --max-time 20 http://allowed.test:{hp}/hello.txt")
        sh(daemon, sid, f"curl -sS --max-time 20 https://allowed.test:{sp}/hello.txt")
        sh(daemon, sid, "curl -s --max-time 20 http://denied.test/")
        conns = egress(daemon, sid)["connections"]
        assert len(conns) == 3, conns
        http_c, tls_c, denied = conns
        assert http_c["kind"] == "http" and http_c["verdict"] == "allowed" and http_c["ip"] == "127.0.0.1"
        assert http_c["port"] == hp and http_c["rule"] == f"session allow allowed.test:{hp}"
        assert http_c["bytes_down"] > len("hello through the door\n") and http_c["bytes_up"] > 0
        assert tls_c["kind"] == "connect" and tls_c["verdict"] == "allowed" and tls_c["bytes_down"] > 1000
        assert tls_c["duration_ms"] >= 0
        assert denied["verdict"] == "denied" and denied["host"] == "denied.test" and denied["port"] == 80
        assert denied["rule"] == "session policy" and denied["reason"] == "no rule matches"
        assert denied["ip"] is None and denied["bytes_up"] == 0 and denied["bytes_down"] == 0
        page = egress(daemon, sid, limit=2)
        assert [c["at"] for c in page["connections"]] == [c["at"] for c in conns[:2]]
        rest = egress(daemon, sid, limit=2, cursor=page["next_cursor"])
        assert rest["connections"] == conns[2:] and rest["next_cursor"] is None
        # Each attempt is in the hash-chained audit as well.
        status, audit, _ = daemon.request("GET", f"/v1/audit?session={sid}&kind=egress.connection")
        assert status == 200, audit
        got = [(r["data"]["host"], r["data"]["port"], r["data"]["allowed"]) for r in audit["records"]]
        assert got == [("allowed.test", hp, True), ("allowed.test", sp, True), ("denied.test", 80, False)], got
    finally:
        daemon.delete(sid)


# Holds one connection through the door open while a second one is tried.
HOLD = r"""
import socket, sys
port = int(sys.argv[1])
first = socket.create_connection(("127.0.0.1", 3128), timeout=20)
first.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode())
print(first.recv(200).split(b"\r\n")[0].decode())
second = socket.create_connection(("127.0.0.1", 3128), timeout=20)
second.sendall(f"CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode())
print(second.recv(200).split(b"\r\n")[0].decode())
"""


# A CONNECT to one host, then a TLS hello naming another (domain fronting).
FRONT = r"""
import socket, ssl, sys
host, port, sni = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
print(s.recv(200).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname=sni)
    print("handshake", t.version())
except (ssl.SSLError, OSError) as e:
    print("refused", type(e).__name__)
"""


def test_a_tls_hello_must_name_the_connect_host(daemon, servers):
    sp = servers.port(servers.https)
    sid = session(daemon, allow=[f"allowed.test:{sp}"])
    try:
        def front(sni):
            status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                          {"argv": ["python3", "-c", FRONT, "allowed.test", str(sp), sni],
                                           "timeout_s": 60})
            assert status == 200 and r["exit_code"] == 0, r
            return r["stdout"].splitlines()
        assert front("allowed.test")[1].startswith("handshake"), "the matching name must pass"
        assert front("ALLOWED.test.")[1].startswith("handshake"), "case and a final dot do not matter"
        lines = front("evil.example.com")
        assert " 200" in lines[0] and lines[1].startswith("refused"), lines
        last = egress(daemon, sid)["connections"][-1]
        assert last["verdict"] == "denied" and last["rule"] == "tls server name", last
        assert "evil.example.com" in last["reason"] and last["bytes_up"] == 0, last
    finally:
        daemon.delete(sid)


def test_a_connection_cap_hit_is_a_limit_event_of_the_session(servers):
    d = Daemon(config={"egress": {"allow_cidrs": ["127.0.0.0/8"], "max_connections": 1,
                                  "hosts": {"allowed.test": ["127.0.0.1"]}}}).start()
    try:
        sp = servers.port(servers.https)
        sid = session(d, allow=[f"allowed.test:{sp}"])
        status, r, _ = d.request("POST", f"/v1/sessions/{sid}/run",
                                 {"argv": ["python3", "-c", HOLD, str(sp)], "timeout_s": 60})
        assert status == 200 and r["exit_code"] == 0, r
        first, second = r["stdout"].split("\n")[:2]
        assert " 200" in first and " 429" in second, r
        assert wait_until(lambda: any(e["kind"] == "egress_connections"
                                      for e in d.request("GET", f"/v1/sessions/{sid}/metrics")[1]["limit_events"]),
                          timeout=10)
        status, audit, _ = d.request("GET", f"/v1/audit?session={sid}&kind=limit.egress_connections")
        assert status == 200 and len(audit["records"]) == 1, audit
        status, text, _ = d.request("GET", "/metrics", raw=True)
        assert b'kind="egress_connections"' in text, text[:2000]
        d.delete(sid)
    finally:
        d.close()


# Dials the door in a loop: each attempt is refused by policy.
FLOOD = r"""
import socket, sys
for _ in range(int(sys.argv[1])):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test\r\n\r\n")
    while s.recv(4096):
        pass
    s.close()
print("done")
"""


def prom_value(text, family, **labels):
    """The sum of a family's samples whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families
    total = 0.0
    for f in text_string_to_metric_families(text.decode()):
        for s in f.samples:
            if s.name == family and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_a_dialling_loop_is_counted_not_listed_one_by_one(servers):
    d = Daemon(config={"egress": {"allow_cidrs": ["127.0.0.0/8"], "records_per_second": 1, "record_burst": 10,
                                  "hosts": {"allowed.test": ["127.0.0.1"]}}}).start()
    try:
        hp = servers.port(servers.http)
        sid = session(d, allow=[f"allowed.test:{hp}"])
        before = prom_value(d.request("GET", "/metrics", raw=True)[1], "cela_egress_verdicts_total",
                            verdict="denied")
        status, r, _ = d.request("POST", f"/v1/sessions/{sid}/run",
                                 {"argv": ["python3", "-c", FLOOD, "300"], "timeout_s": 120})
        assert status == 200 and r["stdout"] == "done\n", r
        listed = egress(d, sid, limit=500)["connections"]
        assert 10 <= len(listed) < 60, len(listed)
        d.delete(sid)
        # The rest is one summary: in the audit with its counts, and a limit event.
        status, audit, _ = d.request("GET", f"/v1/audit?session={sid}&kind=egress.unrecorded")
        assert status == 200 and audit["records"], audit
        unrecorded = sum(a["data"]["denied"] for a in audit["records"])
        assert unrecorded + len(listed) == 300, (unrecorded, len(listed))
        status, m, _ = d.request("GET", f"/v1/sessions/{sid}/metrics")
        assert status == 200, m
        events = [e for e in m["limit_events"] if e["kind"] == "egress_records"]
        assert events and "over the session's record rate" in events[0]["detail"], m
        # Prometheus counts every attempt, listed or not.
        after = prom_value(d.request("GET", "/metrics", raw=True)[1], "cela_egress_verdicts_total",
                           verdict="denied")
        assert after - before == 300, (before, after)
    finally:
        d.close()


def test_prometheus_counts_egress_verdicts_and_bytes(daemon, servers):
    hp = servers.port(servers.http)
    sid = session(daemon, allow=[f"allowed.test:{hp}"])
    try:
        # By tenant (the tests of this file run one at a time on this daemon).
        text = daemon.request("GET", "/metrics", raw=True)[1]
        before = {v: prom_value(text, "cela_egress_verdicts_total", verdict=v)
                  for v in ("allowed", "denied")}
        rx = prom_value(text, "cela_egress_bytes_total", direction="rx")
        sh(daemon, sid, f"curl -sS --max-time 20 http://allowed.test:{hp}/hello.txt")
        sh(daemon, sid, "curl -s --max-time 20 http://denied.test/")
        sh(daemon, sid, "curl -s --max-time 20 http://denied.test/")

        def counted():
            t = daemon.request("GET", "/metrics", raw=True)[1]
            return (prom_value(t, "cela_egress_verdicts_total", verdict="allowed") - before["allowed"],
                    prom_value(t, "cela_egress_verdicts_total", verdict="denied") - before["denied"],
                    prom_value(t, "cela_egress_bytes_total", direction="rx") - rx)
        assert wait_until(lambda: counted()[:2] == (1, 2), timeout=10), counted()
        assert counted()[2] > len("hello through the door\n"), counted()
        assert b'cela_egress_verdicts_total{tenant="t-' in daemon.request("GET", "/metrics", raw=True)[1]
    finally:
        daemon.delete(sid)


def test_bad_network_requests_are_refused(daemon):
    for body, status in (({"mode": "open"}, 400), ({"mode": "allowlist", "allow": ["*.*.x"]}, 400),
                         ({"mode": "allowlist", "allow": ["a.test:0"]}, 400),
                         ({"mode": "none", "allow": ["a.test"]}, 400),
                         ({"mode": "allowlist", "extra": 1}, 400)):
        s, e, _ = daemon.request("POST", "/v1/sessions", {"template": "base", "network": body})
        assert s == status, (body, e)


def test_tenant_ceiling_bounds_sessions_and_applies_live(daemon, servers):
    hp = servers.port(servers.http)
    status, tenants, _ = daemon.request("GET", "/v1/tenants")
    tid = tenants["tenants"][0]["id"]
    url = f"/v1/tenants/{tid}/network_ceiling"
    get_allowed = f"curl -s --max-time 20 -w '\\n%{{http_code}}' http://allowed.test:{hp}/hello.txt"
    try:
        status, c, _ = daemon.request("PUT", url, {"allow": ["allowed.test:*", "*.example.org"], "deny": ["x.example.org"]})
        assert status == 200, c
        assert c["network_ceiling"] == {"allow": ["allowed.test:*", "*.example.org"], "deny": ["x.example.org"]}
        for beyond in (["*"], ["other.test"], ["example.org"], ["x.example.org"]):
            s, e, _ = daemon.request("POST", "/v1/sessions", {"template": "base",
                                                              "network": {"mode": "allowlist", "allow": beyond}})
            assert s == 403 and e["error"]["code"] == "policy_denied", (beyond, e)
            assert "beyond the tenant's network ceiling" in e["error"]["message"], e
        sid = session(daemon, allow=[f"allowed.test:{hp}"])
        try:
            assert sh(daemon, sid, get_allowed)["stdout"].endswith("\n200")
            # PATCH beyond the ceiling is refused too.
            s, e, _ = daemon.request("PATCH", f"/v1/sessions/{sid}", {"network": {"allow": ["*"]}})
            assert s == 403, e
            # Lowering the ceiling applies to the live session's next connection.
            status, c, _ = daemon.request("PUT", url, {"allow": ["nothing.test"]})
            assert status == 200, c
            r = sh(daemon, sid, get_allowed)
            assert r["stdout"] == f"cela: allowed.test:{hp} denied by tenant ceiling (no rule matches)\n\n403", r
            status, c, _ = daemon.request("DELETE", url)
            assert status == 200 and c["network_ceiling"] is None, c
            assert sh(daemon, sid, get_allowed)["stdout"].endswith("\n200")
        finally:
            daemon.delete(sid)
        # Only a host admin sets a ceiling; a tenant's own admin key may read it.
        status, t2, _ = daemon.request("POST", "/v1/tenants", {"name": "egress-" + uuid.uuid4().hex[:8]})
        assert status == 201, t2
        status, k, _ = daemon.request("POST", f"/v1/tenants/{t2['id']}/keys", {"admin": True})
        assert status == 201, k
        s, e, _ = daemon.request("PUT", f"/v1/tenants/{t2['id']}/network_ceiling", {"allow": ["*:*"]}, tcp=True,
                                 key=k["key"])
        assert s == 403, e
        s, c, _ = daemon.request("GET", f"/v1/tenants/{t2['id']}/network_ceiling", tcp=True, key=k["key"])
        assert s == 200 and c == {"network_ceiling": None}, c
        s, e, _ = daemon.request("GET", f"/v1/tenants/{tid}/network_ceiling", tcp=True, key=k["key"])
        assert s == 404, e
        s, e, _ = daemon.request("PUT", url, {"allow": ["bad rule!"]})
        assert s == 400, e
    finally:
        daemon.request("DELETE", url)
