"""PTY execs (`"tty": true`), resize, and `cela shell` / `cela run -it` driven under
tmux as a person would use them."""
import base64
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid

import pytest

from conftest import CELA
from daemon_util import Daemon, UnixConnection


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    yield d
    d.close()


@pytest.fixture
def sid(daemon):
    s = daemon.session()
    yield s
    daemon.delete(s)


class Output:
    """Follows an exec's output (SSE) on a thread: stdout and stderr as they come."""

    def __init__(self, daemon, sid, eid):
        self.out, self.err, self.exit = b"", b"", None
        self.cond = threading.Condition()
        self.conn = UnixConnection(daemon.socket, timeout=120)
        self.conn.request("GET", f"/v1/sessions/{sid}/execs/{eid}/output?follow=1")
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        event = None
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data = line[5:].strip()
                    with self.cond:
                        if event == "stdout":
                            self.out += base64.b64decode(data)
                        elif event == "stderr":
                            self.err += base64.b64decode(data)
                        elif event == "exit":
                            self.exit = json.loads(data)
                        self.cond.notify_all()
                    if event == "exit":
                        return
        finally:
            with self.cond:
                self.cond.notify_all()

    def wait_for(self, pattern, timeout=20):
        """Waits until stdout matches `pattern` (bytes regex); returns the match."""
        end = time.monotonic() + timeout
        with self.cond:
            while True:
                m = re.search(pattern, self.out)
                if m:
                    return m
                left = end - time.monotonic()
                assert left > 0 and self.exit is None, f"no {pattern!r} in {self.out!r}"
                self.cond.wait(left)

    def wait_exit(self, timeout=20):
        self.thread.join(timeout)
        assert self.exit is not None, self.out
        return self.exit

    def close(self):
        self.conn.close()


def start(daemon, sid, **body):
    body.setdefault("stdin_open", True)
    status, e, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", body)
    assert status == 202, e
    return e["id"]


def stdin(daemon, sid, eid, data, close=False):
    q = "?close=1" if close else ""
    status, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/stdin{q}", data,
                                     {"Content-Type": "application/octet-stream"})
    assert status == 204, body


def resize(daemon, sid, eid, body):
    return daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/resize", body)


# ---- the API ---------------------------------------------------------------------------


def test_tty_exec_sees_a_terminal_and_one_stream(daemon, sid):
    r = daemon.run(sid, "tty; stty size; echo TERM=$TERM; test -t 0 && test -t 1 && test -t 2 && echo all-tty; "
                        "ps -o stat= -p $$; echo err >&2", tty=True, cols=123, rows=45)
    assert r["exit_code"] == 0, r
    out = r["stdout"]
    assert re.search(r"^/dev/pts/\d+\r$", out, re.M), out
    assert "45 123\r\n" in out
    assert "TERM=xterm-256color\r\n" in out
    assert "all-tty\r\n" in out
    # Session leader (s) in the foreground process group (+) of its terminal.
    stat = out.split("\r\n")[4].strip()
    assert "s" in stat and "+" in stat, out
    # One stream: what went to stderr arrives on stdout, in order.
    assert out.endswith("err\r\n"), out
    assert r["stderr"] == ""
    # Defaults 80x24; the exec's own TERM wins.
    r = daemon.run(sid, "stty size; echo TERM=$TERM", tty=True, env={"TERM": "vt100"})
    assert r["stdout"] == "24 80\r\nTERM=vt100\r\n", r
    # Without tty, nothing changed: pipes, TERM=dumb.
    r = daemon.run(sid, "tty; echo TERM=$TERM")
    assert r["stdout"] == "not a tty\nTERM=dumb\n", r


def test_tty_fields_are_validated(daemon, sid):
    for bad in ({"cols": 0}, {"cols": 1001}, {"rows": -1}, {"rows": "24"}, {"cols": 80.5}, {"tty": "yes"}):
        status, body, _ = daemon.request("POST", f"/v1/sessions/{sid}/execs", {"cmd": "true", "tty": True, **bad})
        assert status == 400 and body["error"]["code"] == "invalid_request", (bad, body)
    eid = start(daemon, sid, cmd="sleep 30", tty=True)
    for bad in ({}, {"cols": 80}, {"cols": 0, "rows": 24}, {"cols": 80, "rows": 1001}, {"cols": 80, "rows": 24, "x": 1}):
        status, body, _ = resize(daemon, sid, eid, bad)
        assert status == 400 and body["error"]["code"] == "invalid_request", (bad, body)
    # Not a tty exec, an ended one, an unknown one.
    plain = start(daemon, sid, cmd="sleep 30")
    status, body, _ = resize(daemon, sid, plain, {"cols": 80, "rows": 24})
    assert status == 409 and body["error"]["code"] == "conflict", body
    daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
    daemon.request("POST", f"/v1/sessions/{sid}/execs/{plain}/kill", {"signal": "SIGKILL"})
    end = time.monotonic() + 10
    while daemon.request("GET", f"/v1/sessions/{sid}/execs/{eid}")[1]["state"] == "running":
        assert time.monotonic() < end
        time.sleep(0.05)
    status, body, _ = resize(daemon, sid, eid, {"cols": 80, "rows": 24})
    assert status == 409, body
    status, body, _ = resize(daemon, sid, "e_nope", {"cols": 80, "rows": 24})
    assert status == 404, body


def test_resize_changes_the_size_and_sends_sigwinch(daemon, sid):
    eid = start(daemon, sid, argv=["bash", "--norc", "--noprofile", "-c",
                                   "trap 'echo WINCH $(stty size)' WINCH; echo ready; while :; do sleep 0.05; done"],
                tty=True, cols=100, rows=30)
    out = Output(daemon, sid, eid)
    try:
        out.wait_for(rb"ready")
        status, body, _ = resize(daemon, sid, eid, {"cols": 132, "rows": 43})
        assert status == 204, body
        out.wait_for(rb"WINCH 43 132")
        status, _, _ = resize(daemon, sid, eid, {"cols": 1, "rows": 1000})
        assert status == 204
        out.wait_for(rb"WINCH 1000 1")
    finally:
        daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        out.close()


def test_ctrl_c_interrupts_the_foreground_job_not_the_shell(daemon, sid):
    eid = start(daemon, sid, argv=["bash", "--norc", "--noprofile", "-i"], tty=True)
    out = Output(daemon, sid, eid)
    try:
        stdin(daemon, sid, eid, b"PS1='$ '; echo go\n")
        out.wait_for(rb"[\r\n]go\r\n")
        stdin(daemon, sid, eid, b"sleep 100\n")
        time.sleep(0.5)
        began = time.monotonic()
        stdin(daemon, sid, eid, b"\x03")
        out.wait_for(rb"\^C")
        stdin(daemon, sid, eid, b"echo after=$?\n")
        # The line discipline turned ^C into SIGINT for sleep (the foreground group):
        # the shell goes on, sleep ended by signal 2 (130).
        out.wait_for(rb"after=130", timeout=10)
        assert time.monotonic() - began < 5
        stdin(daemon, sid, eid, b"echo alive; exit 7\n")
        out.wait_for(rb"alive")
        rec = out.wait_exit()
        assert rec["state"] == "exited" and rec["exit_code"] == 7, rec
        assert out.err == b""
    finally:
        daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        out.close()


def test_sessions_do_not_share_ptys(daemon, sid):
    """From inside: session B's /dev/pts shows none of A's terminals, and B's pty of
    the same number is its own (what A types never reaches B)."""
    other = daemon.session()
    try:
        eid = start(daemon, sid, cmd="echo held; sleep 60", tty=True)
        out = Output(daemon, sid, eid)
        out.wait_for(rb"held")
        r = daemon.run(sid, "ls /dev/pts")
        assert r["stdout"].split() == ["0", "ptmx"], r
        r = daemon.run(other, "ls /dev/pts; ls /dev/pts/0 2>&1 || echo no-0")
        assert r["stdout"].split()[:1] == ["ptmx"] and "no-0" in r["stdout"], r
        # B's own tty exec gets pts 0 of its own devpts, while A's pts 0 is in use.
        r = daemon.run(other, "tty; ls /dev/pts", tty=True)
        assert r["stdout"].split() == ["/dev/pts/0", "0", "ptmx"], r
        # Root in B, trying the devpts of A by device number: there is no node for it,
        # and a new one cannot be made.
        r = daemon.run(other, "mknod /tmp/p c 136 0 2>&1 || echo refused", user="root")
        assert "refused" in r["stdout"], r
        daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        out.close()
    finally:
        daemon.delete(other)


def test_a_root_terminal_is_closed_to_the_user(daemon, sid):
    """Inside one session: a root tty exec's pty is root's alone (0600), so the user's
    code can neither read its keystrokes nor write to its screen."""
    eid = start(daemon, sid, cmd="echo held; sleep 60", tty=True, user="root")
    out = Output(daemon, sid, eid)
    try:
        out.wait_for(rb"held")
        r = daemon.run(sid, "stat -c '%a %u' /dev/pts/0; (echo x > /dev/pts/0) 2>/dev/null || echo no-write; "
                            "(timeout 1 cat /dev/pts/0) 2>/dev/null </dev/null || echo no-read")
        assert r["stdout"].split("\n")[:3] == ["600 0", "no-write", "no-read"], r
        # The user's own tty exec gets a pty the user owns.
        r = daemon.run(sid, "stat -c '%a %u' $(tty)", tty=True)
        assert r["stdout"] == "600 1000\r\n", r
    finally:
        daemon.request("POST", f"/v1/sessions/{sid}/execs/{eid}/kill", {"signal": "SIGKILL"})
        out.close()


def test_ptys_past_the_limit_fail_cleanly(tmp_path):
    d = Daemon(config={"session_budgets": {"ptys": 3}}).start()
    try:
        s = d.session()
        # Opening /dev/ptmx past max= fails with ENOSPC inside, nothing worse.
        r = d.run(s, "python3 -c \"\nimport os,errno\nfds=[]\ntry:\n  while True: fds.append(os.open('/dev/ptmx', os.O_RDWR))\n"
                     "except OSError as e: print(len(fds), errno.errorcode[e.errno])\"")
        assert r["stdout"] == "3 ENOSPC\n", r
        # Every pty held: a tty exec fails to start and says why; the session goes on.
        holder = start(d, s, cmd="python3 -c \"import os,time\nfds=[os.open('/dev/ptmx', os.O_RDWR) for _ in range(3)]\n"
                                 "print('holding', flush=True); time.sleep(60)\"")
        out = Output(d, s, holder)
        out.wait_for(rb"holding")
        status, body, _ = d.request("POST", f"/v1/sessions/{s}/run", {"cmd": "echo hi", "tty": True})
        assert status == 200 and body["state"] == "failed", body
        assert "no terminal left" in body["reason"], body
        d.request("POST", f"/v1/sessions/{s}/execs/{holder}/kill", {"signal": "SIGKILL"})
        out.wait_exit()
        out.close()
        # Ended tty execs give their pty back: more of them than max= run one by one.
        for _ in range(5):
            r = d.run(s, "tty", tty=True)
            assert r["exit_code"] == 0 and r["stdout"].startswith("/dev/pts/"), r
        d.delete(s)
    finally:
        d.close()


# ---- `cela shell` and `cela run -it` under tmux ------------------------------------------


class Tmux:
    """A private tmux server (its own socket name) with one window running `argv`."""

    def __init__(self, argv, cols=100, rows=30):
        self.name = "cela-test-" + uuid.uuid4().hex[:10]
        self.status_file = f"/tmp/{self.name}.status"
        self.socket = ""
        line = " ".join(shlex_quote(a) for a in argv) + f"; echo $? > {self.status_file}; sleep 600"
        self.tmux("new-session", "-d", "-x", str(cols), "-y", str(rows), "sh", "-c", line)
        self.socket = self.tmux("display-message", "-p", "#{socket_path}").stdout.strip()

    def tmux(self, *args):
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True, text=True, timeout=30, check=True)

    def keys(self, *keys):
        self.tmux("send-keys", *keys)

    def type(self, text):
        self.tmux("send-keys", "-l", text)

    def screen(self):
        return self.tmux("capture-pane", "-p").stdout

    def wait_screen(self, pattern, timeout=20):
        end = time.monotonic() + timeout
        while True:
            text = self.screen()
            if re.search(pattern, text, re.M):
                return text
            assert time.monotonic() < end, f"no {pattern!r} on screen:\n{text}"
            time.sleep(0.1)

    def wait_prompt(self, prompt=r"\$", timeout=20):
        """Waits until the last line with text is a prompt (ends in `prompt`)."""
        end = time.monotonic() + timeout
        while True:
            lines = [l for l in self.screen().splitlines() if l.strip()]
            if lines and re.search(prompt + r"\s*$", lines[-1]):
                return
            assert time.monotonic() < end, "no prompt on screen:\n" + self.screen()
            time.sleep(0.1)

    def exit_status(self, timeout=20):
        end = time.monotonic() + timeout
        while not os.path.exists(self.status_file):
            assert time.monotonic() < end, "the command did not end:\n" + self.screen()
            time.sleep(0.1)
        with open(self.status_file) as f:
            return int(f.read())

    def close(self):
        subprocess.run(["tmux", "-L", self.name, "kill-server"], capture_output=True, timeout=30)
        for path in (self.status_file, self.socket):
            if path and os.path.exists(path):
                os.unlink(path)


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def base_sid(daemon):
    status, s, _ = daemon.request("POST", "/v1/sessions", {"template": "base", "limits": {"memory_mb": 256}})
    assert status == 201, s
    yield s["id"]
    daemon.delete(s["id"])


@needs_tmux
def test_cela_shell_as_a_person_uses_it(daemon, base_sid):
    t = Tmux([CELA, "shell", "--url", f"unix://{daemon.socket}", base_sid])
    try:
        # The template user's login shell (bash), on a terminal of the window's size.
        t.wait_screen(r"\$\s*$")
        t.type("stty size; tty; echo $TERM; echo $0\n")
        t.wait_screen(r"^30 100$")
        t.wait_screen(r"^xterm-256color$")
        assert re.search(r"^/dev/pts/\d+$", t.screen(), re.M)
        # The window changes size: the remote terminal follows (SIGWINCH -> resize).
        t.tmux("resize-window", "-x", "120", "-y", "35")
        time.sleep(0.5)
        t.type("clear; stty size\n")
        t.wait_screen(r"^35 120$")
        # python3 interactively: a prompt, 1+1, 2.
        t.type("python3\n")
        t.wait_screen(r"^>>>\s*$")
        t.type("1+1\n")
        t.wait_screen(r"^2$")
        t.keys("C-d")
        t.wait_prompt()
        # A full-screen program: top draws its screen, q quits back to the shell.
        t.type("clear; top -d 1\n")
        t.wait_screen(r"^\s*PID\s+USER")
        t.wait_screen(r"^(Tasks|top - )")
        t.type("q")
        t.wait_prompt()
        t.type("echo back\n")
        t.wait_screen(r"^back$")
        # Ctrl-C reaches the remote foreground job, not cela.
        t.type("sleep 100\n")
        time.sleep(0.5)
        t.keys("C-c")
        t.type("echo rc=$?\n")
        t.wait_screen(r"^rc=130$")
        t.type("exit 3\n")
        assert t.exit_status() == 3
    finally:
        t.close()


def shell_then_stty(daemon, sid, pid_file, *command):
    """A pane line: `cela shell` (its pid written first), then its exit code and our
    terminal's mode once it is over."""
    words = " ".join(shlex_quote(w) for w in [CELA, "shell", "--url", f"unix://{daemon.socket}", sid, *command])
    inner = f"echo $$ > {pid_file}; exec {words}"
    return ["sh", "-c", f"sh -c {shlex_quote(inner)}; echo cela=$?; stty -a"]


def assert_cooked(t):
    """Our terminal is back as it was: line editing and echo on."""
    screen = t.wait_screen(r"icanon")
    assert re.search(r"(^|\s)icanon(\s|$)", screen) and re.search(r"(^|\s)echo(\s|$)", screen), screen


@needs_tmux
def test_cela_shell_with_a_command_and_terminal_restored(daemon, base_sid, tmp_path):
    t = Tmux(shell_then_stty(daemon, base_sid, tmp_path / "pid", "--", "sh", "-c", "read x; echo got=$x; exit 5"))
    try:
        t.wait_screen(r"^\s*$")
        time.sleep(1)
        t.type("hello\n")
        t.wait_screen(r"^got=hello\s*$")
        t.wait_screen(r"^cela=5$")
        assert_cooked(t)
    finally:
        t.close()


@needs_tmux
def test_cela_shell_ends_cleanly_on_sigterm(daemon, base_sid, tmp_path):
    """A signal from outside (not a key): the exec is killed, our terminal restored,
    128+15."""
    t = Tmux(shell_then_stty(daemon, base_sid, tmp_path / "pid"))
    try:
        t.wait_prompt()
        t.type("sleep 1000\n")
        time.sleep(0.5)
        pid = int((tmp_path / "pid").read_text())
        assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "cela"
        os.kill(pid, 15)
        t.wait_screen(r"^cela=143$")
        assert_cooked(t)
    finally:
        t.close()


@needs_tmux
def test_cela_run_it(tmp_path):
    t = Tmux([CELA, "run", "-it", "--template", "base", "--", "bash", "--norc", "-i"], cols=90, rows=20)
    try:
        t.wait_screen(r"\$\s*$", timeout=60)
        t.type("stty size; tty\n")
        t.wait_screen(r"^20 90$")
        t.wait_screen(r"^/dev/pts/0$")
        t.type("python3 -q\n")
        t.wait_screen(r"^>>>\s*$")
        t.type("6*7\n")
        t.wait_screen(r"^42$")
        t.keys("C-d")
        t.type("exit 4\n")
        assert t.exit_status(timeout=30) == 4
    finally:
        t.close()
