"""The proxy handler: client request → Exchange → Decision → upstream → client.

This module owns the byte path. It never re-serialises a body it did not have to
change: request bytes are forwarded as read (unless a Decision replaces them) and
response bytes are relayed as received (still content-encoded, since the upstream
session does not auto-decompress) unless a ResponseTap is attached. With a tap the
proxy asks upstream for identity encoding, so the tap sees plain JSON / SSE.
"""

from __future__ import annotations

import asyncio
import json
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from proxy.config import ProxyConfig, Upstream
from proxy.core.jsonbody import BodyCache
from proxy.metrics import METRICS_KEY
from proxy.server.deferred import AfterSend, merge
from proxy.server.errors import ProxyError, error_response, sse_error_event
from proxy.server.headers import (
    credential,
    downstream_headers,
    safe_headers,
    tenant_of,
    upstream_headers,
)
from proxy.server.hooks import Decision, DialectName, Exchange, Interceptor, Reject, ResponseTap
from proxy.server.logs import GATE_LOGGER, log_access, redact
from proxy.server.routes import Route, classify, detect_dialect
from proxy.server.sse import SSESplitter
from proxy.server.state import CONFIG_KEY, INTERCEPTOR_KEY, SESSION_KEY
from proxy.server.upstream import apply_credentials, select_upstream, target_url

__all__ = ["GATE_HEADERS", "RequestRecord", "proxy_handler"]

H_CONVERSATION = "x-compaction-gate-conversation"
H_ACTION = "x-compaction-gate-action"
H_OVERHEAD = "x-compaction-gate-overhead-ms"
GATE_HEADERS = (H_CONVERSATION, H_ACTION, H_OVERHEAD)
UNKNOWN_CONVERSATION = "unknown"

_NO_BODY_STATUSES = frozenset({204, 304})
#: Recently parsed request bodies per tenant: agents resend their whole history, so a
#: body is parsed incrementally from the longest byte-identical prefix of a recent one
#: (exactly ``json.loads``; see :mod:`proxy.core.jsonbody`). One per process, used only
#: from the event loop.
BODY_CACHE = BodyCache()
_JSON_MIME_SUFFIX = "+json"


@dataclass
class RequestRecord:
    """Mutable per-request bookkeeping, flushed to one access-log line at the end."""

    request_id: str
    method: str
    route: str
    started: float = field(default_factory=time.perf_counter)
    dialect: str = "openai"
    kind: str = "raw"
    status: int = 0
    upstream: str | None = None
    upstream_status: int | None = None
    conversation: str = UNKNOWN_CONVERSATION
    action: str = "none"
    tenant: str = "anonymous"
    stream: bool = False
    #: the response was relayed as an SSE stream (its bytes count as streamed bytes)
    sse: bool = False
    model: str | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    error: str | None = None
    #: seconds spent waiting on upstream (connect + headers + body reads)
    upstream_wait: float = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def overhead_ms(self) -> float:
        return max(0.0, (self.elapsed() - self.upstream_wait) * 1000.0)

    def emit(self) -> None:
        log_access(
            {
                "request_id": self.request_id,
                "method": self.method,
                "route": self.route,
                "kind": self.kind,
                "dialect": self.dialect,
                "status": self.status,
                "upstream": self.upstream,
                "upstream_status": self.upstream_status,
                "duration_ms": round(self.elapsed() * 1000.0, 2),
                "overhead_ms": round(self.overhead_ms(), 2),
                "conversation": self.conversation,
                "action": self.action,
                "tenant": self.tenant,
                "stream": self.stream,
                "model": self.model,
                "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out,
                "error": self.error,
            }
        )


def gate_headers(rec: RequestRecord, decision: Decision | None) -> CIMultiDict[str]:
    """The headers every proxied response carries (plus the decision's extras)."""
    out: CIMultiDict[str] = CIMultiDict()
    if decision is not None:
        for name, value in decision.headers.items():
            out[name] = value
    out[H_CONVERSATION] = rec.conversation
    out[H_ACTION] = rec.action
    out[H_OVERHEAD] = f"{rec.overhead_ms():.2f}"
    return out


def _is_json_mime(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or mime.endswith(_JSON_MIME_SUFFIX)


def _respond_error(
    rec: RequestRecord, dialect: DialectName, err: ProxyError, decision: Decision | None = None
) -> web.Response:
    rec.error = rec.error or err.code
    resp = error_response(dialect, err)
    resp.headers.update(gate_headers(rec, decision))
    rec.status = err.status
    rec.bytes_out = len(resp.body) if isinstance(resp.body, (bytes, bytearray)) else 0
    return resp


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """Read the whole request body; ``None`` if it exceeds ``limit`` bytes."""
    declared = request.content_length
    if declared is not None and declared > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one copy at most


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Handle one ``/v1/...`` request end to end (see module docstring)."""
    rec = RequestRecord(
        request_id=uuid.uuid4().hex, method=request.method, route=request.path
    )
    try:
        return await _handle(request, rec)
    except asyncio.CancelledError:
        rec.error = rec.error or "client_disconnected"
        rec.status = rec.status or 499
        raise
    finally:
        rec.emit()
        metrics = request.app.get(METRICS_KEY)
        if metrics is not None:
            metrics.observe_request(rec.route, rec.status, rec.overhead_ms() / 1000.0)
            if rec.sse:
                metrics.streamed_bytes(rec.bytes_out, rec.route)


async def _handle(request: web.Request, rec: RequestRecord) -> web.StreamResponse:
    app = request.app
    config = app[CONFIG_KEY]
    route = classify(request.method, request.path, request.headers)
    rec.kind, rec.dialect = route.kind, route.dialect
    secret = credential(request.headers)
    rec.tenant = tenant_of(secret)

    limit = config.server.max_body_bytes
    body = await _read_body(request, limit)
    if body is None:
        return _respond_error(
            rec,
            route.dialect,
            ProxyError(
                413,
                f"Request body is larger than this proxy's limit of {limit} bytes "
                "(server.max_body_bytes).",
                code="request_too_large",
            ),
        )
    rec.bytes_in = len(body)

    parsed, problem = _parse_body(request, route, body, rec.tenant)
    if problem is not None:
        return _respond_error(rec, route.dialect, problem)

    exchange = Exchange(
        method=request.method,
        path=request.path,
        query=request.query_string,
        dialect=route.dialect,
        kind=route.kind,
        headers=safe_headers(request.headers),
        tenant=rec.tenant,
        body=body,
        json=parsed,
        stream=isinstance(parsed, dict) and parsed.get("stream") is True,
        model=_model_of(parsed),
        request_id=rec.request_id,
    )
    rec.stream, rec.model = exchange.stream, exchange.model

    decision, failure = await _decide(app[INTERCEPTOR_KEY], exchange, config, secret, rec)
    if failure is not None:
        return _respond_error(rec, route.dialect, failure)
    assert decision is not None
    rec.action = decision.action
    rec.conversation = decision.conversation_id or UNKNOWN_CONVERSATION
    if decision.reject is not None:
        return _reject(rec, route.dialect, decision.reject, decision)

    upstream = select_upstream(config, route.dialect, exchange.model)
    rec.upstream = upstream.name
    out_body = decision.body if decision.body is not None else body
    return await _forward(request, rec, route, upstream, out_body, decision, secret)


def _parse_body(
    request: web.Request, route: Route, body: bytes, tenant: str
) -> tuple[Any, ProxyError | None]:
    """Parse a JSON body; enforce JSON only where the API requires it. Bodies of the
    JSON APIs are parsed through :data:`BODY_CACHE` (scoped by tenant)."""
    encoded = request.headers.get("content-encoding", "identity").strip().lower()
    if encoded not in ("", "identity"):
        return None, None  # compressed request body: relay it, do not inspect
    content_type = request.headers.get("content-type", "")
    if route.expects_json:
        if not _is_json_mime(content_type):
            shown = content_type.split(";", 1)[0].strip() or "none"
            return None, ProxyError(
                415,
                f"Unsupported Content-Type {shown!r}: {request.path} expects "
                "'application/json'.",
                code="unsupported_content_type",
            )
        try:
            parsed = BODY_CACHE.loads(body, tenant)
        except (ValueError, UnicodeDecodeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            return None, ProxyError(
                400,
                f"Request body is not valid JSON ({reason}).",
                code="invalid_json",
            )
        if not isinstance(parsed, dict):
            return None, ProxyError(
                400, "Request body must be a JSON object.", code="invalid_json"
            )
        return parsed, None
    if body and _is_json_mime(content_type):
        try:
            return json.loads(body), None
        except (ValueError, UnicodeDecodeError):
            return None, None
    return None, None


def _model_of(parsed: Any) -> str | None:
    if isinstance(parsed, dict):
        model = parsed.get("model")
        if isinstance(model, str):
            return model
    return None


async def _decide(
    interceptor: Interceptor,
    exchange: Exchange,
    config: ProxyConfig,
    secret: str | None,
    rec: RequestRecord,
) -> tuple[Decision | None, ProxyError | None]:
    """Run the interceptor; fail open (or closed, per config) on any exception."""
    try:
        decision = await interceptor.before(exchange)
        if not isinstance(decision, Decision):
            raise TypeError(f"interceptor returned {type(decision).__name__}, not Decision")
        if decision.body is not None and not isinstance(decision.body, bytes):
            raise TypeError("Decision.body must be bytes or None")
        if decision.after_send is not None and decision.tap is not None:
            raise TypeError("a Decision with after_send must not carry a tap of its own")
        return decision, None
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the gate must never lose a request
        _log_gate_failure("interceptor", exc, secret, rec)
        rec.error = "gate_error"
        if config.gate.fail_open:
            return Decision(action="none"), None
        rec.action = "error"
        return None, ProxyError(
            502,
            "compaction-gate could not process this request (gate.fail_open is false); "
            "see the proxy log for request " + rec.request_id,
            code="gate_error",
        )


def _log_gate_failure(where: str, exc: BaseException, secret: str | None, rec: RequestRecord) -> None:
    """Log a gate/tap failure; free text is scrubbed of the request's credential and
    of anything credential-shaped (exception messages may quote request content)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    GATE_LOGGER.error(
        "gate failure; request forwarded per gate.fail_open",
        extra={
            "fields": {
                "request_id": rec.request_id,
                "where": where,
                "error_type": type(exc).__name__,
                "error": redact(str(exc), [secret])[:500],
                "traceback": redact(tb, [secret])[-4000:],
            }
        },
    )


def _reject(
    rec: RequestRecord, dialect: DialectName, reject: Reject, decision: Decision
) -> web.Response:
    err = ProxyError(
        reject.status,
        reject.message,
        code=reject.code,
        type=reject.type,
        param=reject.param,
        retryable=False,
    )
    rec.error = reject.code
    return _respond_error(rec, dialect, err, decision)


# ------------------------------------------------------------------------ forwarding


def _upstream_failure(exc: BaseException) -> tuple[ProxyError, str]:
    """Map a client-side exception talking to upstream to (error, tap reason)."""
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return (
            ProxyError(
                504,
                "Upstream did not respond in time (server.read_timeout / connect_timeout).",
                code="upstream_timeout",
            ),
            "upstream_timeout",
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return (
            ProxyError(
                502,
                f"Could not connect to upstream ({type(exc).__name__}).",
                code="upstream_unreachable",
            ),
            "upstream_error",
        )
    return (
        ProxyError(
            502,
            f"Upstream connection failed ({type(exc).__name__}).",
            code="upstream_error",
        ),
        "upstream_error",
    )


def _close_tap(tap: ResponseTap | None, reason: str, rec: RequestRecord, secret: str | None) -> None:
    if tap is None:
        return
    try:
        tap.closed(reason)
    except Exception as exc:  # noqa: BLE001
        _log_gate_failure("tap.closed", exc, secret, rec)


async def _forward(
    request: web.Request,
    rec: RequestRecord,
    route: Route,
    upstream: Upstream,
    body: bytes,
    decision: Decision,
    secret: str | None,
) -> web.StreamResponse:
    session = request.app[SESSION_KEY]
    headers = upstream_headers(
        request.headers, identity_encoding=decision.tap is not None or decision.after_send is not None
    )
    headers.popall("expect", None)
    apply_credentials(headers, upstream, route.dialect)
    url = target_url(upstream, route.dialect, request.raw_path)

    deferred = AfterSend(decision.after_send) if decision.after_send is not None else None
    data: Any = body if body else None
    if deferred is not None:
        data = deferred.body(body)
    sent_at = time.perf_counter()
    try:
        upstream_resp = await session.request(
            request.method,
            url,
            data=data,
            headers=headers,
            allow_redirects=False,
        )
    except asyncio.CancelledError:
        rec.upstream_wait += time.perf_counter() - sent_at
        _close_tap(decision.tap, "client_disconnected", rec, secret)
        if deferred is not None:
            _abandon(deferred, rec, secret)
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        rec.upstream_wait += time.perf_counter() - sent_at
        err, reason = _upstream_failure(exc)
        decision = await _completed(decision, deferred, rec, secret)
        _close_tap(decision.tap, reason, rec, secret)
        rec.error = err.code
        return _respond_error(rec, route.dialect, err, decision)
    rec.upstream_wait += time.perf_counter() - sent_at

    try:
        decision = await _completed(decision, deferred, rec, secret)
        return await _relay(request, rec, route, upstream_resp, decision, secret)
    finally:
        # Closing (not releasing) drops the upstream connection when the body was
        # not fully read, which is what tells upstream the client went away.
        if not upstream_resp.content.is_eof():
            upstream_resp.close()
        else:
            upstream_resp.release()


async def _completed(
    decision: Decision, deferred: AfterSend | None, rec: RequestRecord, secret: str | None
) -> Decision:
    """``decision`` completed by its deferred work (see :mod:`proxy.server.deferred`);
    a failure of that work is logged and leaves the decision as it was."""
    if deferred is None:
        return decision
    try:
        late, failure = await deferred.outcome()
    except asyncio.CancelledError:
        _abandon(deferred, rec, secret)
        raise
    if late is None:
        assert failure is not None
        _log_gate_failure("after_send", failure, secret, rec)
        rec.error = rec.error or "gate_error"
        return decision
    decision = merge(decision, late)
    rec.conversation = decision.conversation_id or rec.conversation
    return decision


def _abandon(deferred: AfterSend, rec: RequestRecord, secret: str | None) -> None:
    """The client went away: the deferred work finishes without us; its tap is closed."""
    deferred.abandon(
        lambda done: _close_tap(done.tap, "client_disconnected", rec, secret),
        lambda failure: _log_gate_failure("after_send", failure, secret, rec),
    )


async def _relay(
    request: web.Request,
    rec: RequestRecord,
    route: Route,
    up: aiohttp.ClientResponse,
    decision: Decision,
    secret: str | None,
) -> web.StreamResponse:
    rec.upstream_status = up.status
    rec.status = up.status
    tap = decision.tap
    content_type = up.headers.get("content-type", "")
    is_sse = content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
    encoding = up.headers.get("content-encoding", "identity").strip().lower()
    if tap is not None and encoding not in ("", "identity"):
        GATE_LOGGER.warning(
            "upstream sent a content-encoded body despite identity request; tap bypassed",
            extra={"fields": {"request_id": rec.request_id, "encoding": encoding}},
        )
        _close_tap(tap, "content_encoding", rec, secret)
        tap = None

    out_headers = downstream_headers(up.headers)
    no_body = request.method == "HEAD" or up.status in _NO_BODY_STATUSES or up.status < 200

    if no_body:
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers=out_headers)
        resp.headers.update(gate_headers(rec, decision))
        if request.method == "HEAD" and "content-length" in up.headers:
            resp.headers["content-length"] = up.headers["content-length"]
        if tap is not None:
            try:
                tap.feed_json(up.status, b"")
            except Exception as exc:  # noqa: BLE001
                _log_gate_failure("tap.feed_json", exc, secret, rec)
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    if is_sse:
        return await _relay_stream(request, rec, route, up, out_headers, decision, tap, secret)
    if tap is not None:
        return await _relay_tapped_json(request, rec, route, up, out_headers, decision, tap, secret)
    return await _relay_bytes(request, rec, up, out_headers, decision)


async def _read_upstream(up: aiohttp.ClientResponse, rec: RequestRecord) -> bytes:
    """Read one chunk from upstream, accounting the wait as upstream time."""
    t = time.perf_counter()
    try:
        return await up.content.readany()
    finally:
        rec.upstream_wait += time.perf_counter() - t


async def _relay_bytes(
    request: web.Request,
    rec: RequestRecord,
    up: aiohttp.ClientResponse,
    out_headers: CIMultiDict[str],
    decision: Decision,
) -> web.StreamResponse:
    """Relay a non-SSE body chunk by chunk, byte-exact, keeping Content-Length."""
    resp = web.StreamResponse(status=up.status, reason=up.reason, headers=out_headers)
    resp.headers.update(gate_headers(rec, decision))
    length = up.headers.get("content-length")
    if length is not None and length.isdigit():
        resp.content_length = int(length)
    await resp.prepare(request)
    try:
        while True:
            chunk = await _read_upstream(up, rec)
            if not chunk:
                break
            rec.bytes_out += len(chunk)
            await _write(resp, chunk)
        await resp.write_eof()
    except _ClientGone:
        rec.error = "client_disconnected"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        _, reason = _upstream_failure(exc)
        rec.error = reason
        _abort_client(request)
    except ConnectionError:
        rec.error = "client_disconnected"
    return resp


async def _relay_tapped_json(
    request: web.Request,
    rec: RequestRecord,
    route: Route,
    up: aiohttp.ClientResponse,
    out_headers: CIMultiDict[str],
    decision: Decision,
    tap: ResponseTap,
    secret: str | None,
) -> web.StreamResponse:
    """Buffer a non-SSE body, give it to the tap, send what the tap returns."""
    t = time.perf_counter()
    try:
        raw = await up.read()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        rec.upstream_wait += time.perf_counter() - t
        err, reason = _upstream_failure(exc)
        _close_tap(tap, reason, rec, secret)
        return _respond_error(rec, route.dialect, err, decision)
    except asyncio.CancelledError:
        _close_tap(tap, "client_disconnected", rec, secret)
        raise
    rec.upstream_wait += time.perf_counter() - t

    if getattr(tap, "observe_only", False) is True and request.app[CONFIG_KEY].gate.fail_open:
        # the tap only observes: send first, feed it in the next loop step (see hooks)
        asyncio.get_running_loop().call_soon(_feed_json_later, tap, up.status, raw, rec, secret)
        resp = web.Response(status=up.status, reason=up.reason, headers=out_headers, body=raw)
        resp.headers.update(gate_headers(rec, decision))
        rec.bytes_out = len(raw)
        return resp

    body = raw
    try:
        result = tap.feed_json(up.status, raw)
        if not isinstance(result, (bytes, bytearray)):
            raise TypeError(f"feed_json returned {type(result).__name__}, not bytes")
        body = bytes(result)
    except Exception as exc:  # noqa: BLE001
        _log_gate_failure("tap.feed_json", exc, secret, rec)
        rec.error = "tap_error"
        if not request.app[CONFIG_KEY].gate.fail_open:
            return _respond_error(
                rec,
                route.dialect,
                ProxyError(502, "compaction-gate failed to process the response.", code="gate_error"),
                decision,
            )
        body = raw
    resp = web.Response(status=up.status, reason=up.reason, headers=out_headers, body=body)
    resp.headers.update(gate_headers(rec, decision))
    rec.bytes_out = len(body)
    return resp


def _feed_json_later(tap: ResponseTap, status: int, raw: bytes, rec: RequestRecord, secret: str | None) -> None:
    try:
        tap.feed_json(status, raw)
    except Exception as exc:  # noqa: BLE001 - an observe-only tap broke its promise
        _log_gate_failure("tap.feed_json", exc, secret, rec)


class _ClientGone(Exception):
    """The client connection closed while we were writing to it."""


async def _write(resp: web.StreamResponse, data: bytes) -> None:
    try:
        await resp.write(data)
    except ConnectionError as exc:  # includes aiohttp.ClientConnectionResetError
        raise _ClientGone from exc


def _abort_client(request: web.Request) -> None:
    """Drop the client connection so a truncated body is never seen as complete."""
    transport = request.transport
    if transport is not None:
        transport.close()


class _TapGuard:
    """Wraps a tap so that any exception disables it (fail-open mid-stream)."""

    def __init__(self, tap: ResponseTap | None, rec: RequestRecord, secret: str | None) -> None:
        self.tap = tap
        self.rec = rec
        self.secret = secret
        self.spent = 0.0

    def _fail(self, where: str, exc: Exception) -> None:
        _log_gate_failure(where, exc, self.secret, self.rec)
        self.rec.error = "tap_error"
        tap, self.tap = self.tap, None
        _close_tap(tap, "tap_error", self.rec, self.secret)

    def event(self, raw: bytes) -> list[bytes]:
        if self.tap is None:
            return [raw]
        t = time.perf_counter()
        try:
            out = self.tap.feed_event(raw)
            if not isinstance(out, list) or not all(isinstance(e, (bytes, bytearray)) for e in out):
                raise TypeError("feed_event must return a list of bytes")
            return out
        except Exception as exc:  # noqa: BLE001
            self._fail("tap.feed_event", exc)
            return [raw]
        finally:
            self.spent += time.perf_counter() - t

    def finish(self) -> list[bytes]:
        if self.tap is None:
            return []
        try:
            out = self.tap.finish()
            if not isinstance(out, list) or not all(isinstance(e, (bytes, bytearray)) for e in out):
                raise TypeError("finish must return a list of bytes")
            self.tap = None
            return out
        except Exception as exc:  # noqa: BLE001
            self._fail("tap.finish", exc)
            return []

    def closed(self, reason: str) -> None:
        tap, self.tap = self.tap, None
        _close_tap(tap, reason, self.rec, self.secret)


async def _relay_stream(
    request: web.Request,
    rec: RequestRecord,
    route: Route,
    up: aiohttp.ClientResponse,
    out_headers: CIMultiDict[str],
    decision: Decision,
    tap: ResponseTap | None,
    secret: str | None,
) -> web.StreamResponse:
    """Relay SSE as it arrives: raw chunks without a tap, whole events with one."""
    rec.sse = True
    out_headers["X-Accel-Buffering"] = "no"
    resp = web.StreamResponse(status=up.status, reason=up.reason, headers=out_headers)
    resp.headers.update(gate_headers(rec, decision))
    await resp.prepare(request)
    guard = _TapGuard(tap, rec, secret)
    splitter = SSESplitter() if tap is not None else None

    async def send(parts: list[bytes]) -> None:
        data = b"".join(parts)
        if data:
            rec.bytes_out += len(data)
            await _write(resp, data)

    try:
        while True:
            chunk = await _read_upstream(up, rec)
            if not chunk:
                break
            if splitter is None or guard.tap is None:
                if splitter is not None and splitter.pending:
                    # the tap was disabled mid-stream: release what it had buffered
                    chunk = splitter.flush() + chunk
                await send([chunk])
                continue
            out: list[bytes] = []
            for event in splitter.feed(chunk):
                out.extend(guard.event(event))
            await send(out)
        if splitter is not None:
            rest = splitter.flush()
            tail: list[bytes] = []
            if rest:
                tail.extend(guard.event(rest))
            tail.extend(guard.finish())
            await send(tail)
    except asyncio.CancelledError:
        rec.error = "client_disconnected"
        guard.closed("client_disconnected")
        raise
    except _ClientGone:
        rec.error = "client_disconnected"
        guard.closed("client_disconnected")
        return resp
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        err, reason = _upstream_failure(exc)
        rec.error = reason
        guard.closed(reason)
        try:
            await send([sse_error_event(route.dialect, err)])
            await resp.write_eof()
        except (_ClientGone, ConnectionError):
            pass
        return resp
        rec.error = "client_disconnected"
        guard.closed("client_disconnected")
        return resp
    try:
        await resp.write_eof()
    except ConnectionError:
        rec.error = "client_disconnected"
    return resp


def dialect_for(request: web.Request) -> DialectName:
    """Dialect for requests outside the proxied routes (router errors)."""
    return detect_dialect(request.headers)
