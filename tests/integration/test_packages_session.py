"""Governed package installs from inside real sessions of the base template: pip, npm
and apt-get reach the daemon's package gateway (http://packages.cela.internal through
the session's 127.0.0.1:3128 door, preset by `packages` at create), which fetches from
registries this test serves on the host's loopback over HTTPS (a test CA the daemon
trusts through packages.ca_file; the Debian archive is signed by a throwaway key given
as packages.debian_keyring).

Attacks: a package no rule allows, a version inside the cooldown, a lock whose hash
does not match, `off` mode (must fail at once with its message), offline mode without
the package cached; and the records of GET /v1/sessions/{id}/packages."""
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from daemon_util import Daemon  # noqa: E402
from package_upstreams import Registries  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/var/lib/cela/templates/base"), reason="needs the base template")

ALLOW = ["pypi:celademo", "pypi:celabad", "npm:celademo-js", "debian:cela-hello"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    registries = Registries(tmp_path_factory.mktemp("registries"))
    d = Daemon(config={"packages": {"upstreams": registries.upstreams(), "ca_file": str(registries.ca),
                                    "debian_suites": ["stable main"], "debian_keyring": str(registries.keyring)}})
    d.start()
    yield d, registries
    d.close()
    registries.close()


def session(daemon, **packages):
    status, s, _ = daemon.request("POST", "/v1/sessions",
                                  {"template": "base", "limits": {"memory_mb": 512}, "packages": packages})
    assert status == 201, s
    return s["id"]


def run(daemon, sid, cmd, root=False, timeout=180):
    status, r, _ = daemon.request("POST", f"/v1/sessions/{sid}/run",
                                  {"cmd": cmd, "timeout_s": timeout, **({"user": "root"} if root else {})},
                                  timeout=timeout + 30)
    assert status == 200, r
    return r


def installs(daemon, sid):
    status, body, _ = daemon.request("GET", f"/v1/sessions/{sid}/packages")
    assert status == 200, body
    return body["installs"]


PIP = "pip install --no-cache-dir --user --break-system-packages --disable-pip-version-check "


def prom_installs(daemon, result):
    """cela_package_installs_total{ecosystem="pypi", result=…} summed over tenants, parsed
    by a real Prometheus parser."""
    from prometheus_client.parser import text_string_to_metric_families
    _, text, _ = daemon.request("GET", "/metrics", raw=True)
    return sum(s.value for f in text_string_to_metric_families(text.decode()) for s in f.samples
               if s.name == "cela_package_installs_total" and s.labels.get("ecosystem") == "pypi"
               and s.labels.get("result") == result)


def test_pip_installs_inside_and_a_second_session_is_served_from_the_cache(world):
    daemon, registries = world
    counted = {r: prom_installs(daemon, r) for r in ("allowed", "cache_hit")}
    sid = session(daemon, mode="gateway", allow=ALLOW, min_age_days=2)
    try:
        r = run(daemon, sid, PIP + "celademo && python3 -c 'import celademo; print(celademo.VERSION)'")
        assert r["exit_code"] == 0, r
        assert r["stdout"].strip().endswith("1.0"), r  # 2.0 is inside the cooldown
        rec = [i for i in installs(daemon, sid) if i["verdict"] == "allowed"]
        assert rec and (rec[-1]["name"], rec[-1]["version"], rec[-1]["cache"]) == ("celademo", "1.0", "miss")
        assert rec[-1]["sha256"] == registries.sha256("pypi", "celademo", "1.0")
        status, audit, _ = daemon.request("GET", f"/v1/audit?session={sid}&kind=package.install")
        assert status == 200, audit
        assert any(a["data"]["name"] == "celademo" and a["data"]["version"] == "1.0" and
                   a["data"]["verdict"] == "allowed" for a in audit["records"]), audit
    finally:
        daemon.delete(sid)
    fetched = registries.count("/files/celademo-1.0")
    second = session(daemon, mode="gateway", allow=ALLOW, min_age_days=2)
    try:
        r = run(daemon, second, PIP + "celademo")
        assert r["exit_code"] == 0, r
        assert registries.count("/files/celademo-1.0") == fetched
        assert [i for i in installs(daemon, second) if i["verdict"] == "allowed"][-1]["cache"] == "hit"
    finally:
        daemon.delete(second)
    # The records outlive the session.
    assert installs(daemon, sid)
    # Prometheus counts the fetch that went upstream and the one served from the cache.
    assert prom_installs(daemon, "allowed") - counted["allowed"] >= 1
    assert prom_installs(daemon, "cache_hit") - counted["cache_hit"] >= 1


def test_a_reset_session_still_installs_through_the_gateway(world):
    """A reset boots the template again: the package manager settings and the door come
    back, so pip still goes through the gateway (and is refused nothing it was allowed)."""
    daemon, registries = world
    sid = session(daemon, mode="gateway", allow=ALLOW, min_age_days=2)
    try:
        status, info, _ = daemon.request("POST", f"/v1/sessions/{sid}/reset")
        assert status == 200 and info["resets"] == 1, info
        r = run(daemon, sid, PIP + "celademo && python3 -c 'import celademo; print(celademo.VERSION)'")
        assert r["exit_code"] == 0, r
        assert r["stdout"].strip().endswith("1.0"), r
    finally:
        daemon.delete(sid)


def test_refusals_inside_say_why(world):
    daemon, registries = world
    sid = session(daemon, mode="gateway", allow=ALLOW, min_age_days=2)
    try:
        r = run(daemon, sid, PIP + "celaevil")
        assert r["exit_code"] != 0 and "is not allowed by the session's package rules" in r["stdout"] + r["stderr"], r
        r = run(daemon, sid, PIP + "celademo==2.0")
        assert r["exit_code"] != 0, r
        r = run(daemon, sid, "curl -sS -o /dev/null -w '%{http_code}' "
                             "http://packages.cela.internal/pypi/files/celademo/celademo-2.0-py3-none-any.whl")
        assert r["stdout"] == "403", r
        r = run(daemon, sid, PIP + "celabad")
        assert r["exit_code"] != 0 and "do not match the registry's sha256" in r["stdout"] + r["stderr"], r
        recs = installs(daemon, sid)
        assert {(i["name"], i["rule"]) for i in recs if i["verdict"] == "denied"} >= {
            ("celaevil", "allow"), ("celademo", "min_age_days 2"), ("celabad", "verify")}
    finally:
        daemon.delete(sid)
    sid = session(daemon, mode="gateway", lock={"pypi:celademo==1.0": "sha256:" + "0" * 64})
    try:
        r = run(daemon, sid, PIP + "celademo==1.0")
        assert r["exit_code"] != 0 and "sha256 mismatch" in r["stdout"] + r["stderr"], r
    finally:
        daemon.delete(sid)


def test_npm_installs_inside(world):
    daemon, _ = world
    sid = session(daemon, mode="gateway", allow=ALLOW, min_age_days=2)
    try:
        r = run(daemon, sid, "mkdir -p /tmp/app && cd /tmp/app && npm install celademo-js && "
                             "node -e 'console.log(require(\"celademo-js\"))'")
        assert r["exit_code"] == 0, r
        assert r["stdout"].strip().splitlines()[-1] == "1.0.0", r
        r = run(daemon, sid, "cd /tmp/app && npm install celaevil-js")
        assert r["exit_code"] != 0 and "is not allowed by the session's package rules" in r["stdout"] + r["stderr"], r
    finally:
        daemon.delete(sid)


def test_apt_get_installs_inside(world):
    daemon, _ = world
    sid = session(daemon, mode="gateway", allow=ALLOW)
    try:
        r = run(daemon, sid, "apt-get update && apt-get install -y cela-hello && cat /usr/share/cela-hello/hello",
                root=True)
        assert r["exit_code"] == 0, r
        assert r["stdout"].strip().endswith("cela-hello 1.0"), r
        r = run(daemon, sid, "apt-get install -y cela-evil", root=True)
        assert r["exit_code"] != 0 and "debian:cela-evil 1.0 is not allowed" in r["stdout"] + r["stderr"], r
    finally:
        daemon.delete(sid)


def test_off_fails_at_once_with_its_message(world):
    daemon, registries = world
    sid = session(daemon, mode="off")
    try:
        before = sum(registries.counts.values())
        began = time.monotonic()
        for cmd, root in ((PIP + "celademo", False), ("cd /tmp && npm install celademo-js", False),
                          ("apt-get update", True)):
            r = run(daemon, sid, cmd, root=root)
            assert "package installs are disabled by policy" in r["stdout"] + r["stderr"], r
        assert time.monotonic() - began < 45
        assert sum(registries.counts.values()) == before
    finally:
        daemon.delete(sid)


def test_offline_serves_the_cache_only(world):
    daemon, registries = world
    warm = session(daemon, mode="gateway", allow=ALLOW)
    try:
        assert run(daemon, warm, PIP + "celademo==1.0")["exit_code"] == 0
    finally:
        daemon.delete(warm)
    sid = session(daemon, mode="offline", allow=["pypi:*"])
    try:
        before = sum(registries.counts.values())
        r = run(daemon, sid, PIP + "celademo==1.0")
        assert r["exit_code"] == 0, r
        r = run(daemon, sid, PIP + "celaevil")
        assert r["exit_code"] != 0, r
        assert sum(registries.counts.values()) == before, "offline mode asked the upstream"
    finally:
        daemon.delete(sid)


def test_packages_beyond_the_ceiling_are_refused_at_create(world):
    daemon, _ = world
    status, body, _ = daemon.request("POST", "/v1/sessions", {"template": "base", "packages": {"mode": "sometimes"}})
    assert status == 400, body
    status, body, _ = daemon.request("POST", "/v1/sessions",
                                     {"template": "base", "packages": {"mode": "gateway", "allow": ["cargo:serde"]}})
    assert status == 400, body
