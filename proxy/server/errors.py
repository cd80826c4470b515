"""Errors the proxy itself produces, rendered in the caller's dialect.

OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``.
Anthropic shape: ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from proxy.server.hooks import DialectName

__all__ = ["H_ERROR", "ProxyError", "error_body", "error_response", "gate_error", "sse_error_event"]

#: Header on every error response the proxy produced itself (its value: the error code).
H_ERROR = "x-compaction-gate-error"

# Anthropic's documented error types by status.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# OpenAI's error types by status.
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "timeout",
}


@dataclass(frozen=True)
class ProxyError:
    """An error produced by the proxy (not relayed from upstream).

    ``type`` overrides the dialect's default type for ``status``.
    """

    status: int
    message: str
    code: str
    type: str | None = None
    param: str | None = None
    retryable: bool | None = None


def error_body(dialect: DialectName, err: ProxyError) -> bytes:
    """Serialize ``err`` as the dialect's error JSON."""
    if dialect == "anthropic":
        etype = err.type or _ANTHROPIC_TYPES.get(
            err.status, "api_error" if err.status >= 500 else "invalid_request_error"
        )
        payload: dict[str, object] = {
            "type": "error",
            "error": {"type": etype, "message": err.message},
        }
    else:
        etype = err.type or _OPENAI_TYPES.get(
            err.status, "server_error" if err.status >= 500 else "invalid_request_error"
        )
        payload = {
            "error": {
                "message": err.message,
                "type": etype,
                "param": err.param,
                "code": err.code,
            }
        }
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def error_response(
    dialect: DialectName, err: ProxyError, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A complete JSON error response (``x-should-retry`` set when known). It carries
    ``x-compaction-gate-error: <code>``: the proxy itself answered, not upstream."""
    resp = web.Response(
        status=err.status,
        body=error_body(dialect, err),
        content_type="application/json",
    )
    resp.headers[H_ERROR] = err.code
    if err.retryable is not None:
        resp.headers["x-should-retry"] = "true" if err.retryable else "false"
    if headers:
        resp.headers.update(headers)
    return resp


def gate_error(status: int, message: str, code: str) -> web.Response:
    """An error of the gate's own API (``/gate/…``): ``{"error": {...}}``, like every
    other error of the proxy."""
    return error_response("openai", ProxyError(status, message, code=code))


def sse_error_event(dialect: DialectName, err: ProxyError) -> bytes:
    """An SSE event reporting a mid-stream failure the way each provider does.

    Anthropic streams ``event: error``; OpenAI streams a ``data:`` line whose JSON has
    an ``error`` key. Both official SDKs raise on these.
    """
    body = error_body(dialect, err).decode("utf-8")
    if dialect == "anthropic":
        return f"event: error\ndata: {body}\n\n".encode()
    return f"data: {body}\n\n".encode()
