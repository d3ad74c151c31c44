"""The CLI's client commands (`cela session|exec|logs|cp`) against a daemon started
by the test: unix socket (root, no key) and TCP with CELA_API_KEY."""
import json
import os
import pty
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import CELA
from daemon_util import Daemon


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


def cli(daemon, words, *rest, url=None, env=None, timeout=60, input=None):
    """`cela WORDS --url URL REST...` (text); url defaults to the daemon's unix socket."""
    args = [CELA, *words]
    if url != "":
        args += ["--url", url or f"unix://{daemon.socket}"]
    return subprocess.run(args + list(rest), capture_output=True, text=True, timeout=timeout, input=input,
                          stdin=None if input is not None else subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def session(daemon):
    """A session made with `cela session create`; deleted after the test."""
    p = cli(daemon, ["session", "create"], "--template", "host", "--memory-mb", "256", "--env", "GREETING=hi")
    assert p.returncode == 0, p.stderr
    sid = p.stdout.strip()
    assert sid and "\n" not in sid
    yield sid
    daemon.delete(sid)


def test_exec_exit_code_and_streams(daemon, session):
    p = cli(daemon, ["exec", session], "--", "sh", "-c", "echo out; echo $GREETING; echo err >&2; exit 3")
    assert p.returncode == 3, p.stderr
    assert p.stdout == "out\nhi\n"
    assert p.stderr == "err\n"
    p = cli(daemon, ["exec", session], "--cwd", "/tmp", "--env", "X=1", "--", "sh", "-c", "pwd; echo $X")
    assert (p.returncode, p.stdout) == (0, "/tmp\n1\n"), p.stderr
    p = cli(daemon, ["exec", session], "--", "sh", "-c", "kill -TERM $$")
    assert p.returncode == 128 + 15
    p = cli(daemon, ["exec", session], "--timeout-s", "1", "--", "sleep", "30")
    assert p.returncode == 124, p.stderr


def test_exec_streams_before_the_end(daemon, session):
    start = time.monotonic()
    p = subprocess.Popen([CELA, "exec", session, "--url", f"unix://{daemon.socket}", "--", "sh", "-c",
                          "echo first; sleep 3; echo second"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline()
        took = time.monotonic() - start
        assert first == "first\n"
        assert took < 2.5, f"first line took {took:.1f}s"
        assert p.poll() is None
        rest, err = p.communicate(timeout=30)
        assert rest == "second\n", err
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_cp_round_trip(daemon, session, tmp_path):
    data = bytes(range(256)) * 300
    src = tmp_path / "up.bin"
    src.write_bytes(data)
    p = cli(daemon, ["cp"], str(src), f"{session}:/home/user/up.bin")
    assert p.returncode == 0, p.stderr
    p = cli(daemon, ["exec", session], "--", "sh", "-c", "wc -c < /home/user/up.bin")
    assert p.stdout.strip() == str(len(data))
    p = cli(daemon, ["cp"], f"{session}:/home/user/up.bin", str(tmp_path / "down.bin"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "down.bin").read_bytes() == data
    # Into a directory: keeps the file's name.
    p = cli(daemon, ["cp"], f"{session}:/home/user/up.bin", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "up.bin").read_bytes() == data
    p = cli(daemon, ["cp"], f"{session}:/home/user/missing", str(tmp_path / "x"))
    assert p.returncode == 1
    assert p.stderr.startswith("cela: ") and len(p.stderr.splitlines()) == 1


def test_logs(daemon, session):
    p = cli(daemon, ["exec", session], "--detach", "--", "sh", "-c", "echo one; sleep 1; echo two >&2")
    assert p.returncode == 0, p.stderr
    eid = p.stdout.strip()
    p = cli(daemon, ["logs", session, eid], "--follow")
    assert (p.returncode, p.stdout, p.stderr) == (0, "one\n", "two\n")
    p = cli(daemon, ["logs", session, eid])
    assert (p.returncode, p.stdout, p.stderr) == (0, "one\n", "two\n")
    p = cli(daemon, ["logs", session, "e-nope"])
    assert p.returncode == 1 and p.stderr.startswith("cela: ")


def test_ls_get_over_tcp(daemon, session):
    url = f"http://127.0.0.1:{daemon.port}"
    p = cli(daemon, ["session", "ls"], url=url, env={"CELA_API_KEY": daemon.key})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATE", "TEMPLATE", "CREATED"]
    assert any(l.split()[0] == session for l in lines[1:])
    p = cli(daemon, ["session", "ls"], "--json")
    assert session in [s["id"] for s in json.loads(p.stdout)]
    p = cli(daemon, ["session", "get", session], url=url, env={"CELA_API_KEY": daemon.key})
    assert p.returncode == 0 and json.loads(p.stdout)["id"] == session
    # Via CELA_URL, without a key: refused.
    p = cli(daemon, ["session", "ls"], url="", env={"CELA_URL": url, "CELA_API_KEY": ""})
    assert p.returncode == 1
    assert p.stderr.startswith("cela: ")


def test_rm_ends_the_session(daemon):
    p = cli(daemon, ["session", "create"], "--template", "host", "--memory-mb", "256", "--json")
    assert p.returncode == 0, p.stderr
    sid = json.loads(p.stdout)["id"]
    try:
        p = cli(daemon, ["session", "rm", sid])
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith(f"{sid} terminated")
        assert "cleanup:" in p.stdout
        p = cli(daemon, ["exec", sid], "--", "true")
        assert p.returncode == 1
        assert p.stderr.startswith("cela: ")
        assert "gone" in p.stderr or "ended" in p.stderr, p.stderr
    finally:
        daemon.delete(sid)


def test_usage_and_connection_errors(daemon, tmp_path):
    assert cli(daemon, ["exec"]).returncode == 2
    assert cli(daemon, ["session", "ls"], "--bogus").returncode == 2
    p = cli(daemon, ["cp"], str(tmp_path / "a"), str(tmp_path / "b"))
    assert p.returncode == 2
    p = cli(daemon, ["session", "ls"], url=f"unix://{tmp_path}/no.sock")
    assert p.returncode == 1
    assert p.stderr.startswith("cela: ") and len(p.stderr.splitlines()) == 1


def exec_popen(daemon, sid, *argv, stdin=subprocess.DEVNULL):
    return subprocess.Popen([CELA, "exec", sid, "--url", f"unix://{daemon.socket}", "--", *argv], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def reap(p):
    """Kills (by pid) a client still running and closes its pipes."""
    if p.poll() is None:
        p.kill()
    p.wait(30)
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()


def test_exec_forwards_stdin(daemon, session):
    p = cli(daemon, ["exec", session], "--", "sh", "-c", "cat; echo done", input="a\nb\n")
    assert (p.returncode, p.stdout) == (0, "a\nb\ndone\n"), p.stderr
    data = os.urandom(1 << 20)
    p = subprocess.run([CELA, "exec", session, "--url", f"unix://{daemon.socket}", "--", "wc", "-c"], input=data,
                       capture_output=True, timeout=60)
    assert (p.returncode, p.stdout.strip()) == (0, str(len(data)).encode()), p.stderr
    # Streamed, not read whole first: the command answers a line while stdin is still open.
    p = exec_popen(daemon, session, "sh", "-c", "read line; echo got $line", stdin=subprocess.PIPE)
    try:
        p.stdin.write("hello\n")
        p.stdin.flush()
        assert p.stdout.readline() == "got hello\n"
        p.stdin.close()
        assert p.wait(30) == 0
    finally:
        reap(p)


def test_exec_with_stdin_that_never_closes_still_ends(daemon, session):
    p = exec_popen(daemon, session, "sh", "-c", "echo hi", stdin=subprocess.PIPE)
    try:
        assert p.wait(30) == 0
        assert p.stdout.read() == "hi\n"
    finally:
        reap(p)


def test_exec_forwards_a_terminal_only_when_asked(daemon, session):
    master, slave = pty.openpty()
    try:
        # A terminal without --stdin: the command sees an empty, closed stdin at once.
        p = subprocess.run([CELA, "exec", session, "--url", f"unix://{daemon.socket}", "--", "sh", "-c",
                            "cat; echo done"], stdin=slave, capture_output=True, text=True, timeout=30)
        assert (p.returncode, p.stdout) == (0, "done\n"), p.stderr
        # With --stdin: what is typed reaches it, and ^D closes it.
        p = subprocess.Popen([CELA, "exec", session, "--url", f"unix://{daemon.socket}", "--stdin", "--", "sh",
                              "-c", "cat; echo done"], stdin=slave, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            os.write(master, b"typed\n")
            assert p.stdout.readline() == "typed\n"
            os.write(master, b"\x04")
            assert p.wait(30) == 0 and p.stdout.read() == "done\n"
        finally:
            reap(p)
    finally:
        os.close(master)
        os.close(slave)


def running_cmdlines(daemon, sid):
    p = cli(daemon, ["exec", sid], "--", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    return p.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_exec_stop_signal_kills_the_remote_exec(daemon, session, sig):
    p = exec_popen(daemon, session, "sh", "-c", "echo started; exec sleep 61")
    try:
        assert p.stdout.readline() == "started\n"
        p.send_signal(sig)
        assert p.wait(20) == 128 + sig, p.stderr.read()
        assert wait_until(lambda: "sleep 61" not in running_cmdlines(daemon, session), 10)
    finally:
        reap(p)


def test_exec_exit_codes_are_run_codes(daemon, session):
    for argv in (["no-such-command"], ["sh", "-c", "exit 9"], ["sh", "-c", "kill -KILL $$"]):
        ran = subprocess.run([CELA, "run", "--template", "host", "--", *argv], capture_output=True,
                             stdin=subprocess.DEVNULL, timeout=60)
        p = cli(daemon, ["exec", session], "--", *argv)
        assert p.returncode == ran.returncode, (argv, p.stderr)
    assert cli(daemon, ["exec", session], "--", "no-such-command").returncode == 127


def wait_until(pred, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


class CuttingProxy:
    """A TCP proxy to the daemon that cuts its first connection mid-event: right after
    the `id:` line of the second output event, before that event's data. Later
    connections pass through; their request heads are kept."""

    def __init__(self, port):
        self.upstream = ("127.0.0.1", port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests = []
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.server.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client, self.connections == 1), daemon=True).start()

    def _serve(self, client, cut):
        up = socket.create_connection(self.upstream, timeout=30)
        head = b""

        def to_server():
            nonlocal head
            try:
                while data := client.recv(65536):
                    if b"\r\n\r\n" not in head:
                        head += data
                        if b"\r\n\r\n" in head:
                            self.requests.append(head.split(b"\r\n\r\n")[0].decode())
                    up.sendall(data)
            except OSError:
                pass

        threading.Thread(target=to_server, daemon=True).start()
        seen = b""
        try:
            while data := up.recv(65536):
                if cut:
                    start = len(seen)
                    seen += data
                    ids = [m.end() for m in re.finditer(rb"\nid: [^\n]*\n", seen)]
                    if len(ids) >= 2:
                        client.sendall(seen[start:ids[1]])
                        break
                client.sendall(data)
        except OSError:
            pass
        finally:
            for s in (client, up):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()


def test_logs_follow_resumes_after_a_cut_without_loss_or_duplicate(daemon, session):
    p = cli(daemon, ["exec", session], "--detach", "--", "sh", "-c",
            "echo one; sleep 0.5; echo two; sleep 0.5; echo three >&2; sleep 0.5; echo four")
    assert p.returncode == 0, p.stderr
    eid = p.stdout.strip()
    proxy = CuttingProxy(daemon.port)
    try:
        p = cli(daemon, ["logs", session, eid], "-f", url=f"http://127.0.0.1:{proxy.port}",
                env={"CELA_API_KEY": daemon.key}, timeout=60)
        assert (p.returncode, p.stdout, p.stderr) == (0, "one\ntwo\nfour\n", "three\n")
        assert proxy.connections >= 2, "the stream was never cut"
        resumed = [r for r in proxy.requests[1:] if "last-event-id" in r.lower()]
        assert resumed, proxy.requests
    finally:
        proxy.close()


def test_logs_follow_streams_a_running_exec(daemon, session):
    p = cli(daemon, ["exec", session], "--detach", "--", "sh", "-c", "echo first; sleep 3; echo second")
    eid = p.stdout.strip()
    start = time.monotonic()
    f = subprocess.Popen([CELA, "logs", session, eid, "-f", "--url", f"unix://{daemon.socket}"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert f.stdout.readline() == "first\n"
        assert time.monotonic() - start < 2.5
        assert f.poll() is None
        assert f.wait(30) == 0 and f.stdout.read() == "second\n"
    finally:
        reap(f)


def make_tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(bytes(range(256)) * 64)
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("a.txt")


def remote_listing(daemon, sid, path):
    p = cli(daemon, ["exec", sid], "--", "sh", "-c",
            f"cd {path} && find . | sort && stat -c '%a' run.sh && readlink link && cat a.txt")
    assert p.returncode == 0, p.stderr
    return p.stdout


TREE = ".\n./a.txt\n./link\n./run.sh\n./sub\n./sub/b.bin\n755\na.txt\nalpha\n"


def test_cp_directory_up_and_down(daemon, session, tmp_path):
    src = tmp_path / "src"
    make_tree(src)
    home = "/home/user"
    # Upload, DST missing: created with SRC's contents.
    p = cli(daemon, ["cp"], str(src), f"{session}:{home}/tree")
    assert p.returncode == 0, p.stderr
    assert remote_listing(daemon, session, f"{home}/tree") == TREE
    # DST exists: SRC goes inside it, under its own name (trailing slash on SRC changes nothing).
    p = cli(daemon, ["cp"], str(src) + "/", f"{session}:{home}/tree")
    assert p.returncode == 0, p.stderr
    assert remote_listing(daemon, session, f"{home}/tree/src") == TREE
    # SRC/. : only the contents, into the existing DST.
    assert cli(daemon, ["exec", session], "--", "mkdir", f"{home}/flat").returncode == 0
    p = cli(daemon, ["cp"], f"{src}/.", f"{session}:{home}/flat/")
    assert p.returncode == 0, p.stderr
    assert remote_listing(daemon, session, f"{home}/flat") == TREE

    # Download, DST missing.
    down = tmp_path / "down"
    p = cli(daemon, ["cp"], f"{session}:{home}/tree", str(down))
    assert p.returncode == 0, p.stderr
    assert (down / "a.txt").read_text() == "alpha\n"
    assert (down / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 64
    assert os.readlink(down / "link") == "a.txt"
    assert (down / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (down / "src" / "sub" / "b.bin").is_file()
    # DST exists: into DST/NAME.
    p = cli(daemon, ["cp"], f"{session}:{home}/flat/", str(down))
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(down / "flat")) == ["a.txt", "link", "run.sh", "sub"]
    # SRC/. into an existing DST: merged.
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "mine").write_text("kept")
    p = cli(daemon, ["cp"], f"{session}:{home}/flat/.", str(merged))
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(merged)) == ["a.txt", "link", "mine", "run.sh", "sub"]


def test_cp_trailing_slash_rules(daemon, session, tmp_path):
    home = "/home/user"
    f = tmp_path / "f.txt"
    f.write_text("data")
    assert cli(daemon, ["cp"], str(f), f"{session}:{home}/f.txt").returncode == 0
    # A file into DST/ needs that directory to exist.
    p = cli(daemon, ["cp"], f"{session}:{home}/f.txt", str(tmp_path / "nodir") + "/")
    assert p.returncode == 1 and p.stderr.startswith("cela: ") and not (tmp_path / "nodir").exists()
    p = cli(daemon, ["cp"], str(f), f"{session}:{home}/nodir/")
    assert p.returncode == 1 and p.stderr.startswith("cela: ")
    # A file SRC with a trailing slash is not a directory.
    p = cli(daemon, ["cp"], f"{session}:{home}/f.txt/", str(tmp_path / "x"))
    assert p.returncode == 1 and not (tmp_path / "x").exists()
    # A directory onto a file: refused.
    d = tmp_path / "d"
    d.mkdir()
    (d / "in").write_text("1")
    p = cli(daemon, ["cp"], str(d), f"{session}:{home}/f.txt")
    assert p.returncode == 1 and "file" in p.stderr
    p = cli(daemon, ["cp"], f"{session}:{home}", str(f))
    assert p.returncode == 1 and f.read_text() == "data"
