"""Typed errors: one class per stable API error code, all under CelaError."""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional


class CelaError(Exception):
    """Base of every error the SDK raises for an API answer (or a transport failure).

    Attributes mirror the API's error object: ``code``, ``category``, ``message``,
    ``status`` (HTTP status, 0 for transport errors), ``request_id``, ``session_id``,
    ``exec_id``, ``retryable`` and ``retry_after_s``.
    """

    default_code = "error"
    default_status = 0

    def __init__(self, message: str = "", *, code: Optional[str] = None, category: Optional[str] = None,
                 status: Optional[int] = None, request_id: Optional[str] = None,
                 session_id: Optional[str] = None, exec_id: Optional[str] = None,
                 retryable: bool = False, retry_after_s: Optional[float] = None,
                 body: Any = None):
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.category = category
        self.status = self.default_status if status is None else status
        self.request_id = request_id
        self.session_id = session_id
        self.exec_id = exec_id
        self.retryable = bool(retryable)
        self.retry_after_s = retry_after_s
        self.body = body

    def __str__(self) -> str:
        parts = [f"{self.code}"]
        if self.status:
            parts.append(f"({self.status})")
        s = " ".join(parts) + f": {self.message}"
        ids = [f"{k}={v}" for k, v in (("session", self.session_id), ("exec", self.exec_id),
                                        ("request", self.request_id)) if v]
        if ids:
            s += " [" + ", ".join(ids) + "]"
        return s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, status={self.status!r})"


class InvalidRequest(CelaError):
    default_code, default_status = "invalid_request", 400


class Unauthorized(CelaError):
    default_code, default_status = "unauthorized", 401


class Forbidden(CelaError):
    default_code, default_status = "forbidden", 403


class PolicyDenied(Forbidden):
    default_code, default_status = "policy_denied", 403


class NotFound(CelaError):
    default_code, default_status = "not_found", 404


class Conflict(CelaError):
    default_code, default_status = "conflict", 409


class Gone(CelaError):
    default_code, default_status = "gone", 410


class PayloadTooLarge(CelaError):
    default_code, default_status = "payload_too_large", 413


class QuotaExceeded(CelaError):
    default_code, default_status = "quota_exceeded", 429


class RateLimited(CelaError):
    default_code, default_status = "rate_limited", 429


class CapacityExceeded(CelaError):
    default_code, default_status = "capacity_exceeded", 503


class InternalError(CelaError):
    default_code, default_status = "internal", 500


class TransportError(CelaError):
    """The daemon could not be reached, or the connection failed mid-answer."""
    default_code, default_status = "transport_error", 0


class ExecTimeout(CelaError):
    """ExecHandle.wait(timeout=...) ran out of time (the exec keeps running)."""
    default_code, default_status = "wait_timeout", 0


_BY_CODE = {
    "invalid_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "policy_denied": PolicyDenied,
    "not_found": NotFound,
    "conflict": Conflict,
    "gone": Gone,
    "payload_too_large": PayloadTooLarge,
    "quota_exceeded": QuotaExceeded,
    "rate_limited": RateLimited,
    "capacity_exceeded": CapacityExceeded,
    "internal": InternalError,
}

_BY_STATUS = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: PayloadTooLarge,
    429: RateLimited,
    503: CapacityExceeded,
    500: InternalError,
}


def _class_for(code: Optional[str], status: int) -> type:
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return InternalError
    return CelaError


def _parse_retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date; not produced by cela


def error_from_response(status: int, body: bytes, headers: Optional[Mapping[str, str]] = None) -> CelaError:
    """Builds the typed error for a non-2xx answer from its body (the API's error object)."""
    headers = headers or {}
    retry_after = _parse_retry_after(headers.get("Retry-After") or headers.get("retry-after"))
    parsed: Any = None
    err: Mapping[str, Any] = {}
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            err = parsed["error"]
    except (ValueError, UnicodeDecodeError):
        parsed = None
    code = err.get("code") if isinstance(err.get("code"), str) else None
    message = err.get("message")
    if not isinstance(message, str) or not message:
        text = body.decode("utf-8", errors="replace").strip() if body else ""
        message = text[:500] or f"HTTP {status}"
    cls = _class_for(code, status)
    ra = err.get("retry_after_s")
    if not isinstance(ra, (int, float)):
        ra = retry_after
    if not code:
        code = cls.default_code if cls is not CelaError else f"http_{status}"
    return cls(message, code=code,
               category=err.get("category"), status=status, request_id=err.get("request_id"),
               session_id=err.get("session_id"), exec_id=err.get("exec_id"),
               retryable=bool(err.get("retryable", status in (429, 503))), retry_after_s=ra,
               body=parsed if parsed is not None else body)
