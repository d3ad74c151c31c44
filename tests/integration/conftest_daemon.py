"""A private `cela serve` for a test module: its own state dir, unix socket and TCP
port; started from CELA_BIN and stopped (SIGTERM, by pid) at the end.

    from conftest_daemon import CelaDaemon
    @pytest.fixture(scope="module")
    def daemon(tmp_path_factory):
        d = CelaDaemon.start(tmp_path_factory.mktemp("daemon"))
        yield d
        d.stop()
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import ownership

ROOT = Path(__file__).resolve().parents[2]
CELA = os.environ.get("CELA_BIN", str(ROOT / "build" / "cela"))


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _UnixConn(http.client.HTTPConnection):
    def __init__(self, path, timeout=5):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class CelaDaemon:
    def __init__(self, tmp, proc, port, log_path):
        self.tmp = Path(tmp)
        self.proc = proc
        self.pid = proc.pid
        self.port = port
        self.log_path = log_path
        self.state_dir = self.tmp / "state"
        self.socket_path = str(self.tmp / "cela.sock")
        self.unix_url = "unix://" + self.socket_path
        self.tcp_url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, tmp, binary=None, extra_args=(), timeout=60, dev=True):
        """dev: `--dev`, so local root may use the dev-only `host` template the tests
        run on (TCP callers never may: they use `base`)."""
        tmp = Path(tmp)
        port = free_port()
        log_path = tmp / "daemon.log"
        log = open(log_path, "wb")
        args = [binary or CELA, "serve", "--state-dir", str(tmp / "state"), "--socket", str(tmp / "cela.sock"),
                "--listen", f"127.0.0.1:{port}", *(["--dev"] if dev else []), *extra_args]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        ownership.register_process(proc.pid)
        ownership.register_state_dir(Path(tmp) / "state")
        log.close()
        d = cls(tmp, proc, port, log_path)
        try:
            d._wait_healthy(timeout)
        except BaseException:
            d.stop()
            raise
        return d

    def log(self):
        try:
            return Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""

    def _healthz(self, conn):
        try:
            conn.request("GET", "/healthz")
            r = conn.getresponse()
            r.read()
            return r.status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def _wait_healthy(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cela serve exited with {self.proc.returncode}:\n{self.log()}")
            if (os.path.exists(self.socket_path) and self._healthz(_UnixConn(self.socket_path))
                    and self._healthz(http.client.HTTPConnection("127.0.0.1", self.port, timeout=5))):
                return
            time.sleep(0.1)
        raise RuntimeError(f"cela serve not healthy after {timeout}s:\n{self.log()}")

    @property
    def api_key(self):
        return (self.state_dir / "dev.key").read_text().strip()

    def request(self, method, path, body=None, headers=None):
        """One request over the unix socket (no key); returns (status, parsed JSON or bytes)."""
        conn = _UnixConn(self.socket_path, timeout=120)
        try:
            data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
            conn.request(method, path, body=data, headers=headers or {})
            r = conn.getresponse()
            raw = r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, raw
        finally:
            conn.close()

    def stop(self, timeout=60):
        """SIGTERM to the pid we started; SIGKILL if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
