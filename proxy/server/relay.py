"""Relaying upstream's response to the client: byte for byte (still content-encoded),
as a buffered JSON body given to a tap, or as an SSE stream fed event by event to a
tap that never delays an event it passes through. A tap that fails is disabled for
the rest of the response (fail-open); a client that goes away stops the relay and
drops the upstream connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from proxy.server import filled
from proxy.server.errors import ProxyError, sse_error_event
from proxy.server.headers import downstream_headers
from proxy.server.hooks import Decision, DialectName, ResponseTap
from proxy.server.logs import GATE_LOGGER
from proxy.server.record import (
    RequestRecord,
    close_rounds,
    close_tap,
    gate_headers,
    log_gate_failure,
    respond_error,
    upstream_failure,
)
from proxy.server.routes import Route
from proxy.server.sliced import body_payload
from proxy.server.sse import SSESplitter
from proxy.server.state import CONFIG_KEY

__all__ = ["Send", "relay"]

#: Sends one more upstream request of this exchange (same method, URL and headers) with
#: the given body: what a decision's ``rounds`` use for follow-up rounds.
Send = Callable[[bytes], Awaitable[aiohttp.ClientResponse]]

_NO_BODY_STATUSES = frozenset({204, 304})


@dataclass(slots=True)
class _Relay:
    """One response being relayed: what every way of relaying it needs."""

    request: web.Request
    rec: RequestRecord
    route: Route
    up: aiohttp.ClientResponse
    headers: CIMultiDict[str]  # upstream's, for the client (hop-by-hop and length removed)
    decision: Decision
    secret: str | None
    #: headers a decision's ``rounds`` add to the client's response
    extra: Mapping[str, str] = field(default_factory=dict)

    def response(self, body: bytes | None = None) -> web.StreamResponse:
        """The client's response: upstream's status and headers, plus the gate's
        headers; streamed, or whole with ``body``."""
        up = self.up
        resp = (
            web.StreamResponse(status=up.status, reason=up.reason, headers=self.headers)
            if body is None
            else web.Response(status=up.status, reason=up.reason, headers=self.headers, body=body_payload(body))
        )
        resp.headers.update(gate_headers(self.rec, self.decision))
        resp.headers.update(self.extra)
        return resp


async def relay(
    request: web.Request,
    rec: RequestRecord,
    route: Route,
    up: aiohttp.ClientResponse,
    decision: Decision,
    secret: str | None,
    send: Send | None = None,
) -> web.StreamResponse:
    """Relay ``up`` to the client (see the module docstring); with ``send``, a decision's
    ``rounds`` may ask upstream again (:mod:`proxy.server.rounds`)."""
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
        close_tap(tap, "content_encoding", rec, secret)
        tap = None
    rounds = decision.rounds if send is not None else None
    if rounds is not None and encoding not in ("", "identity"):
        close_rounds(rounds, "content_encoding", rec, secret)
        rounds = None

    r = _Relay(request, rec, route, up, downstream_headers(up.headers), decision, secret)
    no_body = request.method == "HEAD" or up.status in _NO_BODY_STATUSES or up.status < 200

    if rounds is not None and (no_body or (is_sse and not 200 <= up.status < 300)):
        close_rounds(rounds, "no_body", rec, secret)
        rounds = None
    if rounds is not None:
        from proxy.server.rounds import relay_rounds

        assert send is not None
        return await relay_rounds(r, tap, rounds, send, is_sse=is_sse)

    if no_body:
        resp = r.response()
        if request.method == "HEAD" and "content-length" in up.headers:
            resp.headers["content-length"] = up.headers["content-length"]
        if tap is not None:
            try:
                tap.feed_json(up.status, b"")
            except Exception as exc:  # noqa: BLE001
                log_gate_failure("tap.feed_json", exc, secret, rec)
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    if is_sse:
        return await _relay_stream(r, tap)
    if tap is not None:
        return await _relay_tapped_json(r, tap)
    return await _relay_bytes(r)


async def _read_upstream(up: aiohttp.ClientResponse, rec: RequestRecord) -> bytes:
    """Read one chunk from upstream, accounting the wait as upstream time."""
    t = time.perf_counter()
    try:
        return await up.content.readany()
    finally:
        rec.upstream_wait += time.perf_counter() - t


async def _relay_bytes(r: _Relay) -> web.StreamResponse:
    """Relay a non-SSE body chunk by chunk, byte-exact, keeping Content-Length."""
    request, rec, up = r.request, r.rec, r.up
    resp = r.response()
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
        _, reason = upstream_failure(exc)
        rec.error = reason
        _abort_client(request)
    except ConnectionError:
        rec.error = "client_disconnected"
    return resp


async def _relay_tapped_json(r: _Relay, tap: ResponseTap) -> web.StreamResponse:
    """Buffer a non-SSE body, give it to the tap, send what the tap returns."""
    rec, up, decision, secret = r.rec, r.up, r.decision, r.secret
    t = time.perf_counter()
    try:
        raw = await read_whole(up)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        rec.upstream_wait += time.perf_counter() - t
        err, reason = upstream_failure(exc)
        close_tap(tap, reason, rec, secret)
        return respond_error(rec, r.route.dialect, err, decision)
    except asyncio.CancelledError:
        close_tap(tap, "client_disconnected", rec, secret)
        raise
    rec.upstream_wait += time.perf_counter() - t
    return await respond_tapped(r, tap, raw)



async def read_whole(up: aiohttp.ClientResponse) -> bytes:
    """``await up.read()``; a large body (a ``Content-Length`` from
    :data:`~proxy.server.filled.MIN_BYTES` on) made as it arrives
    (:mod:`proxy.server.filled`), not joined in one step at the end."""
    declared = up.content_length
    if declared is None or declared < filled.MIN_BYTES:
        return await up.read()
    chunks = filled.Collector(declared)
    try:
        async for chunk in up.content.iter_any():
            chunks.add(chunk)
    except BaseException:
        up.close()
        raise
    await up.read()  # at the end of the stream: b"", and the connection released as read() does
    return chunks.result()


async def respond_tapped(r: _Relay, tap: ResponseTap, raw: bytes) -> web.StreamResponse:
    """Give a whole (non-SSE) body to the tap and answer with what it returns (after a
    settling tap has settled)."""
    request, rec, up, decision, secret = r.request, r.rec, r.up, r.decision, r.secret
    settles = getattr(tap, "settles", False) is True
    if not settles and getattr(tap, "observe_only", False) is True and request.app[CONFIG_KEY].gate.fail_open:
        # the tap only observes: send first, feed it in the next loop step (see hooks)
        asyncio.get_running_loop().call_soon(_feed_json_later, tap, up.status, raw, rec, secret)
        rec.bytes_out = len(raw)
        return r.response(raw)

    body = raw
    try:
        result = tap.feed_json(up.status, raw)
        if not isinstance(result, (bytes, bytearray)):
            raise TypeError(f"feed_json returned {type(result).__name__}, not bytes")
        body = bytes(result)
    except Exception as exc:  # noqa: BLE001
        log_gate_failure("tap.feed_json", exc, secret, rec)
        rec.error = "tap_error"
        if not request.app[CONFIG_KEY].gate.fail_open:
            return respond_error(
                rec,
                r.route.dialect,
                ProxyError(502, "compaction-gate failed to process the response.", code="gate_error"),
                decision,
            )
        body = raw
    if settles:
        await _settle(tap, rec, secret)
    rec.bytes_out = len(body)
    return r.response(body)


async def _settle(tap: ResponseTap | None, rec: RequestRecord, secret: str | None) -> None:
    """Await a settling tap (see :class:`~proxy.server.hooks.ResponseTap`); a failure is
    logged and the response goes on."""
    if tap is None or getattr(tap, "settles", False) is not True:
        return
    try:
        await tap.settle()  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - recording must never lose the response
        log_gate_failure("tap.settle", exc, secret, rec)


def _feed_json_later(tap: ResponseTap, status: int, raw: bytes, rec: RequestRecord, secret: str | None) -> None:
    try:
        tap.feed_json(status, raw)
    except Exception as exc:  # noqa: BLE001 - an observe-only tap broke its promise
        log_gate_failure("tap.feed_json", exc, secret, rec)


class _ClientGone(Exception):
    """The client connection closed while we were writing to it."""


async def end_with_error(
    send: Callable[[list[bytes]], Awaitable[None]], resp: web.StreamResponse, dialect: DialectName, err: ProxyError
) -> None:
    """End a stream already under way with the dialect's error event (a client that is
    gone by then is fine: there is nobody left to tell)."""
    try:
        await send([sse_error_event(dialect, err)])
        await resp.write_eof()
    except (_ClientGone, ConnectionError):
        pass


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
        #: the tap once finished, awaited by ``settle`` before the stream ends
        self.settling: ResponseTap | None = None

    def _fail(self, where: str, exc: Exception) -> None:
        log_gate_failure(where, exc, self.secret, self.rec)
        self.rec.error = "tap_error"
        tap, self.tap = self.tap, None
        close_tap(tap, "tap_error", self.rec, self.secret)

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
            self.settling, self.tap = self.tap, None
            return out
        except Exception as exc:  # noqa: BLE001
            self._fail("tap.finish", exc)
            return []

    def closed(self, reason: str) -> None:
        tap, self.tap = self.tap, None
        close_tap(tap, reason, self.rec, self.secret)


async def _relay_stream(r: _Relay, tap: ResponseTap | None) -> web.StreamResponse:
    """Relay SSE as it arrives: raw chunks without a tap, whole events with one."""
    rec, up = r.rec, r.up
    rec.sse = True
    r.headers["X-Accel-Buffering"] = "no"
    resp = r.response()
    await resp.prepare(r.request)
    guard = _TapGuard(tap, rec, r.secret)
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
            await _settle(guard.settling, rec, r.secret)
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
        err, reason = upstream_failure(exc)
        rec.error = reason
        guard.closed(reason)
        await end_with_error(send, resp, r.route.dialect, err)
        return resp
        rec.error = "client_disconnected"
        guard.closed("client_disconnected")
        return resp
    try:
        await resp.write_eof()
    except ConnectionError:
        rec.error = "client_disconnected"
    return resp
