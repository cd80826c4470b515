"""The HTTP connection layer: aiohttp's request handler, with the proxy's own errors.

aiohttp answers what its low-level parser refuses (a header line too long, a bare CR, a
NUL, a bad Content-Length …) and any exception a handler lets through with a plaintext
response, and logs a traceback that quotes the raw header line (``Bearer sk-…`` in
clear). :class:`GateRequestHandler` answers both with a JSON error in the caller's
dialect and logs one line that never holds request text:

- **Status**: a header line or the header block too long, or too many headers → 431; a
  request line (URL) too long → 414; every other malformed message → 400; a failure of
  the proxy itself → 500 (a bug: the message says so and names no input).
- **Dialect**: from the request line's path when it was parsed (``/v1/messages…`` is
  Anthropic), else from the header *names* seen (``anthropic-version``, ``x-api-key``),
  else OpenAI's. The first bytes of each message head are kept for that (at most
  :data:`HEAD_BYTES`).
- **Reason**: the parser's own one-line reason when it quotes nothing (``Invalid header
  value char``), else a fixed description of the class of error.

:class:`GateAppRunner` is :class:`aiohttp.web.AppRunner` serving connections with it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import http_exceptions, web, web_protocol
from aiohttp.web_server import Server

from proxy.server.errors import ProxyError, error_response
from proxy.server.hooks import DialectName
from proxy.server.logs import GATE_LOGGER, redact
from proxy.server.routes import classify, dialect_of_path, route_template

__all__ = ["HEAD_BYTES", "GateAppRunner", "GateRequestHandler", "parser_error"]

#: aiohttp's default longest request line / header line.
_MAX_LINE = 8190
#: Bytes of a message head kept to infer the dialect of a request the parser refused.
HEAD_BYTES = 16384

_REQUEST_LINE = re.compile(rb"(?:^|\n)[A-Z]{3,10} (/[^\s]*) HTTP/1\.[01]\r?\n")
_ANTHROPIC_HEADER = re.compile(rb"\n(?:anthropic-version|anthropic-beta|x-api-key)[ \t]*:", re.IGNORECASE)
#: A parser reason that quotes nothing: words, spaces, a few punctuation marks.
_SAFE_REASON = re.compile(r"[A-Za-z][A-Za-z0-9 ,'()\-]{2,80}\.?")

_ErrInfo: Any = getattr(web_protocol, "_ErrInfo", None)


def _dialect_of_head(head: bytes) -> tuple[DialectName, str | None]:
    """(dialect, path) of the last request line in ``head``, if any."""
    path: str | None = None
    found = list(_REQUEST_LINE.finditer(head))
    if found:
        path = found[-1].group(1).decode("latin-1")
        fixed = dialect_of_path(path)
        if fixed is not None:
            return fixed, path
    if _ANTHROPIC_HEADER.search(head):
        return "anthropic", path
    return "openai", path


def _reason(exc: BaseException | None) -> str:
    """The parser's reason if it is plain words, else the empty string."""
    text = str(getattr(exc, "message", "") or "")
    first = text.strip().split("\n", 1)[0].strip().rstrip(":")
    return first if _SAFE_REASON.fullmatch(first) else ""


def parser_error(exc: BaseException | None, head: bytes) -> ProxyError:
    """The error answering a message the HTTP parser refused with ``exc``."""
    reason = _reason(exc)
    if isinstance(exc, http_exceptions.LineTooLong):
        end = head.find(b"\n")
        if end == -1 or end > _MAX_LINE:
            return ProxyError(414, "The request line (URL) is too long for this proxy.", code="uri_too_long")
        return ProxyError(
            431, "A request header line is too long for this proxy.", code="request_header_fields_too_large"
        )
    if reason.lower().startswith("too many headers"):
        return ProxyError(431, "The request has too many header lines.", code="request_header_fields_too_large")
    if isinstance(exc, http_exceptions.ContentEncodingError):
        return ProxyError(
            415,
            "Unsupported request Content-Encoding: this proxy decodes gzip, deflate and br.",
            code="unsupported_content_encoding",
        )
    if isinstance(exc, http_exceptions.BadHttpMethod):
        return ProxyError(400, f"Malformed HTTP request line{': ' + reason if reason else ''}.", code="bad_request")
    detail = f": {reason}" if reason else ""
    return ProxyError(400, f"Malformed HTTP request{detail}.", code="bad_request")


class GateRequestHandler(web_protocol.RequestHandler):
    """aiohttp's request handler, answering its errors in the caller's dialect."""

    __slots__ = ("_error_head", "_head")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head = b""
        self._error_head = b""

    def data_received(self, data: bytes) -> None:
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:  # a message head was parsed (or refused)
            last = self._messages[-1][0] if self._messages else None
            if _ErrInfo is not None and isinstance(last, _ErrInfo):
                self._error_head = self._head
            self._head = b""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # the response is under way: nothing to send
            raise ConnectionError("response already started; cannot send an error")
        path: str | None
        if isinstance(exc, http_exceptions.HttpProcessingError) and status < 500:
            dialect, path = _dialect_of_head(self._error_head or self._head)
            err = parser_error(exc, self._error_head or self._head)
        else:
            path = request.path
            dialect = classify(request.method, request.path, request.headers).dialect
            err = ProxyError(
                500, "compaction-gate failed on this request (a bug; see the proxy log).", code="internal_error"
            )
        GATE_LOGGER.warning(
            "malformed request" if err.status < 500 else "internal error",
            extra={
                "fields": {
                    "status": err.status,
                    "code": err.code,
                    "route": route_template(path) if path else "{unparsed}",
                    "dialect": dialect,
                    "error_type": type(exc).__name__ if exc is not None else None,
                    "reason": redact(err.message),
                }
            },
        )
        resp = error_response(dialect, err, {"x-compaction-gate-conversation": "unknown", "x-compaction-gate-action": "none"})
        resp.force_close()
        return resp


class _GateServer(Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return GateRequestHandler(self, loop=self._loop, **self._kwargs)


class GateAppRunner(web.AppRunner):
    """:class:`aiohttp.web.AppRunner` whose connections use :class:`GateRequestHandler`."""

    async def _make_server(self) -> Server:
        app = self.app
        loop = asyncio.get_running_loop()
        app._set_loop(loop)
        app.on_startup.freeze()
        await app.startup()
        app.freeze()
        kwargs = dict(self._kwargs)
        kwargs["debug"] = app._debug
        if app._handler_args:
            kwargs.update(app._handler_args)
        return _GateServer(app._handle, request_factory=app._make_request, loop=loop, **kwargs)  # type: ignore[arg-type]
