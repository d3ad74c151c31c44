"""A keep-alive HTTP client for a benchmark's private daemon: one connection over the
unix socket, reused for every request (daemon_util's request opens a new connection per
call, which would put a connect and an accept into every measured round trip).

`connects` counts the connections it opened, so a report can show that a series really
ran on one connection (1) or say how often the daemon closed it."""
import json
import sys
import time

import harness

harness.integration_path()
from daemon_util import UnixConnection  # noqa: E402


class KeepAlive:
    def __init__(self, socket_path, timeout=120):
        self.socket_path = socket_path
        self.timeout = timeout
        self.conn = None
        self.connects = 0

    def connection(self):
        """The open connection (connecting first when there is none)."""
        if self.conn is None or self.conn.sock is None:
            if self.conn is not None:
                self.conn.close()
            self.conn = UnixConnection(self.socket_path, timeout=self.timeout)
            self.conn.connect()
            self.connects += 1
        return self.conn

    def send(self, method, path, body=None):
        """Sends one request and returns its response unread (for streams)."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn = self.connection()
        try:
            conn.request(method, path, body=data, headers=headers)
            return conn.getresponse()
        except (ConnectionError, OSError):
            # The daemon closed an idle keep-alive connection: one retry on a new one.
            conn.close()
            conn = self.connection()
            conn.request(method, path, body=data, headers=headers)
            return conn.getresponse()

    def call(self, method, path, body=None):
        """(status, parsed JSON body or None); the body is read whole, so the
        connection can carry the next request."""
        r = self.send(method, path, body)
        payload = r.read()
        if r.will_close:
            self.conn.close()
        try:
            parsed = json.loads(payload) if payload else None
        except ValueError:
            parsed = {"raw": payload[:500].decode(errors="replace")}
        return r.status, parsed

    def timed(self, method, path, body=None):
        """(milliseconds, status, body) of one request on the kept-alive connection."""
        t0 = time.perf_counter()
        status, parsed = self.call(method, path, body)
        return (time.perf_counter() - t0) * 1000, status, parsed

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def error_text(status, body):
    """What a failed answer said, short: `503 capacity_exceeded: message`."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        return f"{status} {e.get('code', '')}: {e.get('message', '')}".strip()
    return f"{status} {json.dumps(body)[:300]}"


if __name__ == "__main__":
    sys.exit("a module of the benchmarks (bench/report.py), not a script")
