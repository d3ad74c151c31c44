"""HTTP/1.1 transport over a unix socket or TCP, standard library only."""
from __future__ import annotations

import http.client
import json
import os
import select
import socket
import ssl
import threading
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import TransportError, error_from_response

DEFAULT_SOCKET = "/run/cela/cela.sock"
DEFAULT_TCP_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 60.0
API_PREFIX = "/v1"

_UNSET: Any = object()
_IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTPConnection that talks to a unix-domain socket instead of host:port."""

    def __init__(self, socket_path: str, timeout: Optional[float] = None):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.timeout is not None:
                sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def default_url() -> str:
    """CELA_URL, else the local socket when it exists and we are root, else TCP on localhost."""
    env = os.environ.get("CELA_URL")
    if env:
        return env
    if os.path.exists(DEFAULT_SOCKET) and hasattr(os, "geteuid") and os.geteuid() == 0:
        return "unix://" + DEFAULT_SOCKET
    return DEFAULT_TCP_URL


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        if not self.body:
            return None
        return json.loads(self.body.decode("utf-8"))


def _lower_headers(resp: http.client.HTTPResponse) -> Dict[str, str]:
    return {k.lower(): v for k, v in resp.getheaders()}


class Client:
    """One daemon endpoint: URL, credentials and a small keep-alive connection pool.

    Thread-safe: each request takes its own connection from the pool.
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, max_idle: int = 4):
        self.url = url or default_url()
        if api_key is None:
            api_key = os.environ.get("CELA_API_KEY") or None
        self.api_key = api_key
        self.timeout = timeout
        self._max_idle = max_idle
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._parse_url(self.url)

    # -- endpoint -------------------------------------------------------------------
    def _parse_url(self, url: str) -> None:
        if url.startswith("unix:"):
            path = url[len("unix:"):]
            if path.startswith("//"):
                path = path[2:]
            if not path:
                raise ValueError(f"bad CELA_URL {url!r}: no socket path")
            self.scheme, self.socket_path, self.host, self.port, self.base_path = "unix", path, None, None, ""
            return
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"bad CELA_URL {url!r} (want unix:///path/to/cela.sock or http://host:port)")
        self.scheme = u.scheme
        self.socket_path = None
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")

    def __repr__(self) -> str:
        return f"cela.Client({self.url!r})"

    def _new_conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.scheme == "unix":
            return UnixHTTPConnection(self.socket_path, timeout=timeout)
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new_conn(timeout), False
            if conn.sock is None or _dropped(conn.sock):
                conn.close()
                continue
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle and conn.sock is not None:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    # -- requests -------------------------------------------------------------------
    def target(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        t = self.base_path + path
        if query:
            q = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if q:
                t += "?" + urllib.parse.urlencode(q)
        return t

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {"Accept": "application/json", "User-Agent": "cela-python"}
        if self.api_key and self.scheme != "unix":
            h["Authorization"] = "Bearer " + self.api_key
        if extra:
            h.update(extra)
        return h

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                json_body: Any = _UNSET, body: Any = None, headers: Optional[Mapping[str, str]] = None,
                timeout: Any = _UNSET) -> Response:
        """Sends one request and reads the whole answer; raises the typed error on non-2xx."""
        if timeout is _UNSET:
            timeout = self.timeout
        hdrs = self._headers(headers)
        if json_body is not _UNSET:
            body = json.dumps(json_body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif isinstance(body, str):
            body = body.encode("utf-8")
        if body is not None and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/octet-stream"
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        target = self.target(path, query)
        attempt = 0
        while True:
            attempt += 1
            conn, reused = self._take(timeout)
            sent = False
            try:
                conn.request(method, target, body=body, headers=hdrs)
                sent = True
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError) as e:
                conn.close()
                # A pooled keep-alive connection the server closed meanwhile: retry once on a
                # new one (the server did not answer, so it did not act on a non-idempotent call
                # it never read; idempotent calls are safe anyway).
                if reused and replayable and attempt == 1 and (
                        method in _IDEMPOTENT or isinstance(e, http.client.RemoteDisconnected) or not sent):
                    continue
                raise TransportError(f"{method} {target}: connection failed: {e}") from e
            except socket.timeout as e:
                conn.close()
                raise TransportError(f"{method} {target}: timed out after {timeout}s") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{method} {target} on {self.url}: {e}") from e
            hdr = _lower_headers(resp)
            if resp.will_close:
                conn.close()
            else:
                self._give_back(conn)
            if resp.status >= 300:
                raise error_from_response(resp.status, data, hdr)
            return Response(resp.status, hdr, data)

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return self.request(method, path, **kw).json()

    def open_stream(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                    headers: Optional[Mapping[str, str]] = None, timeout: Any = _UNSET
                    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Opens a streaming answer on a dedicated connection (the caller closes it)."""
        if timeout is _UNSET:
            timeout = self.timeout
        hdrs = self._headers(headers)
        target = self.target(path, query)
        conn = self._new_conn(timeout)
        try:
            conn.request(method, target, headers=hdrs)
            sock = conn.sock
            resp = conn.getresponse()
            # getresponse() drops conn.sock when the answer ends with the connection;
            # keep a handle so the stream can be cut (close_stream, tests).
            resp.cela_sock = sock  # type: ignore[attr-defined]
        except socket.timeout as e:
            conn.close()
            raise TransportError(f"{method} {target}: timed out after {timeout}s") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{method} {target} on {self.url}: {e}") from e
        if resp.status >= 300:
            try:
                data = resp.read()
            except (OSError, http.client.HTTPException):
                data = b""
            hdr = _lower_headers(resp)
            conn.close()
            raise error_from_response(resp.status, data, hdr)
        return conn, resp


def close_stream(conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
    """Closes a stream from open_stream (the response owns the socket once the connection let go)."""
    try:
        resp.close()
    finally:
        conn.close()


def _dropped(sock: socket.socket) -> bool:
    """True when an idle keep-alive socket was closed by the peer (readable = EOF or junk)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


def _query_value(v: Any) -> str:
    if v is True:
        return "1"
    if v is False:
        return "0"
    return str(v)
