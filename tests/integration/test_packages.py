"""The package gateway (src/net/package_gateway.h) with the real clients' protocols:
real pip, npm and apt-get on the host talk to the gateway, which fetches from
registries this test serves on loopback over HTTPS (a test CA the gateway trusts
through `packages.ca_file`). tests/gateway_harness stands in for the sessions' egress
door: one loopback port per session, each with the policy a create request would give.

What is attacked: a package no rule allows, a version inside the release cooldown
(hidden from metadata, refused by name), bytes that do not match the registry's hash,
a lock whose hash does not match, the per-session download cap, offline mode without
the package in the cache, and `off` mode, which must fail at once with its message."""
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from package_upstreams import Registries  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HARNESS = Path(os.environ.get("CELA_BIN", str(ROOT / "build" / "cela"))).parent / "gateway_harness"
ALLOW = ["pypi:celademo", "pypi:celabad", "pypi:celabig", "npm:celademo-js", "debian:cela-hello"]


class Harness:
    def __init__(self, tmp: Path, registries: Registries, sessions: dict, ceiling=None):
        self.state = tmp / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        packages = {"upstreams": registries.upstreams(), "ca_file": str(registries.ca),
                    "cache_dir": str(tmp / "cache"), **(ceiling or {})}
        cfg = tmp / "harness.json"
        cfg.write_text(json.dumps({"state_dir": str(self.state), "packages": packages, "sessions": sessions}))
        self.proc = subprocess.Popen([str(HARNESS), str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.ports = {}
        for line in self.proc.stdout:
            words = line.split()
            if words and words[0] == "port":
                self.ports[words[1]] = int(words[2])
            if words == ["ready"]:
                break
        assert self.ports, self.proc.stderr.read()

    def url(self, session, path=""):
        return f"http://127.0.0.1:{self.ports[session]}{path}"

    def get(self, session, path, accept=None):
        req = urllib.request.Request(self.url(session, path), headers={"Accept": accept} if accept else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.reason, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.reason, e.read()

    def installs(self, session=None):
        path = self.state / "installs.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [r for r in rows if session is None or r["session"] == session]

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not HARNESS.exists():
        pytest.skip(f"{HARNESS} is not built")
    tmp = tmp_path_factory.mktemp("packages")
    registries = Registries(tmp / "upstream")
    gw = {"mode": "gateway", "allow": ALLOW, "min_age_days": 2}
    sessions = {
        "s-gw": gw, "s-gw2": gw,
        "s-lock": {"mode": "gateway", "lock": {"pypi:celademo==1.0": "sha256:" + "0" * 64}},
        "s-lockok": {"mode": "gateway",
                     "lock": {"pypi:celademo==1.0": "sha256:" + registries.sha256("pypi", "celademo", "1.0")}},
        "s-cap": {"mode": "gateway", "allow": ALLOW, "max_download_mb": 1},
        "s-offline": {"mode": "offline", "allow": ["pypi:*", "npm:*", "debian:*"], "min_age_days": 2},
        "s-off": {"mode": "off"},
        "s-deny": {"mode": "gateway", "deny": ["pypi:celademo==1.*", "npm:celademo-js", "debian:cela-evil"]},
    }
    harness = Harness(tmp, registries, sessions)
    yield harness, registries, tmp
    harness.close()
    registries.close()


def pip_download(harness, session, spec, dest):
    env = {"PATH": os.environ["PATH"], "HOME": str(dest), "PIP_CONFIG_FILE": os.devnull}
    return subprocess.run([sys.executable, "-m", "pip", "download", "--no-cache-dir", "--no-deps", "--retries", "0",
                           "--disable-pip-version-check", "-d", str(dest), "--index-url",
                           harness.url(session, "/pypi/simple/"), spec],
                          capture_output=True, text=True, timeout=120, env=env)


def npm_install(harness, session, spec, dest):
    dest.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(dest)}
    return subprocess.run(["npm", "install", "--prefix", str(dest), "--registry", harness.url(session, "/npm/"),
                           "--userconfig", str(dest / "npmrc"), "--cache", str(dest / "cache"), "--no-audit",
                           "--no-fund", "--fetch-retries", "0", spec],
                          capture_output=True, text=True, timeout=120, env=env)


def apt(harness, registries, session, dest, *args):
    root = dest / "apt"
    for d in ("state/lists/partial", "cache/archives/partial", "parts", "sources.d", "prefs"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "status").touch()
    (root / "sources.list").write_text(
        f"deb [signed-by={registries.keyring}] {harness.url(session, '/debian')} stable main\n")
    opts = [f"-oDir::State={root}/state", f"-oDir::State::status={root}/status", f"-oDir::Cache={root}/cache",
            f"-oDir::Etc::SourceList={root}/sources.list", f"-oDir::Etc::SourceParts={root}/sources.d",
            f"-oDir::Etc::Parts={root}/parts", f"-oDir::Etc::Preferences={root}/prefs",
            f"-oDir::Etc::PreferencesParts={root}/prefs", "-oAPT::Sandbox::User=root", "-oDebug::NoLocking=1",
            "-oAPT::Architecture=amd64", "-oAcquire::Retries=0", "-oAcquire::Languages=none"]
    env = {"PATH": os.environ["PATH"], "APT_CONFIG": os.devnull}
    return subprocess.run(["apt-get", *opts, *args], capture_output=True, text=True, timeout=120, cwd=dest, env=env)


def test_pip_installs_allowed_version_and_second_session_hits_cache(world, tmp_path):
    harness, registries, _ = world
    r = pip_download(harness, "s-gw", "celademo", tmp_path / "a")
    assert r.returncode == 0, r.stdout + r.stderr
    # 2.0 is inside the two-day cooldown: pip sees only 1.0.
    assert [p.name for p in (tmp_path / "a").iterdir() if p.suffix == ".whl"] == ["celademo-1.0-py3-none-any.whl"]
    fetched = registries.count("/files/celademo-1.0")
    assert fetched == 1
    first = [i for i in harness.installs("s-gw") if i["name"] == "celademo" and i["verdict"] == "allowed"]
    assert first and first[-1]["cache"] == "miss" and first[-1]["version"] == "1.0"
    assert first[-1]["sha256"] == registries.sha256("pypi", "celademo", "1.0")
    assert first[-1]["registry"].startswith("https://localhost:")
    r = pip_download(harness, "s-gw2", "celademo", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert registries.count("/files/celademo-1.0") == fetched, "the second session went upstream"
    second = [i for i in harness.installs("s-gw2") if i["name"] == "celademo" and i["verdict"] == "allowed"]
    assert second[-1]["cache"] == "hit"
    assert (tmp_path / "b" / "celademo-1.0-py3-none-any.whl").read_bytes() == \
        (tmp_path / "a" / "celademo-1.0-py3-none-any.whl").read_bytes()


def test_cooldown_hides_young_versions_and_refuses_them_by_name(world):
    harness, _, _ = world
    for accept in ("application/vnd.pypi.simple.v1+json", "text/html"):
        status, _, body = harness.get("s-gw", "/pypi/simple/celademo/", accept)
        assert status == 200
        assert b"celademo-1.0-" in body and b"celademo-2.0" not in body
    status, reason, body = harness.get("s-gw", "/pypi/files/celademo/celademo-2.0-py3-none-any.whl")
    assert status == 403
    assert "release cooldown" in reason and "min_age_days" in json.loads(body)["error"]
    rec = harness.installs("s-gw")[-1]
    assert (rec["name"], rec["version"], rec["verdict"], rec["rule"]) == ("celademo", "2.0", "denied", "min_age_days 2")


def test_pip_unlisted_package_is_refused_with_the_rule(world, tmp_path):
    harness, registries, _ = world
    before = registries.count("/simple/celaevil")
    r = pip_download(harness, "s-gw", "celaevil", tmp_path)
    assert r.returncode != 0
    assert "is not allowed by the session's package rules" in r.stdout + r.stderr
    assert registries.count("/simple/celaevil") == before, "a refused name reached the upstream"
    rec = [i for i in harness.installs("s-gw") if i["name"] == "celaevil"][-1]
    assert rec["verdict"] == "denied" and rec["rule"] == "allow"


def test_pip_bytes_that_do_not_match_the_index_hash_are_refused_and_not_cached(world, tmp_path):
    harness, _, tmp = world
    r = pip_download(harness, "s-gw", "celabad", tmp_path)
    assert r.returncode != 0
    assert "do not match the registry's sha256" in r.stdout + r.stderr
    rec = [i for i in harness.installs("s-gw") if i["name"] == "celabad"][-1]
    assert rec["verdict"] == "denied" and rec["rule"] == "verify"
    blobs = [p.name for p in (tmp / "cache" / "blobs").rglob("*") if p.is_file()]
    assert rec["sha256"] not in blobs


def test_lock_mismatch_and_unlocked_packages_are_refused(world, tmp_path):
    harness, _, _ = world
    r = pip_download(harness, "s-lock", "celademo==1.0", tmp_path / "a")
    assert r.returncode != 0 and "sha256 mismatch" in r.stdout + r.stderr
    r = pip_download(harness, "s-lock", "celaevil", tmp_path / "b")
    assert r.returncode != 0 and "is not in the session's lock" in r.stdout + r.stderr
    r = pip_download(harness, "s-lockok", "celademo==1.0", tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [i for i in harness.installs("s-lockok") if i["verdict"] == "allowed"][-1]["rule"].startswith("lock ")


def test_deny_wins_over_everything(world, tmp_path):
    harness, _, _ = world
    r = pip_download(harness, "s-deny", "celademo==1.0", tmp_path)
    assert r.returncode != 0
    # 1.* is denied, 2.0 is allowed (no cooldown in this session)
    r = pip_download(harness, "s-deny", "celademo", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "celademo-2.0-py3-none-any.whl").exists()


def test_download_cap_refuses_past_the_session_budget(world, tmp_path):
    harness, _, _ = world
    r = pip_download(harness, "s-cap", "celabig", tmp_path)
    assert r.returncode != 0 and "download cap" in r.stdout + r.stderr
    assert [i for i in harness.installs("s-cap") if i["name"] == "celabig"][-1]["rule"] == "max_download_mb"


def test_offline_serves_the_cache_only(world, tmp_path):
    harness, registries, _ = world
    warm = pip_download(harness, "s-gw", "celademo", tmp_path / "warm")
    assert warm.returncode == 0
    upstream_before = sum(registries.counts.values())
    r = pip_download(harness, "s-offline", "celademo", tmp_path / "a")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sum(registries.counts.values()) == upstream_before, "offline mode asked the upstream"
    assert harness.installs("s-offline")[-1]["cache"] == "hit"
    status, reason, _ = harness.get("s-offline", "/pypi/simple/celanever/")
    assert status == 404 and "not in the package cache (packages.mode offline)" in reason
    assert sum(registries.counts.values()) == upstream_before


def test_off_fails_at_once_with_its_message(world, tmp_path):
    harness, registries, _ = world
    before = sum(registries.counts.values())
    began = time.monotonic()
    r = pip_download(harness, "s-off", "celademo", tmp_path / "pip")
    assert r.returncode != 0 and "package installs are disabled by policy" in r.stdout + r.stderr
    n = npm_install(harness, "s-off", "celademo-js", tmp_path / "npm")
    assert n.returncode != 0 and "package installs are disabled by policy" in n.stdout + n.stderr
    u = apt(harness, registries, "s-off", tmp_path, "update")
    assert "package installs are disabled by policy" in u.stdout + u.stderr
    assert time.monotonic() - began < 30
    assert sum(registries.counts.values()) == before


def test_npm_installs_through_the_gateway(world, tmp_path):
    harness, registries, _ = world
    r = npm_install(harness, "s-gw", "celademo-js", tmp_path / "a")
    assert r.returncode == 0, r.stdout + r.stderr
    installed = json.loads((tmp_path / "a/node_modules/celademo-js/package.json").read_text())
    assert installed["version"] == "1.0.0"  # 2.0.0 is upstream's latest, inside the cooldown
    status, _, body = harness.get("s-gw", "/npm/celademo-js")
    doc = json.loads(body)
    assert list(doc["versions"]) == ["1.0.0"] and doc["dist-tags"]["latest"] == "1.0.0"
    assert "2.0.0" not in doc["time"]
    status, reason, _ = harness.get("s-gw", "/npm/celademo-js/-/celademo-js-2.0.0.tgz")
    assert status == 403 and "release cooldown" in reason
    fetched = registries.count("/npm/celademo-js/-/")
    r = npm_install(harness, "s-gw2", "celademo-js", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert registries.count("/npm/celademo-js/-/") == fetched
    assert [i for i in harness.installs("s-gw2") if i["manager"] == "npm"][-1]["cache"] == "hit"


def test_npm_refusals_say_why(world, tmp_path):
    harness, _, _ = world
    r = npm_install(harness, "s-gw", "celaevil-js", tmp_path / "a")
    assert r.returncode != 0 and "is not allowed by the session's package rules" in r.stdout + r.stderr
    r = npm_install(harness, "s-deny", "celademo-js", tmp_path / "b")
    assert r.returncode != 0 and "denied by policy (deny npm:celademo-js)" in r.stdout + r.stderr


def test_apt_installs_through_the_gateway(world, tmp_path):
    harness, registries, _ = world
    u = apt(harness, registries, "s-gw", tmp_path, "update")
    assert u.returncode == 0, u.stdout + u.stderr
    d = apt(harness, registries, "s-gw", tmp_path, "download", "cela-hello")
    assert d.returncode == 0, d.stdout + d.stderr
    deb = tmp_path / "cela-hello_1.0_all.deb"
    assert hashlib.sha256(deb.read_bytes()).hexdigest() == registries.sha256("debian", "cela-hello", "1.0")
    rec = [i for i in harness.installs("s-gw") if i["manager"] == "debian"][-1]
    assert (rec["name"], rec["version"], rec["verdict"]) == ("cela-hello", "1.0", "allowed")
    e = apt(harness, registries, "s-gw", tmp_path, "download", "cela-evil")
    assert e.returncode != 0 and "debian:cela-evil 1.0 is not allowed" in e.stdout + e.stderr
    # A second session: the pool file comes from the cache.
    fetched = registries.count("/debian/pool/")
    (tmp_path / "again").mkdir()
    assert apt(harness, registries, "s-gw2", tmp_path / "again", "update").returncode == 0
    d = apt(harness, registries, "s-gw2", tmp_path / "again", "download", "cela-hello")
    assert d.returncode == 0, d.stdout + d.stderr
    assert registries.count("/debian/pool/") == fetched
    assert [i for i in harness.installs("s-gw2") if i["manager"] == "debian"][-1]["cache"] == "hit"


def test_paths_cannot_leave_the_registry(world):
    harness, registries, _ = world
    before = sum(registries.counts.values())
    for path in ("/debian/../simple/celaevil/", "/debian/dists/%2e%2e/%2e%2e/simple/celaevil/",
                 "/npm/..%2fsimple%2fcelaevil", "/pypi/files/celademo/..%2f..%2fsimple"):
        status, _, _ = harness.get("s-gw", path)
        assert status in (400, 404), path
    assert sum(registries.counts.values()) == before
