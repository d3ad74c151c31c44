"""Storage from a real client (the Python SDK, and raw HTTP for error answers):
disk-backed writable layers with a kernel-enforced limit, the memory kind, disk
numbers, volumes (sharing, ownership, read-only, one writer), reset, and no loop
device, image or mount left after teardown or after kill -9 of the daemon.

Leftovers are counted only for this module's daemons: loop devices whose backing
file lies under their state dirs, files in their disk dirs."""
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

import cela  # noqa: E402
from conftest_daemon import CelaDaemon  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

MiB = 1 << 20


def start_daemon(tmp, config=None):
    extra = []
    if config is not None:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        extra = ["--config", str(path)]
    return CelaDaemon.start(tmp, extra_args=extra)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = start_daemon(tmp_path_factory.mktemp("storage"), {"disk": {"kind": "disk", "pool": 2}})
    yield d
    d.stop()
    assert own_loops(d) == [], "loop devices left bound after the daemon stopped"


def own_loops(d):
    """Loop devices bound to a file under this daemon's state dir."""
    out = []
    for dev in Path("/sys/block").glob("loop*"):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue  # not bound
        if backing.startswith(str(d.state_dir)):
            out.append((dev.name, backing))
    return out


def disk_files(d):
    """Files in the daemon's disk dir (images are never linked: none should exist)."""
    disks = d.state_dir / "disks"
    return sorted(p.name for p in disks.iterdir() if p.is_file()) if disks.exists() else []


def ledger(d):
    loops = d.state_dir / "disks" / "loops"
    return sorted(p.name for p in loops.iterdir()) if loops.exists() else []


def conn(d):
    return {"url": d.unix_url}


def create(d, **kw):
    kw.setdefault("template", "base")
    kw.setdefault("limits", {"memory_mb": 256, "disk_mb": 1024})
    return cela.Sandbox.create(**conn(d), **kw)


def sh(sb, cmd, user=None, timeout_s=120):
    return sb.run(["sh", "-c", cmd], user=user, timeout_s=timeout_s)


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


# ---- the disk-backed writable layer --------------------------------------------------

def test_disk_layer_enospc_past_its_limit_and_stays_healthy(daemon):
    # 64 MiB of memory, 128 MiB of disk: the layer is not memory, so 96 MiB fit (a tmpfs
    # layer of this session would hold ~24 MiB), and the limit is the kernel's ENOSPC.
    with create(daemon, limits={"memory_mb": 64, "disk_mb": 128}) as sb:
        info = sb.info()
        assert info["disk"] == {"kind": "disk"}, info
        r = sh(sb, "dd if=/dev/zero of=$HOME/big bs=1M count=96 conv=fsync 2>&1; echo rc=$?")
        assert "rc=0" in r.stdout, r.stdout
        r = sh(sb, "dd if=/dev/zero of=$HOME/more bs=1M count=200 2>&1; echo rc=$?")
        assert "No space left on device" in r.stdout and "rc=1" in r.stdout, r.stdout
        # Still healthy: execs run, files can be removed and written again.
        r = sh(sb, "rm $HOME/more $HOME/big && echo fine > $HOME/after && cat $HOME/after")
        assert r.exit_code == 0 and r.stdout == "fine\n", (r.stdout, r.stderr)
        assert sb.info()["state"] in ("ready", "running")
        final = sb.delete()
        assert final["cleanup"]["loop_detached"] is True, final["cleanup"]
        assert final["cleanup"]["upper_dir_freed"] is True


def test_memory_kind_is_a_tmpfs_counted_as_memory(daemon):
    with create(daemon, limits={"memory_mb": 64, "disk_mb": 128}, disk={"kind": "memory"}) as sb:
        info = sb.info()
        assert info["disk"] == {"kind": "memory"} and info["disk_written_bytes"] is None, info
        r = sh(sb, "stat -f -c %T /")
        assert r.stdout.strip() == "overlayfs"
        # The tmpfs layer is capped to fit the memory limit: 96 MiB do not fit.
        r = sh(sb, "dd if=/dev/zero of=$HOME/big bs=1M count=96 2>&1; echo rc=$?")
        assert "No space left on device" in r.stdout, r.stdout
        assert sh(sb, "rm -f $HOME/big; echo ok").stdout == "ok\n"
        r = sh(sb, "dd if=/dev/zero of=$HOME/f bs=1M count=4 2>/dev/null; echo ok")
        assert r.stdout == "ok\n"
        assert sb.info()["disk_used_bytes"] >= 4 * MiB
        final = sb.delete()
        assert "loop_detached" not in final["cleanup"], final["cleanup"]


def test_disk_numbers_move(daemon):
    with create(daemon) as sb:
        before = sb.info()
        assert before["disk_used_bytes"] is not None and before["disk_used_bytes"] < MiB, before
        assert before["disk_written_bytes"] is not None and before["disk_written_bytes"] < 4 * MiB, before
        r = sh(sb, "dd if=/dev/urandom of=$HOME/data bs=1M count=20 conv=fsync 2>&1; echo rc=$?")
        assert "rc=0" in r.stdout, r.stdout
        after = sb.info()
        assert after["disk_used_bytes"] >= before["disk_used_bytes"] + 20 * MiB, after
        assert after["disk_written_bytes"] >= before["disk_written_bytes"] + 20 * MiB, after
        sh(sb, "rm $HOME/data && sync")
        freed = sb.info()
        assert freed["disk_used_bytes"] < after["disk_used_bytes"] - 15 * MiB, freed
        assert freed["disk_written_bytes"] >= after["disk_written_bytes"]  # writes only grow
        final = sb.delete()
        # The final reading stays in the record.
        assert final["cleanup"]["disk_written_bytes"] >= after["disk_written_bytes"]
        status, rec = daemon.request("GET", f"/v1/sessions/{sb.id}")
        assert rec["disk_written_bytes"] == final["cleanup"]["disk_written_bytes"]


def test_uploads_land_on_the_disk_layer_not_in_memory(daemon):
    # A 96 MiB upload into a 64 MiB session: only possible on a disk-backed layer.
    with create(daemon, limits={"memory_mb": 64, "disk_mb": 256}) as sb:
        data = os.urandom(96 * MiB)
        sb.files.write("/home/user/upload.bin", data)
        r = sh(sb, "stat -c %s /home/user/upload.bin")
        assert r.stdout.strip() == str(len(data))


# ---- volumes ------------------------------------------------------------------------

@pytest.fixture
def volumes(daemon):
    v = cela.Volumes(**conn(daemon))
    made = []

    def make(name, size_mb=64):
        made.append(name)
        return v.create(name, size_mb)

    v.make = make
    yield v
    for name in made:
        try:
            v.delete(name)
        except cela.NotFound:
            pass


def test_volume_shared_by_sessions_keeps_files_and_ownership(daemon, volumes):
    vol = volumes.make("work-share")
    assert vol["size_mb"] == 64 and vol["writer"] is None
    with create(daemon, volumes=[{"name": "work-share", "path": "/work"}]) as a:
        r = sh(a, "echo hello > /work/a.txt && mkdir /work/dir && id -u && stat -c %u:%g /work/a.txt")
        assert r.exit_code == 0, r.stderr
        assert r.stdout.split() == ["1000", "1000:1000"]
        r = sh(a, "mkdir /work/rootdir && chown 1234:4321 /work/rootdir && echo ok", user="root")
        assert r.stdout == "ok\n", r.stderr
        assert volumes.get("work-share")["writer"] == a.id
        # A reader at the same time (another uid slot: both are live) sees the same
        # owners: the volume is idmapped through each session's user namespace.
        with create(daemon, volumes=[{"name": "work-share", "path": "/data", "read_only": True}]) as b:
            r = sh(b, "cat /data/a.txt; stat -c %u:%g /data/a.txt /data/rootdir")
            assert r.stdout.split() == ["hello", "1000:1000", "1234:4321"], (r.stdout, r.stderr)
            r = sh(b, "(echo x > /data/new) 2>&1; echo rc=$?")
            assert "Read-only file system" in r.stdout and "rc=0" not in r.stdout, r.stdout
            r = sh(b, "touch /data/new2 2>&1; echo rc=$?", user="root")
            assert "Read-only file system" in r.stdout and "rc=0" not in r.stdout, r.stdout
            assert volumes.get("work-share")["readers"] == [b.id]
    # After both ended: the files are still there for the next writer.
    assert volumes.get("work-share")["writer"] is None
    with create(daemon, volumes=[{"name": "work-share", "path": "/work"}]) as c:
        r = sh(c, "cat /work/a.txt; stat -c %u:%g /work/a.txt /work/rootdir; ls -d /work/dir")
        assert r.stdout.split() == ["hello", "1000:1000", "1234:4321", "/work/dir"], (r.stdout, r.stderr)
        r = sh(c, "echo more >> /work/a.txt && cat /work/a.txt")
        assert r.stdout == "hello\nmore\n"


def test_volume_cap_is_enospc(daemon, volumes):
    volumes.make("capped", 32)
    with create(daemon, volumes=[{"name": "capped", "path": "/cap"}]) as sb:
        r = sh(sb, "dd if=/dev/zero of=/cap/f bs=1M count=64 2>&1; echo rc=$?")
        assert "No space left on device" in r.stdout, r.stdout
        assert sh(sb, "echo ok").stdout == "ok\n"


def test_second_writer_refused_and_in_use_volume_not_deleted(daemon, volumes):
    volumes.make("one-writer")
    with create(daemon, volumes=[{"name": "one-writer", "path": "/w"}]) as a:
        status, body = daemon.request("POST", "/v1/sessions", {
            "template": "base", "volumes": [{"name": "one-writer", "path": "/w"}]})
        assert status == 409 and "one writer" in body["error"]["message"], body
        status, body = daemon.request("DELETE", "/v1/volumes/one-writer")
        assert status == 409, body
        # a reader is fine alongside the writer
        with create(daemon, volumes=[{"name": "one-writer", "path": "/r", "read_only": True}]) as b:
            assert sh(b, "ls /r >/dev/null && echo ok").stdout == "ok\n"
        assert sh(a, "echo ok").stdout == "ok\n"
    # Free again: a new writer, then delete.
    with create(daemon, volumes=[{"name": "one-writer", "path": "/w"}]):
        pass
    assert volumes.delete("one-writer")["name"] == "one-writer"
    status, _ = daemon.request("GET", "/v1/volumes/one-writer")
    assert status == 404
    # its image went with it
    assert not any((daemon.state_dir / "volumes").rglob("one-writer"))


def test_volume_requests_checked_at_the_edge(daemon, volumes):
    volumes.make("edge")
    for bad in [{"name": "edge", "path": "/"}, {"name": "edge", "path": "/proc/x"}, {"name": "edge", "path": "rel"},
                {"name": "edge", "path": "/a/../etc"}, {"name": "edge", "path": "/dev"},
                {"name": "nope", "path": "/x"}]:
        status, body = daemon.request("POST", "/v1/sessions", {"template": "base", "volumes": [bad]})
        assert status == 400, (bad, body)
    for bad in [{"name": "../x", "size_mb": 64}, {"name": "Upper", "size_mb": 64}, {"name": "ok", "size_mb": 1},
                {"name": "ok", "size_mb": 10 ** 9}]:
        status, body = daemon.request("POST", "/v1/volumes", bad)
        assert status == 400, (bad, body)
    status, body = daemon.request("POST", "/v1/volumes", {"name": "edge", "size_mb": 64})
    assert status == 409, body
    # Another tenant does not see it.
    status, t = daemon.request("POST", "/v1/tenants", {"name": "storage-other"})
    assert status == 201, t
    status, k = daemon.request("POST", f"/v1/tenants/{t['id']}/keys", {})
    assert status == 201, k
    other = cela.Volumes(url=daemon.tcp_url, api_key=k["key"])
    assert [v["name"] for v in other.list()] == []
    with pytest.raises(cela.NotFound):
        other.get("edge")
    with pytest.raises(cela.InvalidRequest):
        cela.Sandbox.create(url=daemon.tcp_url, api_key=k["key"], template="base",
                            volumes=[{"name": "edge", "path": "/x"}])


# ---- reset --------------------------------------------------------------------------

def test_reset_wipes_files_keeps_id_and_volumes(daemon, volumes):
    volumes.make("kept")
    with create(daemon, volumes=[{"name": "kept", "path": "/kept"}]) as sb:
        sh(sb, "echo stale > $HOME/stale && echo mine > /kept/mine && echo 1 > /tmp/t")
        running = sb.exec(["sleep", "300"])
        info = sb.reset()
        assert info["id"] == sb.id and info["state"] == "ready" and info["resets"] == 1, info
        r = sh(sb, "ls $HOME/stale /tmp/t 2>&1; cat /kept/mine")
        assert "No such file" in r.stdout and "mine" in r.stdout, r.stdout
        rec = running.wait(timeout=30)
        assert rec.state == "killed" and "reset" in (rec.record.get("reason") or ""), rec.record
        assert sh(sb, "pgrep -x sleep || echo none").stdout == "none\n"
        assert sb.info()["disk_used_bytes"] < MiB
        assert sb.reset()["resets"] == 2
        final = sb.delete()
        assert final["cleanup"]["loop_detached"] is True


def test_reset_of_unknown_or_ended_session(daemon):
    status, _ = daemon.request("POST", "/v1/sessions/s-0000000000000000/reset")
    assert status == 404
    sb = create(daemon)
    sb.delete()
    status, _ = daemon.request("POST", f"/v1/sessions/{sb.id}/reset")
    assert status == 410


# ---- leftovers ----------------------------------------------------------------------

def test_no_loop_devices_or_images_left_after_teardown(daemon):
    pooled = daemon.request("GET", "/healthz")  # noqa: F841 (the daemon is up)
    sessions = [create(daemon, limits={"memory_mb": 128, "disk_mb": size}) for size in (1024, 64, 200)]
    ids = [s.id for s in sessions]
    bound = own_loops(daemon)
    assert len(bound) >= 3, bound
    for s in sessions:
        final = s.delete()
        assert final["cleanup"]["loop_detached"] is True
    # What is left bound is only the pool's ready disks (2, unlinked images).
    assert wait_for(lambda: len(own_loops(daemon)) <= 2), own_loops(daemon)
    for dev, backing in own_loops(daemon):
        assert backing.endswith("(deleted)"), backing
    assert disk_files(daemon) == []
    # The ledger entry goes right after its device is detached (on the release thread).
    assert wait_for(lambda: len(ledger(daemon)) == len(own_loops(daemon))), (ledger(daemon), own_loops(daemon))
    del ids


def test_kill_9_of_the_daemon_leaves_nothing(tmp_path):
    d = start_daemon(tmp_path, {"disk": {"kind": "disk", "pool": 0}})
    try:
        v = cela.Volumes(**conn(d))
        v.create("crash-vol", 32)
        a = create(d, volumes=[{"name": "crash-vol", "path": "/v"}])
        b = create(d, limits={"memory_mb": 128, "disk_mb": 64})
        sh(a, "echo persisted > /v/f && sync")
        sh(b, "dd if=/dev/zero of=$HOME/x bs=1M count=8 2>/dev/null")
        assert len(own_loops(d)) == 3
        os.kill(d.pid, signal.SIGKILL)
        d.proc.wait()
        # Inits die with the daemon; the kernel unmounts and autoclear unbinds.
        assert wait_for(lambda: own_loops(d) == [], 20), own_loops(d)
        # What a crash in the middle of making an image would leave, and a ledger entry
        # of a device that is not ours (never touched: it is not bound to that inode).
        (d.state_dir / "disks" / "empty-1-1.img").write_bytes(b"x")
        (d.state_dir / "disks" / "loops" / "loop0-1-1").write_bytes(b"")
        d2 = CelaDaemon.start(tmp_path, extra_args=["--config", str(tmp_path / "config.json")])
        try:
            assert disk_files(d2) == [] and ledger(d2) == [], (disk_files(d2), ledger(d2))
            assert own_loops(d2) == []
            for sid in (a.id, b.id):
                status, rec = d2.request("GET", f"/v1/sessions/{sid}")
                assert rec["state"] == "terminated" and rec["termination"]["reason"] == "daemon_restart", rec
                assert rec["cleanup"]["loop_detached"] is True
            # The volume survived the crash with its file, and is free for a new writer.
            with create(d2, volumes=[{"name": "crash-vol", "path": "/v"}]) as c:
                assert sh(c, "cat /v/f").stdout == "persisted\n"
            cela.Volumes(**conn(d2)).delete("crash-vol")
        finally:
            d2.stop()
        assert own_loops(d2) == []
    finally:
        if d.proc.poll() is None:
            d.stop()
