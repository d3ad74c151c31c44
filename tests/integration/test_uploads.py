"""Uploads (PUT /v1/sessions/{id}/files) are streamed and charged to the session.

The daemon under test is moved into a memory cgroup this module creates (and removes),
so what the daemon itself is charged can be read apart from everything else on the
host; the session's charge is read from its own cgroup. Attacks at the HTTP edge:
a body far over the session's memory, declared or not, a header-only oversize
request, Expect: 100-continue, a client that gives up half way, and many big uploads
at once against the daemon's own memory."""
import hashlib
import os
import select
import socket
import threading
import time
from pathlib import Path

import pytest

from conftest import CGROUP_ROOT, wait_until
from daemon_util import Daemon

MiB = 1 << 20


def _memory_layout():
    """(directory of the memory controller, usage file, peak file)."""
    v1 = CGROUP_ROOT / "memory"
    if (v1 / "memory.usage_in_bytes").exists():
        return v1, "memory.usage_in_bytes", "memory.max_usage_in_bytes"
    return CGROUP_ROOT, "memory.current", "memory.peak"


MEM_ROOT, USAGE, PEAK = _memory_layout()


def _read_int(path):
    return int(Path(path).read_text().split()[0])


class DaemonCgroup:
    """A memory cgroup of our own holding only the test daemon."""

    def __init__(self):
        self.path = MEM_ROOT / f"cela-test-uploads-{os.getpid()}"
        self.path.mkdir()

    def adopt(self, pid):
        (self.path / "cgroup.procs").write_text(str(pid))

    def usage(self):
        return _read_int(self.path / USAGE)

    def peak(self):
        try:
            return _read_int(self.path / PEAK)
        except OSError:  # v2 without memory.peak
            return self.usage()

    def remove(self):
        for pid in (self.path / "cgroup.procs").read_text().split():
            # Only a process of ours can still be here (the daemon): back to the root.
            try:
                (MEM_ROOT / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        wait_until(lambda: not (self.path / "cgroup.procs").read_text().strip(), 5)
        self.path.rmdir()


@pytest.fixture(scope="module")
def setup():
    cg = DaemonCgroup()
    # These are the memory-backed layer's uploads (a tmpfs counted against the session's
    # memory); test_storage.py has the disk-backed layer's.
    d = Daemon({"max_sessions": 12, "max_upload_bytes": 1 << 30, "disk": {"kind": "memory", "pool": 0},
                "tenant_quotas": {"max_sessions": 12, "max_memory_mb": 8192, "max_cpus": 16}})
    try:
        d.start()
        cg.adopt(d.proc.pid)
        yield d, cg
    finally:
        d.close()
        cg.remove()


@pytest.fixture
def new_session(setup):
    """Starts sessions for one test and deletes them at its end, failed or not."""
    daemon, _ = setup
    made = []

    def make(**limits):
        sid = daemon.session(limits=limits or {"memory_mb": 256})
        made.append(sid)
        return sid
    yield make
    for sid in made:
        daemon.delete(sid)


def session_cgroup(sid):
    return MEM_ROOT / "cela" / sid


def session_usage(sid):
    return _read_int(session_cgroup(sid) / USAGE)


def listing(daemon, sid, directory="/home/user"):
    return daemon.run(sid, f"ls -a {directory}")["stdout"].split()


def put_path(sid, path):
    return f"/v1/sessions/{sid}/files?path={path}"


def raw_connection(daemon):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(daemon.socket)
    return s


def read_response(s, timeout=10):
    """Status and raw text of the next answer on `s` (headers and what body arrived)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.lower() == "content-length":
            length = int(v)
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), head.decode(), body.decode(errors="replace")


def open_put(daemon, target, headers, first=b""):
    """A connection with the header of a PUT to `target` sent (and `first` body bytes)."""
    s = raw_connection(daemon)
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(f"PUT {target} HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode() + first)
    return s


def put_chunked(daemon, target):
    return open_put(daemon, target, {"Transfer-Encoding": "chunked"})


def stream_chunked(s, total, chunk=MiB):
    """Sends up to `total` bytes as a chunked body until the daemon answers (or closes);
    returns (bytes sent, whether the daemon answered before the end)."""
    block = os.urandom(chunk)
    sent = 0
    while sent < total:
        readable, _, _ = select.select([s], [], [], 0)
        if readable:
            return sent, True
        try:
            s.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
        sent += len(block)
    s.sendall(b"0\r\n\r\n")
    return sent, False


def test_small_upload_round_trip(setup, new_session):
    daemon, _ = setup
    sid = new_session()
    status, w, _ = daemon.request("PUT", put_path(sid, "/home/user/a.txt") + "&mode=0600", b"hello")
    assert status == 201, w
    assert (w["size"], w["sha256"]) == (5, hashlib.sha256(b"hello").hexdigest())
    assert daemon.run(sid, "cat /home/user/a.txt; stat -c ' %U %a' /home/user/a.txt")["stdout"] == "hello user 600\n"
    status, w, _ = daemon.request("PUT", put_path(sid, "/home/user/empty"), b"")
    assert status == 201 and w["size"] == 0, w


def test_upload_is_charged_to_the_session_not_the_daemon(setup, new_session):
    daemon, cg = setup
    sid = new_session(memory_mb=256)
    data = os.urandom(20 * MiB)
    before_session, before_daemon = session_usage(sid), cg.usage()
    status, w, _ = daemon.request("PUT", put_path(sid, "/home/user/big.bin"), data)
    assert status == 201 and w["sha256"] == hashlib.sha256(data).hexdigest(), w
    grew = session_usage(sid) - before_session
    assert grew >= 19 * MiB, f"the session was charged only {grew} bytes for a 20 MiB file"
    assert cg.usage() - before_daemon < 8 * MiB, cg.usage() - before_daemon
    out = daemon.run(sid, "sha256sum /home/user/big.bin")["stdout"]
    assert out.split()[0] == w["sha256"]


def test_declared_oversize_is_refused_before_the_body(setup, new_session):
    daemon, cg = setup
    sid = new_session(memory_mb=32)
    # A 32 MiB session's writable layer is capped below its memory (it is RAM), so the
    # free disk or the memory headroom is what a 400 MB upload does not fit.
    for length, why in ((400 * 1000 * 1000, "does not fit"), ((1 << 30) + 1, "exceeds the limit")):
        s = open_put(daemon, put_path(sid, '/home/user/huge'), {"Content-Length": length})
        t0 = time.monotonic()
        status, head, body = read_response(s)
        assert status == 413 and "payload_too_large" in body and why in body, (head, body)
        assert "connection: close" in head.lower()
        assert time.monotonic() - t0 < 5
        s.close()
    assert ".cela-" not in " ".join(listing(daemon, sid))


def test_expect_100_continue(setup, new_session):
    daemon, _ = setup
    sid = new_session(memory_mb=32)
    # Refused: the answer comes instead of 100 Continue.
    s = open_put(daemon, put_path(sid, '/home/user/x'), {"Content-Length": 300 * MiB, "Expect": "100-continue"})
    status, head, body = read_response(s)
    assert status == 413 and ("memory" in body or "disk" in body), (head, body)
    s.close()
    # Accepted: 100 first, then the body, then 201.
    s = open_put(daemon, put_path(sid, '/home/user/x'), {"Content-Length": 5, "Expect": "100-continue"})
    status, head, _ = read_response(s)
    assert status == 100, head
    s.sendall(b"hello")
    status, head, body = read_response(s)
    assert status == 201 and hashlib.sha256(b"hello").hexdigest() in body, (head, body)
    s.close()
    assert daemon.run(sid, "cat /home/user/x")["stdout"] == "hello"


def test_undeclared_400mb_to_a_32mib_session_fails_cleanly(setup, new_session):
    daemon, cg = setup
    sid = new_session(memory_mb=32)
    before = cg.usage()
    s = put_chunked(daemon, put_path(sid, '/home/user/huge'))
    sent, answered = stream_chunked(s, 400 * MiB)
    assert answered, "the daemon took 400 MB into a 32 MiB session"
    status, head, body = read_response(s)
    assert status == 413 and "payload_too_large" in body and ("memory" in body or "disk" in body), (head, body)
    s.close()
    assert sent < 200 * MiB
    assert cg.usage() - before < 16 * MiB, f"the daemon's cgroup grew {cg.usage() - before} bytes"
    assert session_usage(sid) < 33 * MiB
    # No partial file, no temp file, and the session still works.
    names = listing(daemon, sid)
    assert "huge" not in names and not [n for n in names if n.startswith(".cela-")], names
    assert daemon.run(sid, "echo alive")["stdout"] == "alive\n"


def test_disk_limit_applies_to_uploads(setup, new_session):
    daemon, _ = setup
    sid = new_session(memory_mb=256, disk_mb=16)
    status, err, _ = daemon.request("PUT", put_path(sid, "/home/user/d"), b"x" * (32 * MiB))
    assert status == 413 and "disk" in err["error"]["message"], err
    # Undeclared: the writer runs into ENOSPC.
    s = put_chunked(daemon, put_path(sid, '/home/user/d'))
    sent, answered = stream_chunked(s, 64 * MiB)
    status, head, body = read_response(s)
    assert status == 413 and "disk is full" in body, (head, body)
    s.close()
    names = listing(daemon, sid)
    assert "d" not in names and not [n for n in names if n.startswith(".cela-")], names
    assert daemon.run(sid, "df -k / | tail -1")["exit_code"] == 0


def test_aborted_upload_leaves_no_file(setup, new_session):
    daemon, _ = setup
    sid = new_session()
    s = open_put(daemon, put_path(sid, '/home/user/half'), {"Content-Length": 10 * MiB})
    s.sendall(os.urandom(5 * MiB))
    time.sleep(0.3)
    s.close()

    def clean():
        names = listing(daemon, sid)
        return "half" not in names and not [n for n in names if n.startswith(".cela-")]
    assert wait_until(clean, 5), listing(daemon, sid)


def _vm_hwm(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_parallel_big_uploads_keep_the_daemon_small(setup, new_session):
    daemon, cg = setup
    n, size = 8, 200 * MiB
    # Memory enough that the RAM-backed writable layer really holds 256 MiB.
    sids = [new_session(memory_mb=400, disk_mb=256) for _ in range(n)]
    hwm_before, usage_before = _vm_hwm(daemon.proc.pid), cg.usage()
    block = os.urandom(MiB)
    digest = hashlib.sha256(block * (size // MiB)).hexdigest()
    results = [None] * n

    def upload(i):
        s = open_put(daemon, put_path(sids[i], '/home/user/p.bin'), {"Content-Length": size})
        s.settimeout(60)
        for _ in range(size // MiB):
            s.sendall(block)
        results[i] = read_response(s, timeout=60)
        s.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=upload, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - t0
    for r in results:
        assert r and r[0] == 201 and digest in r[2], r
    grew = _vm_hwm(daemon.proc.pid) - hwm_before
    assert grew < 64 * MiB, f"the daemon's peak RSS grew {grew >> 20} MiB for {n} x 200 MiB uploads"
    assert cg.usage() - usage_before < 64 * MiB
    for sid in sids:
        assert session_usage(sid) >= size
    print(f"{n} x {size >> 20} MiB in {elapsed:.1f} s; daemon VmHWM +{grew >> 20} MiB")


def _tar(entries):
    """A tar of (name, bytes) regular files, as bytes."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def archive_path(sid, path):
    return f"/v1/sessions/{sid}/archive?path={path}"


def test_archive_import_is_charged_to_the_session(setup, new_session):
    daemon, cg = setup
    sid = new_session(memory_mb=256)
    data = os.urandom(20 * MiB)
    body = _tar([("big.bin", data), ("sub/small.txt", b"small")])
    before_session, before_daemon = session_usage(sid), cg.usage()
    status, r, _ = daemon.request("PUT", archive_path(sid, "/home/user"), body)
    assert status == 200 and r["entries"] >= 2, r
    assert session_usage(sid) - before_session >= 19 * MiB
    assert cg.usage() - before_daemon < 8 * MiB, cg.usage() - before_daemon
    out = daemon.run(sid, "sha256sum /home/user/big.bin; stat -c %U /home/user/sub/small.txt")["stdout"]
    assert out.split()[0] == hashlib.sha256(data).hexdigest() and out.split()[-1] == "user", out


def _helper_pids(sid):
    out = []
    for pid in (session_cgroup(sid) / "cgroup.procs").read_text().split():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 1 and cmd[1] == b"__import-tar":
            out.append(int(pid))
    return out


def test_archive_import_runs_as_the_sessions_root_not_the_hosts(setup, new_session):
    """While a slow client streams a tar, the extracting process is in the session's
    cgroup and user namespace with six capabilities there, none on the host."""
    daemon, _ = setup
    sid = new_session(memory_mb=256)
    body = _tar([("slow.bin", os.urandom(2 * MiB))])
    s = open_put(daemon, archive_path(sid, '/home/user'), {"Content-Length": len(body)}, body[:MiB])
    try:
        _inspect_helper(daemon, sid, s, body)
    finally:
        s.close()


def _inspect_helper(daemon, sid, s, body):
    assert wait_until(lambda: _helper_pids(sid), 5), "no import helper in the session's cgroup"
    pid = _helper_pids(sid)[0]
    status = Path(f"/proc/{pid}/status").read_text()
    field = {line.split(":")[0]: line.split(":", 1)[1].strip() for line in status.splitlines()}
    init_pid = int((session_cgroup(sid) / "cgroup.procs").read_text().split()[0])
    assert os.readlink(f"/proc/{pid}/ns/user") == os.readlink(f"/proc/{init_pid}/ns/user")
    assert os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    assert int(field["Uid"].split()[0]) >= 0x10000000, field["Uid"]  # a slot id, not host root
    # CAP_CHOWN | CAP_DAC_OVERRIDE | CAP_DAC_READ_SEARCH | CAP_FOWNER | CAP_SETGID | CAP_SETUID
    # (the last two let a helper drop to a sandbox user: the directory watch)
    assert int(field["CapEff"], 16) == 0xCF and int(field["CapBnd"], 16) == 0xCF, field["CapBnd"]
    assert field["NoNewPrivs"] == "1"
    # It runs from the sealed init image, never the host's cela binary.
    assert os.readlink(f"/proc/{pid}/exe").startswith("/memfd:"), os.readlink(f"/proc/{pid}/exe")
    # Nothing of the daemon's came along: no socket, nothing under its state dir.
    targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    assert not [t for t in targets if t.startswith("socket:") or t.startswith(daemon.dir)], targets
    s.sendall(body[MiB:])
    code, head, text = read_response(s)
    assert code == 200, (head, text)


def test_archive_too_big_for_the_session_fails_cleanly(setup, new_session):
    daemon, cg = setup
    sid = new_session(memory_mb=32)
    # Declared: refused before the body.
    s = open_put(daemon, archive_path(sid, '/home/user'), {"Content-Length": 400 * 1000 * 1000})
    code, head, text = read_response(s)
    assert code == 413 and ("memory" in text or "disk" in text), (head, text)
    s.close()
    # Undeclared: a 400 MB entry is refused when its header arrives.
    import tarfile
    info = tarfile.TarInfo("huge.bin")
    info.size = 400 * 1000 * 1000
    before = cg.usage()
    s = put_chunked(daemon, archive_path(sid, '/home/user'))
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    s.sendall(b"%x\r\n" % len(header) + header + b"\r\n")
    sent, answered = stream_chunked(s, 400 * MiB)
    assert answered
    code, head, text = read_response(s)
    assert code == 413 and "does not fit" in text, (head, text)
    s.close()
    assert cg.usage() - before < 16 * MiB
    names = listing(daemon, sid)
    assert "huge.bin" not in names and not [n for n in names if n.startswith(".cela-")], names
    assert daemon.run(sid, "echo alive")["stdout"] == "alive\n"
