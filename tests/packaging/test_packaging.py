"""`make install` and `make deb` (docs/operations.md "Install and run as a service"):
what lands where, that the unit and the default config work with the installed binary,
and that the package depends on runtime libraries only. Runs against the build
directory given as CELA_BUILD_DIR (ctest sets it)."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("CELA_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture
def tmp():
    d = Path(tempfile.mkdtemp(prefix="cela-pkg-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def unit_exec_lines(unit):
    return [line for line in unit.read_text().splitlines() if line.startswith(("ExecStart=", "ExecStartPre="))]


def test_install_under_a_prefix_and_destdir(tmp):
    dest = tmp / "root"
    r = run("cmake", "--install", BUILD, "--prefix", "/opt/cela", env=dict(os.environ, DESTDIR=str(dest)))
    assert r.returncode == 0, r.stdout + r.stderr
    root = dest / "opt/cela"
    binary, unit, config = root / "bin/cela", root / "lib/systemd/system/cela.service", root / "etc/cela/config.json"
    assert os.access(binary, os.X_OK) and unit.is_file() and config.is_file()
    assert (root / "share/cela/templates/code-interpreter/template.json").is_file()
    assert (root / "share/doc/cela/operations.md").is_file()
    # The unit names this install's binary and config.
    assert unit_exec_lines(unit) == [
        "ExecStartPre=/opt/cela/bin/cela serve --check-config --config /opt/cela/etc/cela/config.json",
        "ExecStart=/opt/cela/bin/cela serve --config /opt/cela/etc/cela/config.json"]
    # The default config is one the installed binary accepts.
    r = run(binary, "serve", "--check-config", "--config", config)
    assert r.returncode == 0 and "config ok" in r.stdout, r.stdout + r.stderr
    # A second install keeps the operator's edits.
    config.write_text('{"max_sessions": 7}\n')
    r = run("cmake", "--install", BUILD, "--prefix", "/opt/cela", env=dict(os.environ, DESTDIR=str(dest)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert config.read_text() == '{"max_sessions": 7}\n'


def test_check_config_refuses_what_serve_would_refuse(tmp):
    cela = BUILD / "cela"
    cases = {'{"listen": "nowhere"}': "bad --listen",
             '{"max_sesions": 3}': "unknown field `max_sesions`",
             '{"egress": {"ca_file": "/nonexistent/ca.pem"}}': "egress.ca_file /nonexistent/ca.pem",
             '{"max_sessions": "ten"}': "max_sessions"}
    for text, says in cases.items():
        f = tmp / "c.json"
        f.write_text(text)
        r = run(cela, "serve", "--check-config", "--config", f)
        assert r.returncode == 2 and says in r.stderr, (text, r.stdout, r.stderr)
    r = run(cela, "serve", "--check-config", "--listen", "127.0.0.1:9")
    assert r.returncode == 0 and "listen 127.0.0.1:9" in r.stdout, r.stdout + r.stderr


def test_deb_from_the_build_directory(tmp):
    r = run("cpack", "-G", "DEB", "-B", tmp / "out", cwd=BUILD)
    assert r.returncode == 0, r.stdout + r.stderr
    [deb] = list((tmp / "out").glob("cela_*_amd64.deb"))
    info = run("dpkg-deb", "-f", deb, "Package", "Depends").stdout
    assert "Package: cela" in info, info
    depends = [d.strip().split()[0] for d in info.split("Depends:", 1)[1].split(",")]
    assert "libc6" in depends and "libarchive13" in depends, depends
    assert not [d for d in depends if d.endswith("-dev")], depends
    files = run("dpkg-deb", "-c", deb).stdout
    for path in ("./usr/bin/cela", "./usr/lib/systemd/system/cela.service", "./etc/cela/config.json"):
        assert path in files, files
    ctl = tmp / "ctl"
    assert run("dpkg-deb", "-e", deb, ctl).returncode == 0
    assert (ctl / "conffiles").read_text().split() == ["/etc/cela/config.json"]
    x = tmp / "x"
    assert run("dpkg-deb", "-x", deb, x).returncode == 0
    unit = x / "usr/lib/systemd/system/cela.service"
    assert unit_exec_lines(unit) == [
        "ExecStartPre=/usr/bin/cela serve --check-config --config /etc/cela/config.json",
        "ExecStart=/usr/bin/cela serve --config /etc/cela/config.json"]
    r = run(x / "usr/bin/cela", "serve", "--check-config", "--config", x / "etc/cela/config.json")
    assert r.returncode == 0, r.stdout + r.stderr
    # systemd itself accepts the unit (pointed at the extracted binary: this host has
    # no /usr/bin/cela). systemd-analyze is part of Debian's systemd package.
    if shutil.which("systemd-analyze"):
        local = tmp / "cela.service"
        local.write_text(unit.read_text().replace("/usr/bin/cela", str(x / "usr/bin/cela")))
        r = run("systemd-analyze", "verify", local)
        assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr
