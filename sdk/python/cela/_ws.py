"""WebSocket transport for interactive execs (GET /v1/sessions/{id}/ws).

Optional: it needs the ``websockets`` package (Debian: python3-websockets). Everything
else in the SDK is standard library only and works without it; only
``Sandbox.interactive()`` raises ``TransportError`` when it is missing.

The socket runs on an asyncio loop in a background thread; the public API is
synchronous and thread-safe. Server messages become ``WsEvent`` objects, read by
iterating the ``Interactive`` (or with ``next_event()``).
"""
from __future__ import annotations

import asyncio
import base64
import collections
import itertools
import json
import queue
import ssl
import threading
from typing import Any, Deque, Dict, Iterator, Mapping, Optional, Union

from .errors import CelaError, TransportError, error_from_response

try:  # optional dependency
    import websockets  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised by hiding the module in the tests
    websockets = None  # type: ignore[assignment]

Data = Union[str, bytes, bytearray, memoryview]
_CLOSED = object()


def available() -> bool:
    """True when the ``websockets`` package can be imported."""
    return websockets is not None


class WsEvent:
    """One server message.

    ``type``: ``started`` (``exec_id``, ``ref``, ``pid``), ``stdout`` / ``stderr``
    (``data`` bytes, ``offset`` "<stdout>,<stderr>" after it), ``exit`` (``record``,
    the exec record as REST returns it), ``error`` (``error``: the typed CelaError,
    with ``ref`` / ``exec_id`` when the failed message named one).
    """

    __slots__ = ("type", "exec_id", "ref", "pid", "data", "offset", "record", "error")

    def __init__(self, message: Mapping[str, Any]):
        self.type: str = message.get("type", "")
        self.exec_id: Optional[str] = message.get("exec")
        self.ref: Optional[str] = message.get("ref")
        self.pid: Optional[int] = message.get("pid")
        raw = message.get("data")
        self.data: bytes = base64.b64decode(raw) if isinstance(raw, str) else b""
        self.offset: Optional[str] = message.get("offset")
        self.record: Optional[Dict[str, Any]] = message.get("record")
        self.error: Optional[CelaError] = None
        if self.type == "error":
            err = message.get("error") or {}
            self.error = error_from_response(_STATUS.get(err.get("code"), 400),
                                             json.dumps({"error": err}).encode())

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        extra = f" {self.data[:40]!r}" if self.data else ""
        return f"<WsEvent {self.type} exec={self.exec_id} ref={self.ref}{extra}>"


_STATUS = {"invalid_request": 400, "unauthorized": 401, "forbidden": 403, "policy_denied": 403,
           "not_found": 404, "conflict": 409, "gone": 410, "payload_too_large": 413,
           "quota_exceeded": 429, "rate_limited": 429, "internal": 500, "capacity_exceeded": 503}


class Interactive:
    """A WebSocket to one session: several execs at once, stdin, kill, resize, attach.

        with sb.interactive() as ws:
            eid = ws.exec(["cat"])
            ws.send_stdin(eid, "hi\\n")
            ws.close_stdin(eid)
            for ev in ws:
                if ev.type == "stdout": print(ev.text)
                if ev.type == "exit" and ev.exec_id == eid: break

    ``offset(exec_id)`` is the position of the last output seen; after a dropped
    connection, ``Sandbox.interactive()`` again and ``attach(exec_id, offset)`` goes
    on from there without loss or repetition.
    """

    def __init__(self, client: Any, session_id: str, timeout: Optional[float] = 60.0,
                 ping_interval: Optional[float] = 20.0):
        if websockets is None:
            raise TransportError("the WebSocket transport needs the `websockets` package "
                                 "(Debian: python3-websockets); the REST API works without it")
        self._client = client
        self.session_id = session_id
        self.timeout = timeout
        self._ping_interval = ping_interval
        self._events: "queue.Queue[Any]" = queue.Queue()
        self._held: Deque[WsEvent] = collections.deque()  # read while waiting for a `started`
        self._held_lock = threading.Lock()
        self._offsets: Dict[str, str] = {}
        self._refs = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cela-ws", daemon=True)
        self._thread.start()
        self._ws: Any = None
        self.close_code: Optional[int] = None
        try:
            self._ws = self._call(self._open(), timeout)
        except BaseException:
            self._stop_loop()
            raise
        asyncio.run_coroutine_threadsafe(self._reader(), self._loop)

    # -- plumbing -------------------------------------------------------------------
    def _call(self, coro: Any, timeout: Optional[float]) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except CelaError:
            raise
        except websockets.exceptions.InvalidStatusCode as e:
            headers = {k.lower(): v for k, v in getattr(e, "headers", {}).items()} if getattr(e, "headers", None) else {}
            raise error_from_response(e.status_code, b"", headers) from e
        except Exception as e:  # noqa: BLE001 - every transport failure is a TransportError
            raise TransportError(f"websocket to session {self.session_id}: {e!r}") from e

    async def _open(self) -> Any:
        c = self._client
        path = c.target(f"/v1/sessions/{self.session_id}/ws")
        kw: Dict[str, Any] = {"max_size": None, "ping_interval": self._ping_interval, "open_timeout": self.timeout}
        if c.scheme == "unix":
            return await websockets.unix_connect(c.socket_path, "ws://localhost" + path, **kw)
        headers = {"User-Agent": "cela-python"}
        if c.api_key:
            headers["Authorization"] = "Bearer " + c.api_key
        scheme = "wss" if c.scheme == "https" else "ws"
        if scheme == "wss":
            kw["ssl"] = ssl.create_default_context()
        return await websockets.connect(f"{scheme}://{c.host}:{c.port}{path}", extra_headers=headers, **kw)

    async def _reader(self) -> None:
        try:
            async for message in self._ws:
                if isinstance(message, str):
                    self._events.put(json.loads(message))
        except Exception:  # noqa: BLE001 - the close is reported below
            pass
        self.close_code = self._ws.close_code
        self._events.put(_CLOSED)

    def _send(self, **message: Any) -> None:
        if self._ws is None:
            raise TransportError("websocket is closed")
        self._call(self._ws.send(json.dumps(message)), self.timeout)

    def _take(self, timeout: Optional[float]) -> Optional[WsEvent]:
        try:
            item = self._events.get(timeout=timeout)
        except queue.Empty:
            raise TransportError(f"no websocket message within {timeout}s") from None
        if item is _CLOSED:
            self._events.put(_CLOSED)  # stays closed for every later reader
            return None
        ev = WsEvent(item)
        if ev.exec_id and ev.offset:
            self._offsets[ev.exec_id] = ev.offset
        return ev

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    # -- client messages ------------------------------------------------------------
    def exec(self, argv_or_cmd: Any, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             timeout_s: Optional[float] = None, user: Optional[str] = None, stdin: Optional[Data] = None,
             stdin_open: bool = True, ref: Optional[str] = None, wait: bool = True) -> str:
        """Starts an exec (the body of ``Sandbox.exec``). Returns its id once the server says
        ``started`` (events meanwhile are kept for iteration); raises its error instead.
        With ``wait=False`` returns the ``ref`` at once (match it in the ``started`` event)."""
        from .sandbox import _exec_body  # shared with the REST transport
        ref = ref or f"r{next(self._refs)}"
        self._send(type="exec", ref=ref, **_exec_body(argv_or_cmd, cwd, env, timeout_s, user, stdin, stdin_open))
        if not wait:
            return ref
        kept = []
        try:
            while True:
                ev = self._take(self.timeout)
                if ev is None:
                    raise TransportError(f"websocket closed (code {self.close_code}) before exec {ref} started")
                if ev.ref == ref and ev.type == "error" and ev.error is not None:
                    raise ev.error
                kept.append(ev)
                if ev.ref == ref and ev.type == "started":
                    return ev.exec_id or ""
        finally:
            with self._held_lock:
                self._held.extend(kept)

    def send_stdin(self, exec_id: str, data: Data) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._send(type="stdin", exec=exec_id, data=base64.b64encode(bytes(data)).decode())

    def close_stdin(self, exec_id: str) -> None:
        self._send(type="close_stdin", exec=exec_id)

    def kill(self, exec_id: str, signal: Optional[str] = None, grace_s: Optional[float] = None) -> None:
        m: Dict[str, Any] = {"type": "kill", "exec": exec_id}
        if signal is not None:
            m["signal"] = signal
        if grace_s is not None:
            m["grace_s"] = grace_s
        self._send(**m)

    def resize(self, exec_id: str, cols: int, rows: int) -> None:
        self._send(type="resize", exec=exec_id, cols=int(cols), rows=int(rows))

    def attach(self, exec_id: str, offset: Optional[str] = None) -> None:
        """Streams the exec's output after ``offset`` ("<stdout>,<stderr>"; None = from the
        start), then its ``exit``; works on running and ended execs."""
        m: Dict[str, Any] = {"type": "attach", "exec": exec_id}
        if offset is not None:
            m["offset"] = offset
        self._send(**m)

    # -- server messages ------------------------------------------------------------
    def offset(self, exec_id: str) -> Optional[str]:
        """The position after the last output of ``exec_id`` seen on this socket."""
        return self._offsets.get(exec_id)

    def next_event(self, timeout: Any = "default") -> Optional[WsEvent]:
        """The next server message; None once the socket is closed."""
        with self._held_lock:
            if self._held:
                return self._held.popleft()
        return self._take(self.timeout if timeout == "default" else timeout)

    def __iter__(self) -> Iterator[WsEvent]:
        while True:
            ev = self.next_event()
            if ev is None:
                return
            yield ev

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._call(self._ws.close(), 10)
            except CelaError:
                pass
            self._ws = None
        self._stop_loop()

    def __enter__(self) -> "Interactive":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
