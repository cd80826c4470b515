"""The proxy handler: client request → Exchange → Decision → upstream → client.

This module owns the request side of the byte path (:mod:`proxy.server.relay` the
response side, :mod:`proxy.server.record` the per-request bookkeeping). It never
re-serialises a body it did not have to change: request bytes are forwarded as read
(unless a Decision replaces them) and response bytes are relayed as received (still
content-encoded, since the upstream session does not auto-decompress) unless a
ResponseTap is attached. With a tap the proxy asks upstream for identity encoding, so
the tap sees plain JSON / SSE.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from aiohttp import http_exceptions, web

from proxy.config import Upstream
from proxy.core.jsonbody import BodyCache
from proxy.metrics import METRICS_KEY
from proxy.server import bodyparse, filled
from proxy.server.decide import decide
from proxy.server.deferred import AfterSend, merge
from proxy.server.errors import ProxyError
from proxy.server.headers import (
    credential,
    safe_headers,
    tenant_of,
    upstream_headers,
)
from proxy.server.hooks import Decision, DialectName, Exchange, Reject
from proxy.server.inflight import INFLIGHT_KEY
from proxy.server.protocol import ClientBodyTimeout
from proxy.server.record import (
    UNKNOWN_CONVERSATION,
    RequestRecord,
    close_tap,
    log_gate_failure,
    new_request_id,
    respond_error,
    shutdown_error,
    upstream_failure,
)
from proxy.server.relay import relay
from proxy.server.routes import Route, classify, route_template
from proxy.server.sliced import body_payload
from proxy.server.state import CONFIG_KEY, INTERCEPTOR_KEY, SESSION_KEY
from proxy.server.upstream import apply_credentials, proxy_for, select_upstream, target_url
from proxy.server.websocket import is_websocket, relay_websocket
from proxy.state.store import Store

__all__ = ["BODY_CACHE", "proxy_handler"]

#: Recently parsed request bodies per tenant: agents resend their whole history, so a
#: body is parsed incrementally from the longest byte-identical prefix of a recent one
#: (exactly ``json.loads``; see :mod:`proxy.core.jsonbody`). One per process, used only
#: from the event loop.
BODY_CACHE = BodyCache()

_JSON_MIME_SUFFIX = "+json"


def _is_json_mime(content_type: str) -> bool:
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or mime.endswith(_JSON_MIME_SUFFIX)


#: Content-Encodings of request bodies that aiohttp's parser decodes (streaming, so the
#: decoded size is what ``max_body_bytes`` bounds: a zip bomb is a 413).
DECODED_ENCODINGS = frozenset({"gzip", "x-gzip", "deflate", "br"})


class _BadBody(Exception):
    """The request body could not be read as sent (its encoding, its framing)."""


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """Read the whole request body, decoded from its Content-Encoding by aiohttp;
    ``None`` if it (decoded) exceeds ``limit`` bytes; :class:`_BadBody` if it cannot be
    decoded or is cut short; :class:`ClientBodyTimeout` if the client stops sending it."""
    declared = request.content_length
    if declared is not None and declared > limit:
        return None
    chunks = filled.Collector(declared)  # a large body is made as it arrives, not joined
    size = 0
    try:
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                return None
            chunks.add(chunk)
    except (web.RequestPayloadError, http_exceptions.HttpProcessingError) as exc:
        raise _BadBody(type(exc).__name__) from None
    return chunks.result()


def new_record(request: web.Request) -> RequestRecord:
    """The bookkeeping of one request, with a fresh request id and its route template."""
    return RequestRecord(request_id=new_request_id(), method=request.method, route=route_template(request.path))


def _content_encoding(request: web.Request) -> tuple[str, ProxyError | None]:
    """The request body's Content-Encoding and, when it is one this proxy cannot decode
    (so it could neither inspect nor safely forward the body), the 415 saying so."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity") or encoding in DECODED_ENCODINGS:
        return encoding, None
    return encoding, ProxyError(
        415,
        f"Unsupported request Content-Encoding {encoding[:40]!r}: this proxy decodes gzip, "
        "deflate and br (one encoding, not a list); send one of those or identity.",
        code="unsupported_content_encoding",
    )


def _undecodable_header(headers: Any) -> str | None:
    """The name of a header whose value is not UTF-8 (it could be neither hashed into
    a tenant nor forwarded), if any."""
    for name, value in headers.items():
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return str(name)
    return None


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Handle one ``/v1/...`` request end to end (see module docstring)."""
    rec = new_record(request)
    inflight = request.app.get(INFLIGHT_KEY)
    rec.slot = inflight.enter() if inflight is not None else None
    try:
        return await _handle(request, rec)
    except asyncio.CancelledError:
        if rec.slot is not None and rec.slot.cut and rec.upstream_status is None and _uncancel():
            # the shutdown grace period is over and nothing was sent yet
            return respond_error(rec, rec.dialect, shutdown_error())  # type: ignore[arg-type]
        rec.error = rec.error or "client_disconnected"
        rec.status = rec.status or 499
        raise
    finally:
        if inflight is not None and rec.slot is not None:
            inflight.leave(rec.slot)
        # The access line and the metrics once the response is on its way: aiohttp
        # writes a returned response in this same loop step, before this callback runs.
        asyncio.get_running_loop().call_soon(_after_response, request.app, rec)


def _uncancel() -> bool:
    """Withdraw the cancellation of the current task (the shutdown's, which this task
    answers itself); False if someone else cancelled it too."""
    task = asyncio.current_task()
    return task is not None and task.uncancel() == 0


def _after_response(app: web.Application, rec: RequestRecord) -> None:
    rec.emit()
    metrics = app.get(METRICS_KEY)
    if metrics is not None:
        metrics.observe_request(rec.route, rec.status, rec.overhead_ms() / 1000.0)
        if rec.sse:
            metrics.streamed_bytes(rec.bytes_out, rec.route)


async def _handle(request: web.Request, rec: RequestRecord) -> web.StreamResponse:
    app = request.app
    config = app[CONFIG_KEY]
    route = classify(request.method, request.path, request.headers)
    rec.kind, rec.dialect = route.kind, route.dialect
    bad_header = _undecodable_header(request.headers)
    if bad_header is not None:
        return respond_error(
            rec,
            route.dialect,
            ProxyError(400, f"Header {bad_header[:64]!r} is not valid UTF-8.", code="invalid_header"),
        )
    secret = credential(request.headers)
    rec.tenant = tenant_of(secret)
    if is_websocket(request):
        rec.kind = "websocket"
        return await relay_websocket(request, rec, route)

    limit = config.server.max_body_bytes
    encoding, refused = _content_encoding(request)
    if refused is not None:
        return respond_error(rec, route.dialect, refused)
    try:
        body = await _read_body(request, limit)
    except ClientBodyTimeout as exc:
        resp = respond_error(
            rec,
            route.dialect,
            ProxyError(
                408,
                f"The request body stopped arriving: {exc} (server.client_body_timeout).",
                code="request_timeout",
            ),
        )
        resp.force_close()  # what the client may still send is not read
        return resp
    except _BadBody as exc:
        how = f"its Content-Encoding {encoding!r}" if encoding not in ("", "identity") else "its framing"
        return respond_error(
            rec,
            route.dialect,
            ProxyError(400, f"The request body could not be read: {how} is broken ({exc}).", code="invalid_body"),
        )
    if body is None:
        return respond_error(
            rec,
            route.dialect,
            ProxyError(
                413,
                f"Request body is larger than this proxy's limit of {limit} bytes "
                "(server.max_body_bytes; decoded size when compressed).",
                code="request_too_large",
            ),
        )
    rec.bytes_in = len(body)
    store = getattr(getattr(app.get(INTERCEPTOR_KEY), "tracker", None), "store", None)
    if isinstance(store, Store) and len(body) >= bodyparse.OFFLOAD_BYTES:
        await store.room()  # a large body waits while the store's writer is behind

    parsed, problem = await _parse_body(request, route, body, rec.tenant)
    if problem is not None:
        return respond_error(rec, route.dialect, problem)

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
        supports_rounds=True,
    )
    rec.stream, rec.model = exchange.stream, exchange.model

    decision, failure = await decide(app[INTERCEPTOR_KEY], exchange, config, secret, rec)
    if failure is not None:
        return respond_error(rec, route.dialect, failure)
    assert decision is not None
    rec.action = decision.action
    rec.conversation = decision.conversation_id or UNKNOWN_CONVERSATION
    if decision.reject is not None:
        return _reject(rec, route.dialect, decision.reject, decision)

    upstream = select_upstream(config, route.dialect, exchange.model)
    rec.upstream = upstream.name
    out_body = decision.body if decision.body is not None else body
    return await _forward(request, rec, route, upstream, out_body, decision, secret)


async def _parse_body(
    request: web.Request, route: Route, body: bytes, tenant: str
) -> tuple[Any, ProxyError | None]:
    """Parse a JSON body; enforce JSON only where the API requires it. Bodies of the
    JSON APIs are parsed through :data:`BODY_CACHE` (scoped by tenant), a large one
    off the event loop (:mod:`proxy.server.bodyparse`)."""
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
            parsed = await bodyparse.loads(BODY_CACHE, body, tenant)
        except RecursionError:
            return None, ProxyError(400, "Request body is nested too deeply to be parsed.", code="invalid_json")
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
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None, None
    return None, None


def _model_of(parsed: Any) -> str | None:
    if isinstance(parsed, dict):
        model = parsed.get("model")
        if isinstance(model, str):
            return model
    return None


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
    return respond_error(rec, dialect, err, decision)


# ------------------------------------------------------------------------ forwarding


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
        request.headers,
        identity_encoding=decision.tap is not None or decision.after_send is not None or decision.rounds is not None,
    )
    headers.popall("expect", None)
    # the body read is the decoded one (aiohttp decodes gzip/deflate/br): forward it so
    headers.popall("content-encoding", None)
    apply_credentials(headers, upstream, route.dialect)
    url = target_url(upstream, route.dialect, request.raw_path)

    deferred = AfterSend(decision.after_send) if decision.after_send is not None else None
    data: Any = body_payload(body) if body else None
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
            proxy=proxy_for(url, request.app[CONFIG_KEY].server),
        )
    except asyncio.CancelledError:
        rec.upstream_wait += time.perf_counter() - sent_at
        close_tap(decision.tap, "client_disconnected", rec, secret)
        if deferred is not None:
            _abandon(deferred, rec, secret)
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
        rec.upstream_wait += time.perf_counter() - sent_at
        err, reason = upstream_failure(exc)
        decision = await _completed(decision, deferred, rec, secret)
        close_tap(decision.tap, reason, rec, secret)
        rec.error = err.code
        return respond_error(rec, route.dialect, err, decision)
    rec.upstream_wait += time.perf_counter() - sent_at
    if rec.slot is not None:
        rec.slot.upstream = upstream_resp

    send = None
    if decision.rounds is not None:

        async def send(again: bytes) -> aiohttp.ClientResponse:
            """A follow-up round of this exchange (``Decision.rounds``)."""
            t = time.perf_counter()
            try:
                return await session.request(
                    request.method,
                    url,
                    data=body_payload(again),
                    headers=headers,
                    allow_redirects=False,
                    proxy=proxy_for(url, request.app[CONFIG_KEY].server),
                )
            finally:
                rec.upstream_wait += time.perf_counter() - t

    try:
        decision = await _completed(decision, deferred, rec, secret)
        return await relay(request, rec, route, upstream_resp, decision, secret, send)
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
        log_gate_failure("after_send", failure, secret, rec)
        rec.error = rec.error or "gate_error"
        return decision
    decision = merge(decision, late)
    rec.conversation = decision.conversation_id or rec.conversation
    return decision


def _abandon(deferred: AfterSend, rec: RequestRecord, secret: str | None) -> None:
    """The client went away: the deferred work finishes without us; its tap is closed."""
    deferred.abandon(
        lambda done: close_tap(done.tap, "client_disconnected", rec, secret),
        lambda failure: log_gate_failure("after_send", failure, secret, rec),
    )
