"""SIGHUP reloads the config file (docs/operations.md "Reload"): what may change live
applies to what starts next, the rest is named as needing a restart and keeps running,
a broken file changes nothing, and the daemon and its sessions go on either way."""
import json
import os
import signal
import time

import pytest

from conftest import wait_until
from daemon_util import Daemon

pytestmark = pytest.mark.skipif(not os.path.isdir("/var/lib/cela/templates/base"), reason="needs the base template")

BASE = {"defaults": {"memory_mb": 256}, "maxima": {"memory_mb": 2048}, "logs": {"format": "json", "level": "info"}}


@pytest.fixture
def d():
    daemon = Daemon(config=BASE).start()
    yield daemon
    daemon.close()


def rewrite(daemon, config):
    path = os.path.join(daemon.dir, "config.json")
    with open(path) as f:
        running = json.load(f)
    config = dict(config)
    config["admission"] = running["admission"]  # the test's own ledger, as start wrote it
    with open(path + ".new", "w") as f:
        json.dump(config, f)
    os.rename(path + ".new", path)


def hup(daemon, says):
    """SIGHUP to the daemon this test started (by its pid), then its answer line."""
    seen = daemon.logs().count("cela: reload")
    daemon.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: daemon.logs().count("cela: reload") > seen, timeout=20), daemon.logs()[-2000:]
    line = [ln for ln in daemon.logs().splitlines() if ln.startswith("cela: reload")][-1]
    assert says in line, line
    assert daemon.proc.poll() is None, "SIGHUP stopped the daemon"
    return line


def create(daemon, **limits):
    return daemon.request("POST", "/v1/sessions", {"template": "base", **({"limits": limits} if limits else {})})


def test_defaults_and_maxima_change_live_and_sessions_keep_theirs(d):
    status, before, _ = create(d)
    assert status == 201 and before["limits"]["memory_mb"] == 256, before
    rewrite(d, {**BASE, "defaults": {"memory_mb": 384}, "maxima": {"memory_mb": 512}})
    line = hup(d, "applied defaults, maxima")
    assert "needs a restart" not in line, line
    status, after, _ = create(d)
    assert status == 201 and after["limits"]["memory_mb"] == 384, after
    status, body, _ = create(d, memory_mb=1024)
    assert status == 400 and "maximum of 512" in body["error"]["message"], body
    # The session made before keeps what it was given, and still runs code.
    status, s, _ = d.request("GET", f"/v1/sessions/{before['id']}")
    assert status == 200 and s["limits"]["memory_mb"] == 256 and s["state"] in ("ready", "running"), s
    assert d.run(before["id"], "echo still here")["stdout"] == "still here\n"
    for s in (before, after):
        d.delete(s["id"])


def test_what_needs_a_restart_is_named_and_kept(d):
    rewrite(d, {**BASE, "max_body_bytes": 4096, "stdin_timeout_s": 5})
    line = hup(d, "applied stdin_timeout_s")
    assert "needs a restart (kept as running): max_body_bytes" in line, line
    # Still the running value (1 MiB): an 8 KiB body passes, where 4096 would refuse it.
    status, sess, _ = create(d)
    assert status == 201, sess
    status, r, _ = d.request("POST", f"/v1/sessions/{sess['id']}/run",
                             {"cmd": "echo ${#PAD}", "env": {"PAD": "x" * 8000}})
    assert status == 200 and r["stdout"] == "8000\n", r
    d.delete(sess["id"])
    # Asked again, it is still named (nothing was applied for it).
    assert "max_body_bytes" in hup(d, "needs a restart")


def test_a_broken_file_changes_nothing(d):
    path = os.path.join(d.dir, "config.json")
    with open(path) as f:
        good = f.read()
    with open(path, "w") as f:
        f.write('{"defaults": {"memory_mb": "lots"}')
    hup(d, "refused (the running config stays)")
    with open(path, "w") as f:
        f.write(json.dumps({**json.loads(good), "defaults": {"memory_mb": 1}, "bogus_key": 1}))
    hup(d, "unknown field `bogus_key`")
    status, s, _ = create(d)
    assert status == 201 and s["limits"]["memory_mb"] == 256, s
    d.delete(s["id"])


def test_log_level_changes_live(d):
    def access_lines():
        return sum(1 for ln in d.logs().splitlines() if '"msg":"access"' in ln)
    d.request("GET", "/healthz")
    assert wait_until(lambda: access_lines() >= 1, timeout=5)
    rewrite(d, {**BASE, "logs": {"format": "json", "level": "warn"}})
    hup(d, "applied logs")
    n = access_lines()
    for _ in range(5):
        d.request("GET", "/healthz")
    time.sleep(0.3)
    assert access_lines() == n, "info lines were written at level warn"
    rewrite(d, BASE)
    hup(d, "applied logs")
    d.request("GET", "/healthz")
    assert wait_until(lambda: access_lines() > n, timeout=5)
