"""Package registries the package-gateway tests start on loopback, over HTTPS with a
test CA: a PyPI simple index (PEP 691 JSON with upload times) serving wheels built
here, an npm registry serving packuments (with publish times) and tarballs built
here, and a Debian archive built with dpkg-deb and dpkg-scanpackages, signed with a
throwaway gpg key. Every request is counted, so a test can tell a cache hit (the
upstream was not asked) from a miss."""
import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import shutil
import ssl
import subprocess
import tarfile
import threading
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

DAY = 86400


def rfc3339(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def make_tls(d: Path):
    """A test CA and a server certificate for localhost and 127.0.0.1."""
    d.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(a, check=True, capture_output=True, cwd=d)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=cela test CA",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
        "-out", "server.csr")
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "ext.cnf", "-out", "server.pem")
    return d / "ca.pem", d / "server.pem", d / "server.key"


def build_wheel(d: Path, name: str, version: str):
    """A pure-Python wheel whose module says its version."""
    mod = name.replace("-", "_")
    files = {
        f"{mod}/__init__.py": f'VERSION = "{version}"\n'.encode(),
        f"{mod}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{mod}-{version}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: cela-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{mod}-{version}.dist-info/RECORD,,\n"
    files[f"{mod}-{version}.dist-info/RECORD"] = record.encode()
    path = d / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return path


def build_npm_tarball(d: Path, name: str, version: str):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for fname, text in {"package.json": json.dumps({"name": name, "version": version, "main": "index.js"}),
                            "index.js": f"module.exports = {json.dumps(version)};\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo("package/" + fname)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    path = d / f"{name}-{version}.tgz"
    path.write_bytes(buf.getvalue())
    return path


def build_deb(d: Path, name: str, version: str):
    root = d / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share" / name).mkdir(parents=True)
    (root / "usr/share" / name / "hello").write_text(f"{name} {version}\n")
    (root / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: cela tests <t@example.invalid>\n"
        f"Description: a package the cela tests build\n")
    out = d / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(out)], check=True, capture_output=True)
    return out


def build_debian_repo(d: Path, packages):
    """An archive with suite `stable`, component `main`, signed by a fresh gpg key;
    returns (repo dir, keyring path)."""
    repo = d / "repo"
    pool = repo / "pool/main"
    pool.mkdir(parents=True)
    for name, version in packages:
        shutil.copy(build_deb(d, name, version), pool)
    binary = repo / "dists/stable/main/binary-amd64"
    binary.mkdir(parents=True)
    scan = subprocess.run(["dpkg-scanpackages", "--multiversion", "pool"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout
    (binary / "Packages").write_text(scan)
    (binary / "Packages.gz").write_bytes(gzip.compress(scan.encode()))
    lines = ["Origin: cela-test", "Label: cela-test", "Suite: stable", "Codename: stable",
             "Date: " + time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime()), "Architectures: amd64",
             "Components: main", "SHA256:"]
    for f in ("main/binary-amd64/Packages", "main/binary-amd64/Packages.gz"):
        data = (repo / "dists/stable" / f).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {f}")
    (repo / "dists/stable/Release").write_text("\n".join(lines) + "\n")
    home = d / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run(gpg + ["--quick-gen-key", "cela test archive <t@example.invalid>", "ed25519", "sign", "2d"],
                   check=True, capture_output=True)
    subprocess.run(gpg + ["--clearsign", "-o", str(repo / "dists/stable/InRelease"),
                          str(repo / "dists/stable/Release")], check=True, capture_output=True)
    keyring = d / "archive-key.gpg"
    subprocess.run(gpg + ["--export", "-o", str(keyring)], check=True, capture_output=True)
    return repo, keyring


class Registries:
    """Builds the packages and serves all three registries over HTTPS on loopback."""

    def __init__(self, d: Path, young_age_s=3600, old_age_s=30 * DAY):
        d.mkdir(parents=True, exist_ok=True)
        self.dir = d
        self.ca, cert, key = make_tls(d / "tls")
        now = time.time()
        self.counts = {}
        self.lock = threading.Lock()
        # PyPI: celademo 1.0 (old) and 2.0 (young); celaevil 1.0; celabad 1.0, whose
        # index publishes a hash the bytes do not have.
        wheels = d / "wheels"
        wheels.mkdir()
        self.pypi = {}
        for name, version, age in [("celademo", "1.0", old_age_s), ("celademo", "2.0", young_age_s),
                                   ("celaevil", "1.0", old_age_s), ("celabad", "1.0", old_age_s),
                                   ("celabig", "1.0", old_age_s)]:
            w = build_wheel(wheels, name, version)
            if name == "celabig":  # 3 MiB of incompressible padding
                with zipfile.ZipFile(w, "a") as z:
                    z.writestr("celabig/pad.bin", os.urandom(3 << 20))
            data = w.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            if name == "celabad":
                sha = hashlib.sha256(b"something else").hexdigest()
            self.pypi.setdefault(name, []).append(
                {"filename": w.name, "data": data, "sha256": sha, "upload": now - age, "version": version})
        # npm: celademo-js 1.0.0 (old) and 2.0.0 (young, the upstream's `latest`).
        tarballs = d / "npm"
        tarballs.mkdir()
        self.npm = {}
        for name, version, age in [("celademo-js", "1.0.0", old_age_s), ("celademo-js", "2.0.0", young_age_s),
                                   ("celaevil-js", "1.0.0", old_age_s)]:
            t = build_npm_tarball(tarballs, name, version)
            data = t.read_bytes()
            self.npm.setdefault(name, {})[version] = {
                "data": data, "file": t.name, "published": now - age,
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
                "shasum": hashlib.sha1(data).hexdigest()}
        # Debian: cela-hello 1.0 and cela-evil 1.0.
        self.repo, self.keyring = build_debian_repo(d / "debian", [("cela-hello", "1.0"), ("cela-evil", "1.0")])

        registries = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, code, body, ctype="application/octet-stream"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?")[0]
                with registries.lock:
                    registries.counts[path] = registries.counts.get(path, 0) + 1
                base = f"https://{self.headers['Host']}"
                parts = path.strip("/").split("/")
                if parts[0] == "simple" and len(parts) == 2 and parts[1] in registries.pypi:
                    files = [{"filename": f["filename"], "url": f"/files/{f['filename']}",
                              "hashes": {"sha256": f["sha256"]}, "upload-time": rfc3339(f["upload"])}
                             for f in registries.pypi[parts[1]]]
                    doc = {"meta": {"api-version": "1.1"}, "name": parts[1], "files": files,
                           "versions": sorted({f["version"] for f in registries.pypi[parts[1]]})}
                    return self.send(200, json.dumps(doc).encode(), "application/vnd.pypi.simple.v1+json")
                if parts[0] == "files" and len(parts) == 2:
                    for files in registries.pypi.values():
                        for f in files:
                            if f["filename"] == parts[1]:
                                return self.send(200, f["data"])
                if parts[0] == "npm" and len(parts) == 2 and parts[1] in registries.npm:
                    name = parts[1]
                    versions = {v: {"name": name, "version": v,
                                    "dist": {"tarball": f"{base}/npm/{name}/-/{e['file']}",
                                             "integrity": e["integrity"], "shasum": e["shasum"]}}
                                for v, e in registries.npm[name].items()}
                    times = {v: rfc3339(e["published"]) for v, e in registries.npm[name].items()}
                    latest = max(registries.npm[name], key=lambda v: [int(x) for x in v.split(".")])
                    doc = {"name": name, "dist-tags": {"latest": latest}, "versions": versions, "time": times}
                    return self.send(200, json.dumps(doc).encode(), "application/json")
                if parts[0] == "npm" and len(parts) == 4 and parts[2] == "-" and parts[1] in registries.npm:
                    for e in registries.npm[parts[1]].values():
                        if e["file"] == parts[3]:
                            return self.send(200, e["data"])
                if parts[0] == "debian":
                    f = (registries.repo / "/".join(parts[1:])).resolve()
                    if str(f).startswith(str(registries.repo)) and f.is_file():
                        return self.send(200, f.read_bytes())
                return self.send(404, b"not found\n", "text/plain")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def upstreams(self):
        base = f"https://localhost:{self.port}"
        return {"pypi": base + "/simple/", "npm": base + "/npm/", "debian": base + "/debian"}

    def count(self, prefix):
        with self.lock:
            return sum(n for p, n in self.counts.items() if p.startswith(prefix))

    def sha256(self, registry, name, version):
        if registry == "pypi":
            return next(hashlib.sha256(f["data"]).hexdigest() for f in self.pypi[name] if f["version"] == version)
        if registry == "npm":
            return hashlib.sha256(self.npm[name][version]["data"]).hexdigest()
        deb = next(self.repo.glob(f"pool/main/{name}_{version}_*.deb"))
        return hashlib.sha256(deb.read_bytes()).hexdigest()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
