"""Templates through a real daemon: listing with versions, snapshots of sessions, removal
of versions (409 while in use), tenant scoping, builds from steps and from a Dockerfile
(with a cached second build), and OCI image import.

The daemon gets a private template store (a temp dir) whose `base` is a symlink to the
host's built base template, so everything the tests create is removed with the temp dir.
"""
import base64
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from conftest import CELA
from daemon_util import Daemon

BASE = Path("/var/lib/cela/templates/base")
LIMITS = {"memory_mb": 256}

pytestmark = pytest.mark.skipif(not (BASE / "current").exists(), reason="the base template is not built")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates") / "store"
    root.mkdir(mode=0o700)
    (root / "base").symlink_to(BASE)
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(store):
    d = Daemon(config={"templates_dir": str(store)})
    d.start()
    try:
        yield d
    finally:
        d.close()


@pytest.fixture(scope="module")
def other(daemon):
    """A second tenant: (key, call) where call(method, path, body) goes over TCP with its key."""
    status, t, _ = daemon.request("POST", "/v1/tenants", {"name": f"tpl-other-{os.urandom(3).hex()}"})
    assert status == 201, t
    status, k, _ = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    assert status == 201, k

    def call(method, path, body=None, **kw):
        return daemon.request(method, path, body, tcp=True, key=k["key"], **kw)

    return call


def session(daemon, template="base", call=None):
    call = call or daemon.request
    status, s, _ = call("POST", "/v1/sessions", {"template": template, "limits": LIMITS})
    assert status == 201, s
    return s


def run(daemon, sid, cmd, user="user", call=None):
    call = call or daemon.request
    status, r, _ = call("POST", f"/v1/sessions/{sid}/run", {"cmd": cmd, "user": user})
    assert status == 200, r
    return r


def snapshot(daemon, sid, name, call=None):
    call = call or daemon.request
    return call("POST", f"/v1/sessions/{sid}/snapshot", {"template": name})


def test_list_and_versions_of_the_shared_base(daemon):
    status, body, _ = daemon.request("GET", "/v1/templates")
    assert status == 200, body
    base = next(t for t in body["templates"] if t["name"] == "base")
    assert base["shared"] and base["current"]
    assert base["user"] == {"name": "user", "uid": 1000, "gid": 1000, "home": "/home/user"}
    assert base["digest"].startswith("sha256:") and base["built_at"] and len(base["layers"]) == 1
    status, one, _ = daemon.request("GET", "/v1/templates/base")
    assert status == 200, one
    assert one["shared"] and one["current"] == base["version"]
    assert any(v["version"] == base["version"] and v["current"] for v in one["versions"])
    status, err, _ = daemon.request("GET", "/v1/templates/no-such-template")
    assert status == 404, err


def test_snapshot_then_a_new_session_sees_the_files(daemon):
    s = session(daemon)
    sid = s["id"]
    try:
        run(daemon, sid, "mkdir -p ~/work && echo hello-snapshot > ~/work/note && ln -s note ~/work/link && "
                         "mkfifo ~/work/fifo && (sleep 1000 >/dev/null 2>&1 &)")
        # A file of the base layer removed: the snapshot records the deletion.
        run(daemon, sid, "rm /etc/debian_version && echo changed > /etc/hostname", user="root")
        status, snap, _ = snapshot(daemon, sid, "snap1")
        assert status == 201, snap
        assert snap["template"].startswith("snap1@") and snap["processes_kept"] is False
        assert "not checkpointed" in snap["note"]
        assert snap["parent"].startswith("base@") and snap["source"] == "snapshot"
        assert not snap["shared"] and len(snap["layers"]) == 2
        assert snap["layer_size_bytes"] >= len("hello-snapshot\n")
        # The snapshotted session was thawed: it runs on.
        assert run(daemon, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        daemon.delete(sid)
    t = session(daemon, template=snap["template"])
    try:
        assert t["template"] == snap["template"]
        r = run(daemon, t["id"], "cat ~/work/note; readlink ~/work/link; test -p ~/work/fifo && echo fifo; "
                                 "stat -c %U ~/work/note; test -e /etc/debian_version || echo gone; "
                                 "cat /etc/hostname; pgrep -x sleep || echo no-sleep")
        assert r["stdout"] == "hello-snapshot\nnote\nfifo\nuser\ngone\nchanged\nno-sleep\n", r
        # By name alone: the current version.
        u = session(daemon, template="snap1")
        daemon.delete(u["id"])
        assert u["template"] == snap["template"]
    finally:
        daemon.delete(t["id"])


def test_snapshot_of_a_snapshot_stacks_and_keeps_deletions(daemon):
    s = session(daemon)
    try:
        run(daemon, s["id"], "echo one > ~/a && echo two > ~/b")
        status, first, _ = snapshot(daemon, s["id"], "stack")
        assert status == 201, first
    finally:
        daemon.delete(s["id"])
    s = session(daemon, template=first["template"])
    try:
        run(daemon, s["id"], "rm ~/a && echo three > ~/c")
        status, second, _ = snapshot(daemon, s["id"], "stack")
        assert status == 201, second
        assert len(second["layers"]) == 3 and second["parent"] == first["template"]
    finally:
        daemon.delete(s["id"])
    s = session(daemon, template="stack")
    try:
        assert run(daemon, s["id"], "ls ~")["stdout"] == "b\nc\n"
    finally:
        daemon.delete(s["id"])
    status, t, _ = daemon.request("GET", "/v1/templates/stack")
    assert status == 200 and [v["version"] for v in t["versions"]] == [first["version"], second["version"]]
    assert t["current"] == second["version"] and not t["shared"]


def test_version_removal_and_409_while_in_use(daemon, store):
    s = session(daemon)
    try:
        run(daemon, s["id"], "echo v > ~/v")
        status, v1, _ = snapshot(daemon, s["id"], "removable")
        assert status == 201, v1
        status, v2, _ = snapshot(daemon, s["id"], "removable")
        assert status == 201, v2
    finally:
        daemon.delete(s["id"])
    user = session(daemon, template=v1["template"])
    try:
        status, err, _ = daemon.request("DELETE", f"/v1/templates/removable/versions/{v1['version']}")
        assert status == 409 and err["error"]["code"] == "conflict", err
        status, ok, _ = daemon.request("DELETE", f"/v1/templates/removable/versions/{v2['version']}")
        assert status == 200 and ok["deleted"], ok
        status, t, _ = daemon.request("GET", "/v1/templates/removable")
        assert [v["version"] for v in t["versions"]] == [v1["version"]] and t["current"] == v1["version"]
        # The session on v1 still runs.
        assert run(daemon, user["id"], "cat ~/v")["stdout"] == "v\n"
    finally:
        daemon.delete(user["id"])
    status, ok, _ = daemon.request("DELETE", f"/v1/templates/removable/versions/{v1['version']}")
    assert status == 200, ok
    status, err, _ = daemon.request("GET", "/v1/templates/removable")
    assert status == 404, err
    status, err, _ = daemon.request("POST", "/v1/sessions", {"template": v1["template"], "limits": LIMITS})
    assert status == 400, err
    # The layers no version refers to are gone from the store (the other snapshots' stay).
    status, t, _ = daemon.request("GET", "/v1/templates")
    tenant_dirs = list((store / ".tenants").iterdir())
    assert len(tenant_dirs) == 1
    layers = {p.name for p in (tenant_dirs[0] / ".layers").iterdir() if not p.name.startswith(".")}
    assert v1["layer_digest"][7:] not in layers and v2["layer_digest"][7:] not in layers
    # Shared templates are read-only.
    base_version = next(x for x in t["templates"] if x["name"] == "base")["version"]
    status, err, _ = daemon.request("DELETE", f"/v1/templates/base/versions/{base_version}")
    assert status == 403, err


def test_tenant_scoping(daemon, other):
    s = session(daemon)
    try:
        run(daemon, s["id"], "echo secret > ~/mine")
        status, snap, _ = snapshot(daemon, s["id"], "private-one")
        assert status == 201, snap
    finally:
        daemon.delete(s["id"])
    status, listing, _ = other("GET", "/v1/templates")
    assert status == 200
    names = {t["name"] for t in listing["templates"]}
    assert "base" in names and "private-one" not in names and "snap1" not in names
    status, err, _ = other("GET", "/v1/templates/private-one")
    assert status == 404, err
    for ref in ("private-one", snap["template"]):
        status, err, _ = other("POST", "/v1/sessions", {"template": ref, "limits": LIMITS})
        assert status == 400 and "unknown template" in err["error"]["message"], err
    status, err, _ = other("DELETE", f"/v1/templates/private-one/versions/{snap['version']}")
    assert status == 404, err
    # The other tenant cannot write a shared name, and its own template of the same
    # private name is its own.
    o = session(daemon, call=other)
    try:
        status, err, _ = snapshot(daemon, o["id"], "base", call=other)
        assert status == 403, err
        run(daemon, o["id"], "echo theirs > ~/mine", call=other)
        status, theirs, _ = snapshot(daemon, o["id"], "private-one", call=other)
        assert status == 201, theirs
    finally:
        other("DELETE", f"/v1/sessions/{o['id']}")
    a = session(daemon, template="private-one")
    b = session(daemon, template="private-one", call=other)
    try:
        assert run(daemon, a["id"], "cat ~/mine")["stdout"] == "secret\n"
        assert run(daemon, b["id"], "cat ~/mine", call=other)["stdout"] == "theirs\n"
    finally:
        daemon.delete(a["id"])
        other("DELETE", f"/v1/sessions/{b['id']}")
