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
import stat
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import CELA, wait_until
from daemon_util import Daemon, cgroup_cpu_ns

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
        status, audit, _ = daemon.request("GET", f"/v1/audit?session={sid}&kind=session.snapshot")
        assert status == 200 and [a["data"]["template"] for a in audit["records"]] == [snap["template"]], audit
        assert audit["records"][0]["data"]["layer_digest"] == snap["layer_digest"], audit
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


def test_a_pause_during_a_snapshot_is_kept_after_it(daemon):
    """The snapshot freezes the session for its copy and thaws it after: a pause asked
    for meanwhile must still hold then (no thaw behind the caller's back)."""
    s = session(daemon)
    sid = s["id"]
    try:
        # A layer big enough that the copy takes a while, and a process that burns CPU.
        run(daemon, sid, "head -c 150000000 /dev/urandom > ~/big && (sh -c 'while :; do :; done' &)")
        result = {}
        t = threading.Thread(target=lambda: result.update(snap=snapshot(daemon, sid, "snap-pause")))
        t.start()
        time.sleep(0.05)
        status, paused, _ = daemon.request("POST", f"/v1/sessions/{sid}/pause")
        t.join(60)
        assert status == 200, paused
        assert result["snap"][0] == 201, result["snap"]
        status, info, _ = daemon.request("GET", f"/v1/sessions/{sid}")
        assert info["state"] == "paused", info
        a = cgroup_cpu_ns(sid)
        time.sleep(0.5)
        used = (cgroup_cpu_ns(sid) - a) / 1e9
        assert used < 0.02, f"a session reported paused used {used:.3f} s of CPU in 0.5 s"
        status, resumed, _ = daemon.request("POST", f"/v1/sessions/{sid}/resume")
        assert status == 200 and resumed["state"] == "ready", resumed
        assert run(daemon, sid, "echo alive")["stdout"] == "alive\n"
    finally:
        daemon.request("DELETE", f"/v1/sessions/{sid}")


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


# ---- builds ------------------------------------------------------------------------

def tar_of(files):
    """A tar (bytes) of {name: content}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def follow_build(daemon, build_id, timeout=300):
    """Reads the build's SSE stream to its end: [(event, id, data)]."""
    from daemon_util import UnixConnection
    conn = UnixConnection(daemon.socket, timeout=timeout)
    conn.request("GET", f"/v1/templates/builds/{build_id}?follow=1")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
    events, event, eid, data = [], "message", "", []
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line == "":
            if data:
                events.append((event, eid, "\n".join(data)))
                if event in ("done", "failed"):
                    break
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "event":
            event = value
        elif key == "id":
            eid = value
        elif key == "data":
            data.append(value)
    conn.close()
    return events


def test_build_from_steps_streams_its_log_and_runs(daemon):
    archive = base64.b64encode(tar_of({"hello.txt": b"hello from copy\n"})).decode()
    steps = [
        {"run": "echo built > /opt/marker && "
                "test \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo && echo only-loopback"},
        {"env": {"GREETING": "hi there"}},
        {"workdir": "/srv/app"},
        {"copy": {"archive_b64": archive, "to": "/srv/app"}},
        {"user": "user"},
        {"run": "whoami > /tmp/who && echo \"$GREETING\" > /tmp/greeting && pwd > /tmp/cwd"},
    ]
    status, started, _ = daemon.request("POST", "/v1/templates", {"name": "stepped", "from": "base", "steps": steps})
    assert status == 202, started
    events = follow_build(daemon, started["build_id"])
    kinds = [e for e, _, _ in events]
    assert kinds[-1] == "done", events[-1]
    logs = "\n".join(d for e, _, d in events if e == "log")
    assert "only-loopback" in logs  # the run step's output is streamed; it had no network
    step_events = [json.loads(d) for e, _, d in events if e == "step"]
    assert [s["index"] for s in step_events] == [1, 2, 3, 4, 5, 6] and all(s["count"] == 6 for s in step_events)
    assert not any(s["cached"] for s in step_events)
    ids = [int(i) for _, i, _ in events]
    assert ids == sorted(ids)
    done = json.loads(events[-1][2])
    assert done["state"] == "succeeded" and done["template"].startswith("stepped@")
    # A late follower replays the whole log, and the build is readable without follow.
    assert [e for e, _, _ in follow_build(daemon, started["build_id"])] == kinds
    status, b, _ = daemon.request("GET", f"/v1/templates/builds/{started['build_id']}")
    assert status == 200 and b["state"] == "succeeded"

    status, t, _ = daemon.request("GET", "/v1/templates/stepped")
    v = t["versions"][-1]
    assert v["source"] == "build" and v["parent"].startswith("base@") and v["workdir"] == "/srv/app"
    assert "GREETING=hi there" in v["env"] and v["user"]["name"] == "user"
    assert len(v["layers"]) == 1 + 4  # base + run, workdir, copy, run
    s = session(daemon, template="stepped")
    try:
        r = run(daemon, s["id"], "cat /opt/marker /srv/app/hello.txt /tmp/who /tmp/greeting /tmp/cwd; pwd; "
                                 "echo \"$GREETING\"")
        assert r["stdout"] == ("built\nhello from copy\nuser\nhi there\n/srv/app\n/srv/app\nhi there\n"), r
    finally:
        daemon.delete(s["id"])


def test_builds_are_capped_per_tenant_and_take_turns(daemon, other):
    """A tenant may queue a few builds, not unbounded ones (each holds its request in
    daemon memory), and another tenant's build does not wait behind all of them."""
    token = os.urandom(4).hex()

    def submit(call, i):
        return call("POST", "/v1/templates", {"name": f"turns-{token}-{i}", "from": "base",
                                              "steps": [{"run": f"sleep 1; echo {token}-{i}"}]})
    mine = []
    for i in range(4):
        status, b, _ = submit(daemon.request, i)
        assert status == 202, b
        mine.append(b["build_id"])
    status, err, _ = submit(daemon.request, 4)
    assert status == 429 and err["error"]["code"] == "quota_exceeded", err
    status, theirs, _ = submit(other, 9)
    assert status == 202, theirs

    def ended_at(call, bid):
        def state():
            st, b, _ = call("GET", f"/v1/templates/builds/{bid}")
            assert st == 200, b
            return b
        assert wait_until(lambda: state()["state"] != "running", timeout=120), state()
        b = state()
        assert b["state"] == "succeeded", b
        return b["ended_at"]
    ends = [ended_at(daemon.request, b) for b in mine]
    their_end = ended_at(other, theirs["build_id"])
    # Theirs ran right after the build that was running, ahead of my other three.
    assert their_end < ends[2], (their_end, ends)
    # Mine ended: the cap counts running and queued builds only.
    status, b, _ = submit(daemon.request, 5)
    assert status == 202, b


def test_a_failing_step_fails_the_build(daemon):
    status, started, _ = daemon.request("POST", "/v1/templates", {
        "name": "broken", "steps": [{"run": "echo before; exit 3"}]})
    assert status == 202, started
    events = follow_build(daemon, started["build_id"])
    assert events[-1][0] == "failed", events
    failed = json.loads(events[-1][2])
    assert "exited with status 3" in failed["error"] and "step 1/1" in failed["error"]
    assert any(e == "log" and "before" in d for e, _, d in events)
    status, err, _ = daemon.request("GET", "/v1/templates/broken")
    assert status == 404, err
    # Bad requests are answered before any build starts.
    status, err, _ = daemon.request("POST", "/v1/templates", {"name": "base", "steps": [{"run": "true"}]})
    assert status == 403, err
    status, err, _ = daemon.request("POST", "/v1/templates", {"name": "x", "steps": [{"sh": "true"}]})
    assert status == 400, err


def test_another_tenant_cannot_build_on_or_follow_a_private_template(daemon, other):
    status, started, _ = other("POST", "/v1/templates", {"name": "theirs", "from": "stepped",
                                                          "steps": [{"run": "true"}]})
    assert status == 202, started
    status, err, _ = daemon.request("GET", f"/v1/templates/builds/{started['build_id']}")
    assert status == 404, err  # not ours
    for _ in range(100):
        status, b, _ = other("GET", f"/v1/templates/builds/{started['build_id']}")
        if b["state"] != "running":
            break
        time.sleep(0.1)
    assert b["state"] == "failed" and "unknown template" in b["error"], b


DOCKERFILE = """\
# a Dockerfile as E2B users write them
ARG GREETING=hello
FROM base
ENV APP_HOME=/srv/web
RUN mkdir -p $APP_HOME && echo "$GREETING from run" > $APP_HOME/run.txt
COPY app/ /srv/web/
COPY notes.txt /srv/web/docs/
WORKDIR /srv/web
USER user
RUN echo "i am $(whoami)" > /tmp/me
CMD ["python3", "main.py"]
"""


def cli(daemon, *args, timeout=300):
    return subprocess.run([CELA, *args, "--url", f"unix://{daemon.socket}"], capture_output=True, text=True,
                          timeout=timeout)


def test_dockerfile_build_and_a_cached_second_build(daemon, tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "app").mkdir(parents=True)
    (ctx / "app" / "main.py").write_text("print('hi from main')\n")
    (ctx / "notes.txt").write_text("notes\n")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    t0 = time.monotonic()
    first = cli(daemon, "template", "build", "dock", "-f", str(ctx / "Dockerfile"), "--build-arg", "GREETING=howdy")
    t_first = time.monotonic() - t0
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("dock@")
    assert "[2/7] RUN mkdir" in first.stderr and "(cached)" not in first.stderr, first.stderr
    assert "CMD ignored" in first.stderr

    t0 = time.monotonic()
    second = cli(daemon, "template", "build", "dock", "-f", str(ctx / "Dockerfile"), "--build-arg", "GREETING=howdy")
    t_second = time.monotonic() - t0
    assert second.returncode == 0, second.stderr
    layer_lines = [l for l in second.stderr.splitlines() if l.startswith("[") and
                   any(k in l for k in ("] RUN", "] COPY", "] WORKDIR"))]
    assert len(layer_lines) == 5 and all(l.endswith("(cached)") for l in layer_lines), second.stderr
    assert "up to date" in second.stderr and second.stdout == first.stdout
    assert t_second < 3, (t_first, t_second)  # no step ran again (USER only looks the account up)

    # Another build arg changes the first RUN's inputs: it and every later step run again.
    third = cli(daemon, "template", "build", "dock", "-f", str(ctx / "Dockerfile"))
    assert third.returncode == 0, third.stderr
    assert "[2/7] RUN mkdir -p /srv/web && echo \"hello from run\"" in third.stderr
    assert "(cached)" not in "\n".join(l for l in third.stderr.splitlines() if "] RUN" in l), third.stderr

    s = session(daemon, template=first.stdout.strip())
    try:
        r = run(daemon, s["id"], "cat run.txt docs/notes.txt /tmp/me; python3 main.py; echo $APP_HOME; pwd")
        assert r["stdout"] == "howdy from run\nnotes\ni am user\nhi from main\n/srv/web\n/srv/web\n", r
    finally:
        daemon.delete(s["id"])


# ---- OCI import ---------------------------------------------------------------------

def umoci(*args):
    subprocess.run(["umoci", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def oci_image(tmp_path_factory):
    """A two-layer OCI image made with Debian's umoci: dash and its libraries, a user,
    files, and in the second layer a deleted file (a whiteout)."""
    if not shutil.which("umoci"):
        pytest.skip("umoci is not installed (make deps)")
    work = tmp_path_factory.mktemp("oci")
    layout, bundle = work / "layout", work / "bundle"
    umoci("init", "--layout", str(layout))
    umoci("new", "--image", f"{layout}:t")
    umoci("unpack", "--image", f"{layout}:t", str(bundle))
    root = bundle / "rootfs"
    libs = subprocess.run(["ldd", "/bin/dash"], capture_output=True, text=True, check=True).stdout
    for path in ["/bin/dash"] + [w for w in libs.split() if w.startswith("/")]:
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    (root / "bin" / "sh").symlink_to("dash")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n")
    (root / "home" / "app").mkdir(parents=True)
    os.chown(root / "home" / "app", 1000, 1000)
    (root / "data").mkdir()
    (root / "data" / "a").write_text("layer one\n")
    (root / "etc" / "gone").write_text("deleted in layer two\n")
    umoci("repack", "--image", f"{layout}:t", str(bundle))
    (root / "etc" / "gone").unlink()
    (root / "data" / "b").write_text("layer two\n")
    umoci("repack", "--image", f"{layout}:t", str(bundle))
    umoci("config", "--image", f"{layout}:t", "--config.env", "FROM_IMAGE=yes", "--config.workingdir", "/data",
          "--config.user", "app")
    tar = work / "image.tar"
    subprocess.run(["tar", "-C", str(layout), "-cf", str(tar), "."], check=True)
    return tar


def test_oci_import_runs(daemon, oci_image):
    status, t, _ = daemon.request("POST", "/v1/templates/import?name=imported", oci_image.read_bytes(),
                                  headers={"Content-Type": "application/x-tar"})
    assert status == 201, t
    assert t["template"].startswith("imported@") and t["source"] == "oci" and not t["shared"]
    assert t["user"] == {"name": "app", "uid": 1000, "gid": 1000, "home": "/home/app"}
    assert t["workdir"] == "/data" and "FROM_IMAGE=yes" in t["env"]
    s = session(daemon, template="imported")
    try:
        # Only dash is in the image: its builtins read the files.
        r = run(daemon, s["id"], "read x < a; echo $x; read y < b; echo $y; test -e /etc/gone || echo gone; "
                                 "echo $FROM_IMAGE; pwd; echo $HOME")
        assert r["stdout"] == "layer one\nlayer two\ngone\nyes\n/data\n/home/app\n", r
    finally:
        daemon.delete(s["id"])
    # The same image again is the same layer (no second copy).
    status, again, _ = daemon.request("POST", "/v1/templates/import?name=imported", oci_image.read_bytes())
    assert status == 201 and again["layers"] == t["layers"], again


def test_oci_import_cli_and_refusals(daemon, oci_image, tmp_path):
    r = cli(daemon, "template", "import", "imported-cli", str(oci_image))
    assert r.returncode == 0 and r.stdout.startswith("imported-cli@"), r.stderr
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tf:
        info = tarfile.TarInfo("index.json")
        payload = b'{"manifests": []}'
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    status, err, _ = daemon.request("POST", "/v1/templates/import?name=bad", bad.read_bytes())
    assert status == 400 and "no manifest" in err["error"]["message"], err
    status, err, _ = daemon.request("POST", "/v1/templates/import?name=base", oci_image.read_bytes())
    assert status == 403, err


def docker_save_tar(path, layer_entries):
    """A docker save tar with one layer made of `layer_entries` (TarInfo, bytes or None)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as lt:
        for info, data in layer_entries:
            lt.addfile(info, io.BytesIO(data) if data is not None else None)
    config = json.dumps({"config": {"Env": ["PATH=/bin"]}, "rootfs": {"type": "layers"}}).encode()
    manifest = json.dumps([{"Config": "config.json", "Layers": ["l1/layer.tar"]}]).encode()
    with tarfile.open(path, "w") as tf:
        for name, data in (("manifest.json", manifest), ("config.json", config), ("l1/layer.tar", layer.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def entry(name, kind=tarfile.REGTYPE, data=b"", link="", mode=0o644):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (data if kind == tarfile.REGTYPE else None)


def test_a_hostile_image_stays_inside_its_layer(daemon, store, tmp_path):
    """Layer entries that try to leave the layer: `..`, absolute names, a symlink to a
    host directory written through, a hard link to a host file, a device node. Nothing
    may appear or change outside the layer; what is refused is refused with 400."""
    bait = tmp_path / "bait"
    bait.mkdir()
    host_file = tmp_path / "host-secret"
    host_file.write_text("host only\n")
    escape = f"cela-escape-{os.urandom(4).hex()}"
    cases = {  # name: (entries, the layer's files when imported: relative path -> content or None)
        "dotdot": ([entry(f"../../../../../../tmp/{escape}", data=b"x")], None),
        "absolute": ([entry(f"/tmp/{escape}", data=b"abs")], {f"tmp/{escape}": b"abs"}),
        # Resolved inside the layer, where the target does not exist: refused.
        "symlink-through": ([entry("link", tarfile.SYMTYPE, link=str(bait)), entry("link/pwned", data=b"thru")], None),
        # ... and where it does, written there.
        "symlink-inside": ([entry(str(bait).lstrip("/"), tarfile.DIRTYPE, mode=0o755),
                            entry("link", tarfile.SYMTYPE, link=str(bait)), entry("link/pwned", data=b"thru")],
                           {str(bait).lstrip("/") + "/pwned": b"thru"}),
        "hardlink-out": ([entry("hl", tarfile.LNKTYPE, link=str(host_file))], None),
        "hardlink-dotdot": ([entry("hl", tarfile.LNKTYPE, link="../../../../../.." + str(host_file))], None),
        "device": ([entry("dev/mem2", tarfile.CHRTYPE, mode=0o666), entry("ok", data=b"ok")], {"ok": b"ok"}),
    }
    before = os.stat(host_file)
    digests = set()
    seen = {p for p in store.glob(".tenants/*/.layers/*") if p.is_dir()}
    for name, (entries, expect) in cases.items():
        tar = docker_save_tar(tmp_path / f"{name}.tar", entries)
        status, body, _ = daemon.request("POST", f"/v1/templates/import?name=hostile-{name}", tar.read_bytes())
        assert not os.path.exists(f"/tmp/{escape}"), name
        assert list(bait.iterdir()) == [], name
        after = os.stat(host_file)
        assert (after.st_nlink, host_file.read_text()) == (before.st_nlink, "host only\n"), name
        if expect is None:
            assert status == 400 and body["error"]["code"] == "invalid_request", (name, body)
            continue
        assert status == 201, (name, body)
        digest = body["layers"][-1]["digest"]
        assert digest not in digests, (name, "another image's layer was handed out")
        digests.add(digest)
        made = {p for p in store.glob(".tenants/*/.layers/*") if p.is_dir()} - seen
        assert len(made) == 1, (name, made)
        layer = made.pop()
        seen.add(layer)
        files = {}
        for p in layer.rglob("*"):
            st = os.lstat(p)
            assert not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)), (name, p)
            if stat.S_ISREG(st.st_mode):
                files[str(p.relative_to(layer))] = p.read_bytes()
        assert files == expect, (name, files)
