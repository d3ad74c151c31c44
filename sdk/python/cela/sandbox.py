"""Sandbox sessions, execs and files (API.md "Sessions", "Execs", "Files")."""
from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._transport import Client, _UNSET, close_stream
from .errors import CelaError, Conflict, ExecTimeout, Gone, NotFound, TransportError, error_from_response

Command = Union[str, Sequence[str]]
Data = Union[bytes, bytearray, memoryview, str]


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _as_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def _decode_output(value: Any, encoding: Optional[str]) -> Tuple[str, bytes]:
    """(text, raw bytes) of one output field of a run/output answer."""
    if value is None:
        return "", b""
    if encoding == "base64":
        try:
            raw = base64.b64decode(value)
        except (binascii.Error, ValueError):
            raw = str(value).encode("utf-8", errors="replace")
        return raw.decode("utf-8", errors="replace"), raw
    text = str(value)
    return text, text.encode("utf-8", errors="surrogateescape")


def _exec_body(command: Command, cwd: Optional[str], env: Optional[Mapping[str, str]],
               timeout_s: Optional[float], user: Optional[str], stdin: Optional[Data],
               stdin_open: Optional[bool]) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if isinstance(command, str):
        body["cmd"] = command
    elif isinstance(command, (bytes, bytearray)):
        raise TypeError("command must be a str (shell line) or a list of str (argv)")
    else:
        argv = list(command)
        if not argv:
            raise ValueError("argv must not be empty")
        body["argv"] = [str(a) for a in argv]
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if user is not None:
        body["user"] = user
    if stdin is not None:
        if isinstance(stdin, (bytes, bytearray, memoryview)):
            stdin = bytes(stdin).decode("utf-8")  # the wire field is text
        body["stdin"] = stdin
    if stdin_open is not None:
        body["stdin_open"] = bool(stdin_open)
    return body


class ExecResult:
    """A finished exec: its record plus its output."""

    def __init__(self, record: Mapping[str, Any], stdout: Any = None, stderr: Any = None,
                 encoding: Optional[str] = None):
        self.record: Dict[str, Any] = dict(record)
        self.stdout, self.stdout_raw = _decode_output(stdout, encoding)
        self.stderr, self.stderr_raw = _decode_output(stderr, encoding)

    id = property(lambda self: self.record.get("id"))
    session_id = property(lambda self: self.record.get("session_id"))
    state = property(lambda self: self.record.get("state"))
    exit_code = property(lambda self: self.record.get("exit_code"))
    signal = property(lambda self: self.record.get("signal"))
    reason = property(lambda self: self.record.get("reason"))
    duration_ms = property(lambda self: self.record.get("duration_ms"))
    cpu_ms = property(lambda self: self.record.get("cpu_ms"))
    peak_memory_bytes = property(lambda self: self.record.get("peak_memory_bytes"))
    output_truncated = property(lambda self: bool(self.record.get("output_truncated")))

    @property
    def ok(self) -> bool:
        """True when the command exited by itself with status 0."""
        return self.state == "exited" and self.exit_code == 0

    def __repr__(self) -> str:
        return (f"ExecResult(state={self.state!r}, exit_code={self.exit_code!r}, "
                f"stdout={self.stdout[:60]!r}, stderr={self.stderr[:60]!r})")


class OutputChunk:
    """One piece of live output: ``stream`` is "stdout" or "stderr", ``data`` is bytes.

    ``id`` is the stream position after this chunk ("<stdout offset>,<stderr offset>"),
    usable as ``last_event_id`` to resume elsewhere.
    """

    __slots__ = ("stream", "data", "id")

    def __init__(self, stream: str, data: bytes, id: Optional[str]):
        self.stream = stream
        self.data = data
        self.id = id

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return f"OutputChunk({self.stream!r}, {self.data!r}, id={self.id!r})"


def _sse_events(resp: http.client.HTTPResponse) -> Iterator[Tuple[str, str, Optional[str]]]:
    """(event, data, id) of each event of a text/event-stream answer; comments skipped."""
    event: Optional[str] = None
    data: List[str] = []
    eid: Optional[str] = None
    has_data = False
    while True:
        line = resp.readline()
        if not line:
            return
        text = line.decode("utf-8", errors="replace")
        if text.endswith("\n"):
            text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
        if not text:
            if has_data or event is not None:
                yield (event or "message", "\n".join(data), eid)
            event, data, eid, has_data = None, [], None, False
            continue
        if text.startswith(":"):
            continue
        field, sep, value = text.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
            has_data = True
        elif field == "id":
            eid = value


class ExecHandle:
    """A running (or finished) exec started with ``Sandbox.exec``."""

    def __init__(self, sandbox: "Sandbox", exec_id: str, state: Optional[str] = None):
        self.sandbox = sandbox
        self.id = exec_id
        self.state = state
        self.last_event_id: Optional[str] = None  # position of the last chunk output() gave
        self._record: Optional[Dict[str, Any]] = None
        self._stream: Optional[Tuple[http.client.HTTPConnection, http.client.HTTPResponse]] = None

    @property
    def _path(self) -> str:
        return f"/v1/sessions/{_quote(self.sandbox.id)}/execs/{_quote(self.id)}"

    def __repr__(self) -> str:
        return f"ExecHandle({self.id!r}, session={self.sandbox.id!r})"

    def info(self) -> Dict[str, Any]:
        """The exec record (GET …/execs/{eid})."""
        rec = self.sandbox._client.json("GET", self._path)
        self.state = rec.get("state")
        if self.state != "running":
            self._record = rec
        return rec

    # -- output ---------------------------------------------------------------------
    def _follow(self, position: Optional[str], timeout: Optional[float]):
        headers = {"Accept": "text/event-stream"}
        if position:
            headers["Last-Event-ID"] = position
        return self.sandbox._client.open_stream("GET", self._path + "/output", query={"follow": 1},
                                                headers=headers, timeout=timeout)

    def output(self, last_event_id: Optional[str] = None, *, reconnect: bool = True,
               max_retries: int = 5, read_timeout: Any = _UNSET) -> Iterator[OutputChunk]:
        """Yields OutputChunk objects as the exec produces output, until it ends.

        Starts from the beginning (or from ``last_event_id``). When the connection drops,
        it reconnects with ``Last-Event-ID`` so nothing is lost or repeated. After the
        end, ``wait()`` answers at once from the record the stream delivered.
        """
        position = last_event_id
        if read_timeout is _UNSET:
            read_timeout = self.sandbox._client.timeout
        failures = 0
        while True:
            try:
                conn, resp = self._follow(position, read_timeout)
            except TransportError:
                failures += 1
                if not reconnect or failures > max_retries:
                    raise
                time.sleep(min(0.1 * 2 ** failures, 2.0))
                continue
            self._stream = (conn, resp)
            error: Optional[BaseException] = None
            try:
                for event, data, eid in _sse_events(resp):
                    if event in ("stdout", "stderr"):
                        chunk = base64.b64decode(data) if data else b""
                        if eid:
                            position = eid
                            self.last_event_id = eid
                        failures = 0
                        if chunk:
                            yield OutputChunk(event, chunk, eid)
                    elif event == "exit":
                        if eid:
                            position = eid
                            self.last_event_id = eid
                        try:
                            rec = json.loads(data)
                        except ValueError:
                            rec = None
                        if isinstance(rec, dict):
                            self._record = rec
                            self.state = rec.get("state")
                        return
                    elif event == "error":
                        raise _stream_error(data, self)
            except socket.timeout as e:
                error = e  # quiet for read_timeout: re-open (cheap; also catches half-open links)
                failures -= 1
            except (OSError, http.client.HTTPException, ValueError, binascii.Error) as e:
                error = e
            finally:
                self._stream = None
                close_stream(conn, resp)
            # The stream ended without `exit`: the connection dropped. Resume.
            failures += 1
            if not reconnect or failures > max_retries:
                raise TransportError(f"output stream of exec {self.id} dropped: {error or 'closed early'}",
                                     session_id=self.sandbox.id, exec_id=self.id)
            if failures > 1:
                time.sleep(min(0.1 * 2 ** failures, 2.0))

    def _drop_stream(self) -> None:
        """Closes the live output connection under output() (tests use this to simulate a drop)."""
        s = self._stream
        sock = getattr(s[1], "cela_sock", None) if s is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- end ------------------------------------------------------------------------
    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for the exec to end; returns its ExecResult (record + full output).

        Raises ``cela.ExecTimeout`` after ``timeout`` seconds (the exec keeps running).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        client = self.sandbox._client
        rec = self._record
        while rec is None:
            cur = self.info()
            if cur.get("state") != "running":
                rec = cur
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ExecTimeout(f"exec {self.id} still running after {timeout}s",
                                  session_id=self.sandbox.id, exec_id=self.id)
            read_timeout = client.timeout
            if remaining is not None:
                read_timeout = remaining if read_timeout is None else min(read_timeout, remaining)
            # Follow from the current end so only the `exit` event comes back.
            pos = f"{int(cur.get('stdout_bytes') or 0)},{int(cur.get('stderr_bytes') or 0)}"
            try:
                conn, resp = self._follow(pos, max(read_timeout, 0.05) if read_timeout is not None else None)
            except TransportError:
                time.sleep(0.2)
                continue
            try:
                for event, data, _ in _sse_events(resp):
                    if event == "exit":
                        try:
                            r = json.loads(data)
                        except ValueError:
                            r = None
                        if isinstance(r, dict):
                            rec = r
                        break
                    if event == "error":
                        raise _stream_error(data, self)
            except (OSError, http.client.HTTPException):
                pass  # timeout or drop: look at the record again
            finally:
                close_stream(conn, resp)
        self._record = rec
        self.state = rec.get("state")
        # The output, complete (GET …/output; a short 409 window right at the end is retried).
        for attempt in range(50):
            try:
                out = client.json("GET", self._path + "/output")
                break
            except Conflict:
                time.sleep(0.05 * min(attempt + 1, 10))
        else:
            out = client.json("GET", self._path + "/output")
        if rec.get("state") == "running":  # the stream's record may predate the final one
            rec = self.info()
        return ExecResult(rec, out.get("stdout"), out.get("stderr"), out.get("encoding"))

    def kill(self, signal: str = "SIGTERM", grace_s: float = 2) -> Any:
        """Ends the exec's whole process tree (SIGKILL after ``grace_s``)."""
        return self.sandbox._client.json("POST", self._path + "/kill",
                                         json_body={"signal": signal, "grace_s": grace_s})

    # -- stdin ----------------------------------------------------------------------
    def write_stdin(self, data: Data, close: bool = False) -> None:
        self.sandbox._client.request("POST", self._path + "/stdin", body=_as_bytes(data),
                                     query={"close": 1} if close else None)

    def close_stdin(self) -> None:
        self.sandbox._client.request("POST", self._path + "/stdin", body=b"", query={"close": 1})


def _stream_error(data: str, handle: ExecHandle) -> CelaError:
    """The typed error of an `error` event (its data: an error object, wrapped or not)."""
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    err = obj.get("error") if isinstance(obj, dict) and isinstance(obj.get("error"), dict) else obj
    if not isinstance(err, dict):
        return CelaError(f"output stream of exec {handle.id} failed: {data[:300]}", code="stream_error",
                         session_id=handle.sandbox.id, exec_id=handle.id)
    status = err.get("status") if isinstance(err.get("status"), int) else 500
    return error_from_response(status, json.dumps({"error": err}).encode("utf-8"))


class Files:
    """File operations inside one sandbox (``sb.files``)."""

    def __init__(self, sandbox: "Sandbox"):
        self._sb = sandbox

    @property
    def _base(self) -> str:
        return f"/v1/sessions/{_quote(self._sb.id)}"

    def write(self, path: str, data: Data, mode: Union[int, str, None] = None,
              parents: bool = False) -> Dict[str, Any]:
        """Writes a file (created or replaced); returns {path, size, sha256}.

        ``data`` may be bytes, str (UTF-8) or a binary file object (streamed).
        ``mode`` is an int (0o644) or an octal string ("0644").
        """
        query: Dict[str, Any] = {"path": path}
        if mode is not None:
            query["mode"] = format(mode, "04o") if isinstance(mode, int) else str(mode)
        if parents:
            query["parents"] = 1
        body = data if hasattr(data, "read") else _as_bytes(data)
        return self._sb._client.json("PUT", self._base + "/files", query=query, body=body)

    def read(self, path: str) -> bytes:
        return self._sb._client.request("GET", self._base + "/files", query={"path": path}).body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding, errors="replace")

    def list(self, path: str = "/", depth: int = 1) -> List[Dict[str, Any]]:
        """Entries under ``path``: dicts with name, path, type, size, mode, mtime, symlink_target."""
        ans = self._sb._client.json("GET", self._base + "/fs", query={"path": path, "depth": depth})
        return list(ans.get("entries") or [])

    def remove(self, path: str, recursive: bool = False) -> None:
        q: Dict[str, Any] = {"path": path}
        if recursive:
            q["recursive"] = 1
        self._sb._client.request("DELETE", self._base + "/files", query=q)

    def mkdir(self, path: str, parents: bool = False) -> None:
        self._sb._client.json("POST", self._base + "/fs/mkdir", json_body={"path": path, "parents": parents})

    def move(self, src: str, dst: str, overwrite: bool = False) -> None:
        self._sb._client.json("POST", self._base + "/fs/move",
                              json_body={"from": src, "to": dst, "overwrite": overwrite})

    def exists(self, path: str) -> bool:
        try:
            self._sb._client.request("HEAD", self._base + "/files", query={"path": path})
            return True
        except NotFound:
            return False

    def download_archive(self, path: str) -> bytes:
        """A tar of the directory ``path``."""
        return self._sb._client.request("GET", self._base + "/archive", query={"path": path},
                                        timeout=None).body

    def upload_archive(self, path: str, tar: Data) -> Dict[str, Any]:
        """Extracts a tar (bytes or binary file object) into the directory ``path``."""
        body = tar if hasattr(tar, "read") else _as_bytes(tar)
        return self._sb._client.json("PUT", self._base + "/archive", query={"path": path}, body=body,
                                     timeout=None)


class Sandbox:
    """One cela session. Use ``Sandbox.create(...)`` (best as a context manager) or
    ``Sandbox.connect(id)``."""

    def __init__(self, client: Client, info: Mapping[str, Any]):
        self._client = client
        self._info: Dict[str, Any] = dict(info)
        self.id: str = self._info["id"]
        self.files = Files(self)
        self._final: Optional[Dict[str, Any]] = None

    # -- lifecycle ------------------------------------------------------------------
    @classmethod
    def create(cls, template: Optional[str] = None, limits: Optional[Mapping[str, Any]] = None,
               env: Optional[Mapping[str, str]] = None, metadata: Optional[Mapping[str, str]] = None,
               wait_s: Optional[int] = None, url: Optional[str] = None, api_key: Optional[str] = None,
               **extra: Any) -> "Sandbox":
        """Creates a session and returns once it is ready to run code.

        ``wait_s`` waits up to that many seconds for host capacity instead of failing
        with CapacityExceeded. Extra keyword arguments (``network``, ``packages``,
        ``volumes``, ``secrets``, ``auto_pause_s``, ``auto_resume``, ``pool``, ...) are
        passed through in the request body.
        """
        client = Client(url, api_key)
        body: Dict[str, Any] = {}
        if template is not None:
            body["template"] = template
        if limits is not None:
            body["limits"] = dict(limits)
        if env is not None:
            body["env"] = dict(env)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        body.update({k: v for k, v in extra.items() if v is not None})
        timeout = None if client.timeout is None else client.timeout + (wait_s or 0) + 120
        info = client.json("POST", "/v1/sessions", json_body=body,
                           query={"wait_s": wait_s} if wait_s is not None else None, timeout=timeout)
        return cls(client, info)

    @classmethod
    def connect(cls, id: str, url: Optional[str] = None, api_key: Optional[str] = None) -> "Sandbox":
        """Attaches to an existing session (raises NotFound / Gone when it is not live)."""
        client = Client(url, api_key)
        info = client.json("GET", f"/v1/sessions/{_quote(id)}")
        if info.get("state") in ("terminated", "failed"):
            term = info.get("termination") or {}
            raise Gone(f"session {id} has ended ({term.get('reason') or info.get('state')})", session_id=id,
                       status=410, body=info)
        return cls(client, info)

    @classmethod
    def list(cls, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
             limit: Optional[int] = None, url: Optional[str] = None,
             api_key: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Iterates the tenant's session records (following pagination)."""
        client = Client(url, api_key)
        query: Dict[str, Any] = {}
        if state:
            query["state"] = state
        for k, v in (metadata or {}).items():
            query["metadata." + k] = v
        if limit:
            query["limit"] = limit
        while True:
            page = client.json("GET", "/v1/sessions", query=query)
            for s in page.get("sessions") or []:
                yield s
            cursor = page.get("next_cursor")
            if not cursor:
                return
            query["cursor"] = cursor

    def info(self) -> Dict[str, Any]:
        """The session record (GET /v1/sessions/{id})."""
        self._info = self._client.json("GET", f"/v1/sessions/{_quote(self.id)}")
        return self._info

    @property
    def template(self) -> Optional[str]:
        return self._info.get("template")

    @property
    def limits(self) -> Dict[str, Any]:
        return self._info.get("limits") or {}

    def set_ttl(self, ttl_s: int) -> Dict[str, Any]:
        self._info = self._client.json("PATCH", f"/v1/sessions/{_quote(self.id)}", json_body={"ttl_s": ttl_s})
        return self._info

    def reset(self) -> Dict[str, Any]:
        """Back to the template's state: a new writable layer and a new init, same id.
        Running execs end; volumes keep their files. Returns the session record."""
        self._info = self._client.json("POST", f"/v1/sessions/{_quote(self.id)}/reset")
        return self._info

    @property
    def disk_used_bytes(self) -> Optional[int]:
        """Bytes in use in the writable layer (fresh from the server)."""
        return self.info().get("disk_used_bytes")

    def pause(self) -> Dict[str, Any]:
        """Freezes every process of the session (state ``paused``: no CPU; memory,
        files and processes kept). Returns once the kernel reports it frozen."""
        self._info = self._client.json("POST", f"/v1/sessions/{_quote(self.id)}/pause")
        return self._info

    def resume(self) -> Dict[str, Any]:
        """Thaws a paused session (state ``ready``)."""
        self._info = self._client.json("POST", f"/v1/sessions/{_quote(self.id)}/resume")
        return self._info

    def delete(self) -> Dict[str, Any]:
        """Ends the session (idempotent); returns the final record with its ``cleanup`` report."""
        self._final = self._client.json("DELETE", f"/v1/sessions/{_quote(self.id)}", timeout=None
                                        if self._client.timeout is None else self._client.timeout + 60)
        return self._final

    kill = delete

    def close(self) -> None:
        """Closes idle connections (does not end the session; see delete())."""
        self._client.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.delete()
        except CelaError:
            if exc_type is None:
                raise  # otherwise keep the original exception
        finally:
            self._client.close()

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, template={self.template!r})"

    # -- code -----------------------------------------------------------------------
    def run(self, argv_or_cmd: Command, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
            timeout_s: Optional[float] = None, user: Optional[str] = None,
            stdin: Optional[Data] = None) -> ExecResult:
        """Runs a command to its end: a list is argv, a str is a shell line (/bin/sh -c)."""
        body = _exec_body(argv_or_cmd, cwd, env, timeout_s, user, stdin, None)
        # The daemon ends the exec at timeout_s (else the session's exec_timeout_s): wait
        # that long plus the usual margin for the answer.
        limit = timeout_s if timeout_s is not None else self.limits.get("exec_timeout_s")
        t = self._client.timeout
        http_timeout = None if (limit is None or t is None) else float(limit) + t
        ans = self._client.json("POST", f"/v1/sessions/{_quote(self.id)}/run", json_body=body,
                                timeout=http_timeout)
        return ExecResult(ans, ans.get("stdout"), ans.get("stderr"), ans.get("encoding"))

    def exec(self, argv_or_cmd: Command, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             timeout_s: Optional[float] = None, user: Optional[str] = None, stdin: Optional[Data] = None,
             stdin_open: bool = True) -> ExecHandle:
        """Starts a command and returns at once with an ExecHandle (stream, stdin, kill, wait)."""
        body = _exec_body(argv_or_cmd, cwd, env, timeout_s, user, stdin, stdin_open)
        ans = self._client.json("POST", f"/v1/sessions/{_quote(self.id)}/execs", json_body=body)
        return ExecHandle(self, ans["id"], ans.get("state"))

    def interactive(self, timeout: Optional[float] = 60.0, ping_interval: Optional[float] = 20.0) -> Any:
        """A WebSocket to this session for interactive execs (``cela._ws.Interactive``):
        several at once, stdin, kill, resize, re-attach by offset. Needs the optional
        ``websockets`` package; raises TransportError without it."""
        from ._ws import Interactive
        return Interactive(self._client, self.id, timeout=timeout, ping_interval=ping_interval)

    ws = interactive

    def get_exec(self, exec_id: str) -> ExecHandle:
        """A handle on an exec started earlier (by id)."""
        return ExecHandle(self, exec_id)


class Volumes:
    """The tenant's volumes: persistent, size-capped workspaces that outlive sessions.
    Mount one with ``Sandbox.create(volumes=[{"name": ..., "path": ..., "read_only": False}])``."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None):
        self._client = Client(url, api_key)

    def create(self, name: str, size_mb: int) -> Dict[str, Any]:
        return self._client.json("POST", "/v1/volumes", json_body={"name": name, "size_mb": size_mb})

    def list(self) -> List[Dict[str, Any]]:
        return self._client.json("GET", "/v1/volumes")["volumes"]

    def get(self, name: str) -> Dict[str, Any]:
        return self._client.json("GET", f"/v1/volumes/{_quote(name)}")

    def delete(self, name: str) -> Dict[str, Any]:
        return self._client.json("DELETE", f"/v1/volumes/{_quote(name)}")

    def close(self) -> None:
        self._client.close()
