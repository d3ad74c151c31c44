"""Python SDK for cela, a self-hosted sandbox server for untrusted code.

    import cela
    with cela.Sandbox.create(template="base") as sb:
        r = sb.run(["python3", "-c", "print(6 * 7)"])
        print(r.exit_code, r.stdout)

Standard library only (``Sandbox.interactive()``, the WebSocket transport, needs the
optional ``websockets`` package). Reads CELA_URL (``unix:///run/cela/cela.sock`` or
``http://host:port``) and CELA_API_KEY.
"""
from ._transport import Client, default_url
from .errors import (CapacityExceeded, CelaError, Conflict, ExecTimeout, Forbidden, Gone, InternalError,
                     InvalidRequest, NotFound, PayloadTooLarge, PolicyDenied, QuotaExceeded, RateLimited,
                     TransportError, Unauthorized)
from ._ws import Interactive, WsEvent
from .sandbox import ExecHandle, ExecResult, Files, OutputChunk, Sandbox, Volumes

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "Volumes", "Interactive", "WsEvent", "ExecHandle", "ExecResult", "OutputChunk", "Files", "Client", "default_url",
    "CelaError", "InvalidRequest", "Unauthorized", "Forbidden", "PolicyDenied", "NotFound", "Conflict",
    "Gone", "PayloadTooLarge", "QuotaExceeded", "RateLimited", "CapacityExceeded", "InternalError",
    "TransportError", "ExecTimeout",
]
