#!/usr/bin/python3
"""cela's kernel server for the `code-interpreter` template (docs/e2b.md "Code
interpreter").

Runs inside the sandbox as the template's user and listens on 127.0.0.1:49999 (the
daemon reaches it through the session's port proxy; nothing outside the sandbox
connects to it directly). Each context is a real IPython kernel driven with
jupyter_client, so state (variables, imports, the working directory) persists between
executions of one context.

  POST   /execute               {code, context_id?, language?, env_vars?}
                                -> NDJSON lines, one message each, streamed as the
                                   kernel produces them
  POST   /contexts              {language?, cwd?} -> {id, language, cwd}
  GET    /contexts              -> [{id, language, cwd}]
  DELETE /contexts/{id}         -> 204
  POST   /contexts/{id}/restart -> 204 (the kernel restarts: its state is gone)
  GET    /health                -> 200 "ok"

Messages of /execute: {"type": "stdout"|"stderr", "text", "timestamp"}, {"type":
"result", "is_main_result", <format>: ...} (text, html, markdown, svg, png, jpeg, pdf,
latex, json, javascript; other mime types under their own name), {"type": "error",
"name", "value", "traceback"}, {"type": "number_of_executions", "execution_count"},
{"type": "end_of_execution"}; when the kernel dies or does not answer:
{"type": "unexpected_end_of_execution"}.
"""

import argparse
import json
import os
import queue
import re
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

# Mime types as the SDK's Result names them; anything else keeps its mime type.
MIME_NAMES = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
PYTHON_NAMES = ("python", "python3", "")
MAX_BODY = 16 << 20
IOPUB_IDLE_S = 0.5  # how long to wait for a message before checking the kernel is alive


class Context:
    """One kernel. Executions on it run one at a time (the lock)."""

    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.manager = KernelManager(kernel_name="python3")
        env = dict(os.environ)
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        self.manager.start_kernel(cwd=cwd, env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def restart(self):
        with self.lock:
            self.client.stop_channels()
            self.manager.restart_kernel(now=True)
            self.client = self.manager.client()
            self.client.start_channels()
            self.client.wait_for_ready(timeout=60)

    def shutdown(self):
        try:
            self.client.stop_channels()
        finally:
            self.manager.shutdown_kernel(now=True)

    def run_silent(self, code):
        """Runs code without output or history (env_vars), waiting for its reply."""
        msg_id = self.client.execute(code, silent=True, store_history=False)
        while True:
            reply = self.client.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                return

    def execute(self, code, env_vars, emit):
        """Runs one cell, calling emit(message) for each message in order. emit
        raises when the client went away: the kernel is interrupted."""
        with self.lock:
            restore = None
            if env_vars:
                restore = self._set_env(env_vars)
            try:
                self._execute(code, emit)
            finally:
                if restore is not None:
                    try:
                        self.run_silent(restore)
                    except Exception:
                        pass

    def _set_env(self, env_vars):
        values = {str(k): str(v) for k, v in env_vars.items()}
        self.run_silent(
            "import os as _cela_os\n"
            "_cela_env_saved = {k: _cela_os.environ.get(k) for k in %r}\n"
            "_cela_os.environ.update(%r)\n" % (list(values), values)
        )
        return (
            "for _k, _v in _cela_env_saved.items():\n"
            "    _cela_os.environ.pop(_k, None) if _v is None else _cela_os.environ.__setitem__(_k, _v)\n"
            "del _cela_env_saved, _k, _v\n"
        )

    def _execute(self, code, emit):
        msg_id = self.client.execute(code, store_history=True, allow_stdin=False)
        try:
            while True:
                try:
                    msg = self.client.get_iopub_msg(timeout=IOPUB_IDLE_S)
                except queue.Empty:
                    if not self.manager.is_alive():
                        emit({"type": "unexpected_end_of_execution"})
                        return
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                content = msg["content"]
                if kind == "stream":
                    emit({"type": "stdout" if content["name"] == "stdout" else "stderr",
                          "text": content["text"], "timestamp": time.time_ns() // 1000})
                elif kind in ("execute_result", "display_data"):
                    result = {"type": "result", "is_main_result": kind == "execute_result"}
                    for mime, value in content.get("data", {}).items():
                        name = MIME_NAMES.get(mime, mime)
                        result[name] = value if isinstance(value, str) else json.dumps(value)
                    emit(result)
                elif kind == "error":
                    emit({"type": "error", "name": content["ename"], "value": content["evalue"],
                          "traceback": "\n".join(content["traceback"])})
                elif kind == "execute_input":
                    emit({"type": "number_of_executions", "execution_count": content["execution_count"]})
                elif kind == "status" and content["execution_state"] == "idle":
                    emit({"type": "end_of_execution"})
                    return
        except BrokenPipeError:
            self.manager.interrupt_kernel()
            raise


class Contexts:
    def __init__(self, cwd):
        self.mu = threading.Lock()
        self.by_id = {}
        self.default_cwd = cwd
        self.default = self.create("python", cwd)

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        with self.mu:
            self.by_id[ctx.id] = ctx
        return ctx

    def get(self, ctx_id):
        with self.mu:
            return self.by_id.get(ctx_id)

    def remove(self, ctx_id):
        with self.mu:
            ctx = self.by_id.pop(ctx_id, None)
        if ctx is not None:
            ctx.shutdown()
        return ctx is not None

    def list(self):
        with self.mu:
            return [c.describe() for c in self.by_id.values()]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cela-kernel-server"
    contexts = None  # set in main

    def log_message(self, fmt, *args):  # quiet: the sandbox's stderr is nobody's log
        pass

    def _json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status, message):
        self._json(status, {"error": message})

    def _empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
                if len(data) > MAX_BODY:
                    raise ValueError("body too large")
        elif length > MAX_BODY:
            raise ValueError("body too large")
        else:
            data = self.rfile.read(length) if length else b""
        if not data:
            return {}
        value = json.loads(data)
        if not isinstance(value, dict):
            raise ValueError("the body must be a JSON object")
        return value

    def _path(self):
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def do_GET(self):
        path = self._path()
        if path == "/health":
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/contexts":
            self._json(200, self.contexts.list())
        else:
            self._error(404, "no route " + path)

    def do_DELETE(self):
        m = re.fullmatch(r"/contexts/([^/]+)", self._path())
        if not m:
            return self._error(404, "no route " + self._path())
        if not self.contexts.remove(m.group(1)):
            return self._error(404, "no context " + m.group(1))
        self._empty(204)

    def do_POST(self):
        path = self._path()
        try:
            body = self._body()
        except (ValueError, json.JSONDecodeError) as e:
            return self._error(400, "bad request body: %s" % e)
        if path == "/execute":
            return self._execute(body)
        if path == "/contexts":
            language = body.get("language") or "python"
            if language not in PYTHON_NAMES:
                return self._error(400, "language `%s` is not supported (python only)" % language)
            cwd = body.get("cwd") or self.contexts.default_cwd
            if not os.path.isdir(cwd):
                return self._error(400, "cwd `%s` is not a directory" % cwd)
            return self._json(200, self.contexts.create("python", cwd).describe())
        m = re.fullmatch(r"/contexts/([^/]+)/restart", path)
        if m:
            ctx = self.contexts.get(m.group(1))
            if ctx is None:
                return self._error(404, "no context " + m.group(1))
            ctx.restart()
            return self._empty(204)
        self._error(404, "no route " + path)

    def _execute(self, body):
        code = body.get("code")
        if not isinstance(code, str):
            return self._error(400, "`code` must be a string")
        ctx_id, language = body.get("context_id"), body.get("language")
        if ctx_id and language:
            return self._error(400, "give context_id or language, not both")
        if ctx_id:
            ctx = self.contexts.get(ctx_id)
            if ctx is None:
                return self._error(404, "no context " + ctx_id)
        elif (language or "") in PYTHON_NAMES:
            ctx = self.contexts.default
        else:
            return self._error(400, "language `%s` is not supported (python only)" % language)
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict):
            return self._error(400, "`env_vars` must be an object")

        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(message):
            line = (json.dumps(message) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        try:
            ctx.execute(code, env_vars, emit)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=49999)
    parser.add_argument("--cwd", default=os.path.expanduser("~"))
    args = parser.parse_args()
    Handler.contexts = Contexts(args.cwd)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
