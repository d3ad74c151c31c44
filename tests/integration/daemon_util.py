"""A cela daemon started by a test (its own state dir, socket and port) and a small
HTTP client for it: unix socket (local root) or TCP with a key."""
import http.client
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import ownership
from conftest import CELA


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, config=None, nofile=None, dev=True):
        """dev: start with `--dev`, so local root may use the dev-only `host` template
        most tests run on."""
        self.dir = tempfile.mkdtemp(prefix="cela-test-")
        self.state = os.path.join(self.dir, "state")
        self.socket = os.path.join(self.dir, "cela.sock")
        self.port = free_port()
        self.config = config
        self.nofile = nofile  # (soft, hard) RLIMIT_NOFILE the daemon starts with
        self.dev = dev
        self.proc = None
        self.log = open(os.path.join(self.dir, "daemon.log"), "w+")

    def start(self):
        args = [CELA, "serve", "--state-dir", self.state, "--socket", self.socket,
                "--listen", f"127.0.0.1:{self.port}"]
        if self.dev:
            args.append("--dev")
        # The host-wide admission ledger is the test's own unless it names one: never
        # /run/cela/grants, which a daemon outside the tests may be using.
        config = dict(self.config or {})
        admission = dict(config.get("admission", {}))
        admission.setdefault("ledger_dir", os.path.join(self.dir, "grants"))
        config["admission"] = admission
        path = os.path.join(self.dir, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        args += ["--config", path]
        limit = self.nofile
        preexec = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limit)) if limit else None
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=preexec)
        ownership.register_process(self.proc.pid)
        ownership.register_state_dir(self.state)
        # Start includes recovery, which waits for the kernel to release what a crashed
        # daemon's sessions held (cgroups, loop-backed layers): seconds under I/O load.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("daemon did not start: " + self.logs())

    def logs(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    @property
    def key(self):
        with open(os.path.join(self.state, "dev.key")) as f:
            return f.read().strip()

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        """Stops the daemon and removes everything it was given (state, socket, logs)."""
        self.stop()
        self.log.close()
        ownership.remember_sessions(self.state)
        shutil.rmtree(self.dir, ignore_errors=True)

    def request(self, method, path, body=None, headers=None, tcp=False, key=None, raw=False, timeout=60):
        conn = (http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout) if tcp
                else UnixConnection(self.socket, timeout=timeout))
        h = dict(headers or {})
        if key:
            h["Authorization"] = f"Bearer {key}"
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        if raw:
            return resp.status, payload, resp
        return resp.status, (json.loads(payload) if payload else None), resp

    def session(self, **body):
        body.setdefault("template", "host")
        body.setdefault("limits", {"memory_mb": 256})
        status, s, _ = self.request("POST", "/v1/sessions", body)
        assert status == 201, s
        return s["id"]

    def run(self, sid, cmd, **extra):
        status, r, _ = self.request("POST", f"/v1/sessions/{sid}/run", {"cmd": cmd, **extra})
        assert status == 200, r
        return r

    def delete(self, sid):
        return self.request("DELETE", f"/v1/sessions/{sid}")


def cgroup_cpu_ns(sid):
    """CPU time the kernel charged a session's cgroup (v1 cpuacct or v2 cpu.stat)."""
    v1 = f"/sys/fs/cgroup/cpuacct/cela/{sid}/cpuacct.usage"
    if os.path.exists(v1):
        with open(v1) as f:
            return int(f.read())
    with open(f"/sys/fs/cgroup/cela/{sid}/cpu.stat") as f:
        for line in f:
            key, value = line.split()
            if key == "usage_usec":
                return int(value) * 1000
    raise AssertionError("no cpu.stat usage_usec")


def wait_for(fn, timeout=10.0, step=0.05):
    """fn()'s first truthy value within `timeout` seconds (else its last value)."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def read_until_closed(sock, seconds):
    """Reads `sock` for up to `seconds`: (bytes received, True if the peer closed it)."""
    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([sock], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False
