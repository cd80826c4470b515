"""Relaying a response that takes several upstream rounds (``Decision.rounds``).

The I/O half of "the gate asks upstream again": :class:`~proxy.server.hooks.Rounds`
decides, after each upstream response, whether it is the answer or what to send next;
this module sends the follow-up requests (through the handler's ``send``: same method,
URL and headers) and relays one response to the client:

- JSON: each round's body is read whole and handed to ``after_json``; the client gets
  the last round's status and headers with the body it returns, through the tap.
- SSE: the client's stream starts with the first round's status and headers; every
  round's events go through ``feed_event`` and the tap as they arrive, and
  ``after_stream`` at the end of each round says whether another round follows. A
  follow-up answered with an error ends the stream with the dialect's error event.

A client that goes away cancels the handler, and with it the round in flight: its
upstream connection is closed (not released), which is what tells upstream. An
exception in the rounds object disables it: what it was handed passes on unchanged.
At most :data:`MAX_FOLLOW_UPS` follow-ups are sent whatever the object asks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from proxy.server.errors import ProxyError, sse_error_event
from proxy.server.headers import downstream_headers
from proxy.server.hooks import FollowUp, ResponseTap, Rounds
from proxy.server.record import (
    RequestRecord,
    close_rounds,
    close_tap,
    log_gate_failure,
    respond_error,
    upstream_failure,
)
from proxy.server.relay import (
    Send,
    _ClientGone,
    _read_upstream,
    _Relay,
    _settle,
    _TapGuard,
    _write,
    end_with_error,
    respond_tapped,
)
from proxy.server.sse import SSESplitter

__all__ = ["MAX_FOLLOW_UPS", "relay_rounds"]

#: Follow-up requests one client request may cause, whatever its rounds ask for.
MAX_FOLLOW_UPS = 16


class _Guard:
    """The decision's rounds, disabled (pass-through) by the first exception."""

    def __init__(self, rounds: Rounds, rec: RequestRecord, secret: str | None) -> None:
        self.rounds: Rounds | None = rounds  # None once broken or closed
        self.ended = False  # it gave its terminal answer (headers may still be asked)
        self.rec, self.secret = rec, secret

    def _fail(self, where: str, exc: Exception) -> None:
        log_gate_failure(where, exc, self.secret, self.rec)
        self.rec.error = "gate_error"
        rounds, self.rounds = self.rounds, None
        close_rounds(rounds, "tap_error", self.rec, self.secret)

    async def after_json(self, status: int, body: bytes) -> bytes | FollowUp:
        if self.rounds is None or self.ended:
            return body
        try:
            out = await self.rounds.after_json(status, body)
            if not isinstance(out, (bytes, FollowUp)):
                raise TypeError(f"after_json returned {type(out).__name__}")
            self.ended = isinstance(out, bytes)
            return out
        except Exception as exc:  # noqa: BLE001 - fail open: relay what upstream said
            self._fail("rounds.after_json", exc)
            return body

    def event(self, raw: bytes) -> list[bytes]:
        if self.rounds is None or self.ended:
            return [raw]
        try:
            out = self.rounds.feed_event(raw)
            if not isinstance(out, list):
                raise TypeError("feed_event must return a list of bytes")
            return out
        except Exception as exc:  # noqa: BLE001
            self._fail("rounds.feed_event", exc)
            return [raw]

    async def after_stream(self) -> list[bytes] | FollowUp:
        if self.rounds is None or self.ended:
            return []
        try:
            out = await self.rounds.after_stream()
            if not isinstance(out, (list, FollowUp)):
                raise TypeError(f"after_stream returned {type(out).__name__}")
            self.ended = isinstance(out, list)
            return out
        except Exception as exc:  # noqa: BLE001
            self._fail("rounds.after_stream", exc)
            return []

    def headers(self) -> Mapping[str, str]:
        if self.rounds is None:
            return {}
        try:
            return dict(self.rounds.headers())
        except Exception as exc:  # noqa: BLE001
            self._fail("rounds.headers", exc)
            return {}

    def closed(self, reason: str) -> None:
        rounds, self.rounds = self.rounds, None
        if not self.ended:
            close_rounds(rounds, reason, self.rec, self.secret)


def _is_sse(up: aiohttp.ClientResponse) -> bool:
    return up.headers.get("content-type", "").split(";", 1)[0].strip().lower() == "text/event-stream"


def _release(up: aiohttp.ClientResponse) -> None:
    if not up.content.is_eof():
        up.close()  # drops the connection: upstream sees the client go
    else:
        up.release()


async def relay_rounds(
    r: _Relay, tap: ResponseTap | None, rounds: Rounds, send: Send, *, is_sse: bool
) -> web.StreamResponse:
    guard = _Guard(rounds, r.rec, r.secret)
    extra: list[aiohttp.ClientResponse] = []  # follow-up responses (the first is the handler's)

    async def follow(body: bytes) -> aiohttp.ClientResponse:
        up = await send(body)
        extra.append(up)
        r.rec.follow_ups += 1
        if r.rec.slot is not None:
            r.rec.slot.upstream = up
        return up

    try:
        if is_sse:
            return await _stream(r, tap, guard, follow)
        return await _json(r, tap, guard, follow)
    finally:
        for up in extra:
            _release(up)


async def _json(r: _Relay, tap: ResponseTap | None, guard: _Guard, follow: Send) -> web.StreamResponse:
    rec = r.rec
    out: bytes | FollowUp = b""
    for n in range(MAX_FOLLOW_UPS + 1):
        t = time.perf_counter()
        try:
            raw = await r.up.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            rec.upstream_wait += time.perf_counter() - t
            err, reason = upstream_failure(exc)
            guard.closed(reason)
            close_tap(tap, reason, rec, r.secret)
            return respond_error(rec, r.route.dialect, err, r.decision)
        except asyncio.CancelledError:
            guard.closed("client_disconnected")
            close_tap(tap, "client_disconnected", rec, r.secret)
            raise
        rec.upstream_wait += time.perf_counter() - t
        out = await guard.after_json(r.up.status, raw)
        if isinstance(out, bytes):
            break
        if n == MAX_FOLLOW_UPS:
            guard.closed("rounds_limit")
            out = raw
            break
        try:
            up = await follow(out.body)
        except asyncio.CancelledError:
            guard.closed("client_disconnected")
            close_tap(tap, "client_disconnected", rec, r.secret)
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as exc:
            err, reason = upstream_failure(exc)
            guard.closed(reason)
            close_tap(tap, reason, rec, r.secret)
            rec.error = err.code
            return respond_error(rec, r.route.dialect, err, r.decision)
        r.up, r.headers = up, downstream_headers(up.headers)
        rec.upstream_status = rec.status = up.status
    assert isinstance(out, bytes)
    r.extra = guard.headers()
    if tap is None:
        rec.bytes_out = len(out)
        return r.response(out)
    return await respond_tapped(r, tap, out)


def _followup_error(status: int, body: bytes) -> ProxyError:
    """Upstream's error answer to a follow-up round, as the proxy's own error event."""
    message = f"upstream answered a follow-up round with HTTP {status}"
    try:
        obj = json.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
    except ValueError:
        pass
    return ProxyError(status if 400 <= status <= 599 else 502, message, code="upstream_error")


async def _stream(r: _Relay, tap: ResponseTap | None, guard: _Guard, follow: Send) -> web.StreamResponse:
    rec, up = r.rec, r.up
    rec.sse = True
    r.headers["X-Accel-Buffering"] = "no"
    r.extra = guard.headers()
    resp = r.response()
    await resp.prepare(r.request)
    taps = _TapGuard(tap, rec, r.secret)

    def through(events: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        for e in events:
            for g in guard.event(e):
                out.extend(taps.event(g))
        return out

    async def send(parts: list[bytes]) -> None:
        data = b"".join(parts)
        if data:
            rec.bytes_out += len(data)
            await _write(resp, data)

    def ended(reason: str) -> None:
        guard.closed(reason)
        taps.closed(reason)

    try:
        for n in range(MAX_FOLLOW_UPS + 1):
            splitter = SSESplitter()
            while True:
                chunk = await _read_upstream(up, rec)
                if not chunk:
                    break
                await send(through(splitter.feed(chunk)))
            rest = splitter.flush()
            if rest:
                await send(through([rest]))
            nxt = await guard.after_stream()
            if isinstance(nxt, FollowUp) and n < MAX_FOLLOW_UPS:
                up = await follow(nxt.body)
                if 200 <= up.status < 300 and _is_sse(up):
                    continue
                body = await up.read()
                err = _followup_error(up.status, body)
                rec.error = "upstream_error"
                ended("upstream_error")
                await send([sse_error_event(r.route.dialect, err)])
                break
            if isinstance(nxt, FollowUp):
                guard.closed("rounds_limit")
                nxt = []
            tail = [e for g in nxt for e in taps.event(g)]
            tail += taps.finish()
            await _settle(taps.settling, rec, r.secret)
            await send(tail)
            break
    except asyncio.CancelledError:
        rec.error = "client_disconnected"
        ended("client_disconnected")
        raise
    except (_ClientGone, ConnectionError):
        rec.error = "client_disconnected"
        ended("client_disconnected")
        return resp
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        err, reason = upstream_failure(exc)
        rec.error = reason
        ended(reason)
        await end_with_error(send, resp, r.route.dialect, err)
        return resp
    try:
        await resp.write_eof()
    except ConnectionError:
        rec.error = "client_disconnected"
    return resp
