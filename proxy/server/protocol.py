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

**Slow clients** (:class:`ClientTimeouts`, nginx's defaults): a client that trickles a
request in holds a connection and its buffers for as long as it likes unless something
stops it (aiohttp itself waits an hour). A request head not complete
``client_header_timeout`` seconds after its first byte (or after the connection opened)
is answered with a 408 in the caller's dialect and the connection closed — silently if
the client never sent a byte; a request body that stops arriving for
``client_body_timeout`` seconds fails its read with :class:`ClientBodyTimeout` (the
handler answers 408); an idle connection is closed after ``keepalive_timeout``. One
timer per connection, re-armed lazily, checks all three; time the server itself is not
reading (flow control, a response being written) never counts against the client.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import http_exceptions, web, web_protocol
from aiohttp.web_server import Server

from proxy.server.errors import ProxyError, error_body, error_response
from proxy.server.hooks import DialectName
from proxy.server.logs import GATE_LOGGER, redact
from proxy.server.routes import classify, dialect_of_path, route_template

__all__ = [
    "HEAD_BYTES",
    "ClientBodyTimeout",
    "ClientTimeouts",
    "GateAppRunner",
    "GateRequestHandler",
    "parser_error",
]

#: aiohttp's default longest request line / header line.
_MAX_LINE = 8190
#: Bytes of a message head kept to infer the dialect of a request the parser refused.
HEAD_BYTES = 16384

_REQUEST_LINE = re.compile(rb"(?:^|\n)[A-Z]{3,10} (/[^\s]*) HTTP/1\.[01]\r?\n")
_ANTHROPIC_HEADER = re.compile(rb"\n(?:anthropic-version|anthropic-beta|x-api-key)[ \t]*:", re.IGNORECASE)
#: A parser reason that quotes nothing: words, spaces, a few punctuation marks.
_SAFE_REASON = re.compile(r"[A-Za-z][A-Za-z0-9 ,'()\-]{2,80}\.?")

_ErrInfo: Any = getattr(web_protocol, "_ErrInfo", None)


@dataclass(frozen=True)
class ClientTimeouts:
    """Seconds a client may take: to send a request head, between two reads of its body,
    idle between requests (``server.client_header_timeout`` …)."""

    header: float = 60.0
    body: float = 60.0
    keepalive: float = 75.0


class ClientBodyTimeout(Exception):
    """The client stopped sending a request body it had announced."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no request body data for {seconds:g} s")
        self.seconds = seconds


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
    """aiohttp's request handler, answering its errors in the caller's dialect and
    timing out slow clients (:class:`ClientTimeouts`)."""

    __slots__ = ("_client_timer", "_error_head", "_head", "_head_since", "_rx_at", "_timeouts", "_timer_at")

    def __init__(self, *args: Any, client_timeouts: ClientTimeouts | None = None, **kwargs: Any) -> None:
        timeouts = client_timeouts or ClientTimeouts()
        kwargs.setdefault("keepalive_timeout", timeouts.keepalive)
        super().__init__(*args, **kwargs)
        self._head = b""
        self._error_head = b""
        self._timeouts = timeouts
        self._rx_at = 0.0  # when the client last sent bytes
        self._head_since: float | None = None  # when the head under way began
        self._client_timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._rx_at = self._head_since = self._loop.time()
        self._arm(self._head_since + self._timeouts.header)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._client_timer is not None:
            self._client_timer.cancel()
            self._client_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._rx_at = now = self._loop.time()
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:  # a message head was parsed (or refused)
            last = self._messages[-1][0] if self._messages else None
            if _ErrInfo is not None and isinstance(last, _ErrInfo):
                self._error_head = self._head
            self._head = b""
            self._head_since = None
            self._arm(now + self._timeouts.body)
        elif self._head_since is None and not self._request_in_progress and not self._messages:
            self._head_since = now  # the first bytes of the next request's head
            self._arm(now + self._timeouts.header)

    async def _handle_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._handle_request(*args, **kwargs)
        finally:  # what arrives from now on belongs to the next request
            self._head = b""
            self._head_since = None

    def _process_keepalive(self) -> None:
        if self._head_since is not None and self._head.strip():
            return  # a head under way is not idleness: its own deadline holds (_check_client)
        super()._process_keepalive()

    def _arm(self, when: float) -> None:
        """Make sure the connection's timer fires no later than ``when``."""
        if self._client_timer is not None:
            if self._timer_at <= when:
                return
            self._client_timer.cancel()
        self._timer_at = when
        self._client_timer = self._loop.call_at(when, self._check_client)

    def _check_client(self) -> None:
        self._client_timer = None
        if self._force_close or self._close or self.transport is None or self._upgraded:
            return
        now = self._loop.time()
        if self._request_in_progress:
            request = self._current_request
            if request is None or request.content.is_eof():
                self._arm(now + self._timeouts.body)  # a response under way: not the client's time
            elif self._reading_paused:  # the server is not reading: not the client's time either
                self._rx_at = now
                self._arm(now + self._timeouts.body)
            elif now - self._rx_at >= self._timeouts.body:
                request.content.set_exception(ClientBodyTimeout(self._timeouts.body))
            else:
                self._arm(self._rx_at + self._timeouts.body)
        elif self._head_since is not None:
            if now - self._head_since >= self._timeouts.header:
                self._head_timed_out()
            else:
                self._arm(self._head_since + self._timeouts.header)
        # else idle between requests: aiohttp's keep-alive timer closes the connection

    def _head_timed_out(self) -> None:
        """A request head not complete in time: a 408 in the caller's dialect (nothing at
        all if the client never sent a byte), then the connection closes."""
        head = self._head
        transport = self.transport
        if head.strip() and transport is not None:
            dialect, path = _dialect_of_head(head)
            err = ProxyError(
                408,
                f"The request head was not complete within {self._timeouts.header:g} s "
                "(server.client_header_timeout).",
                code="request_timeout",
            )
            GATE_LOGGER.warning(
                "client too slow",
                extra={
                    "fields": {
                        "status": 408,
                        "code": err.code,
                        "route": route_template(path) if path else "{unparsed}",
                        "dialect": dialect,
                    }
                },
            )
            transport.write(_raw_response(dialect, err))
        self.force_close()

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


def _raw_response(dialect: DialectName, err: ProxyError) -> bytes:
    """A complete ``Connection: close`` HTTP/1.1 response carrying ``err`` (for a
    connection with no request object to answer through)."""
    body = error_body(dialect, err)
    head = (
        f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"x-compaction-gate-error: {err.code}\r\n"
        "x-compaction-gate-conversation: unknown\r\n"
        "x-compaction-gate-action: none\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


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
