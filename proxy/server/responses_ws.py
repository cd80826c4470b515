"""The Responses API WebSocket mode, gated like ``POST /v1/responses``.

Each ``response.create`` frame the client sends is one request of its conversation:
:class:`~proxy.core.responses_ws.SocketHistory` resolves ``previous_response_id`` to the
history this socket saw, the frame becomes an :class:`~proxy.server.hooks.Exchange`
(the resolved body as ``json``, the frame as ``body``, the handshake's headers plus the
frame's ``client_metadata`` headers), and the interceptor's decision is applied as it is
for HTTP:

* ``reject`` — the frame never goes upstream; the client gets an ``error`` event with
  ``status`` 400 and the rejection's code and message (Codex CLI shows it and does not
  retry; the OpenAI SDK raises it); the socket stays open;
* a rewritten body — sent upstream as one whole frame (no ``previous_response_id``);
* a tap — the response's events go through it as SSE events (one tap implementation for
  HTTP streams and sockets); what it emits goes to the client as frames.

A frame that only warms the socket up (``generate: false``) or continues a response this
socket never saw is relayed untouched: it carries no history the gate could judge. Other
client frames and every non-text frame pass through unchanged. This module only turns
frames into core inputs and decisions into frames.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from proxy.core.responses_ws import (
    TERMINAL_EVENTS,
    Create,
    OutputCollector,
    SocketHistory,
    as_sse,
    error_event,
    event_type,
    frame_headers,
    from_sse,
    parse_create,
    upstream_frame,
)
from proxy.server.decide import decide
from proxy.server.deferred import merge
from proxy.server.headers import credential, safe_headers
from proxy.server.hooks import Decision, Exchange, Reject, ResponseTap
from proxy.server.record import RequestRecord, close_tap, log_gate_failure
from proxy.server.state import CONFIG_KEY, INTERCEPTOR_KEY

__all__ = ["relay_responses"]


@dataclass
class _InFlight:
    """A frame sent upstream whose response has not ended yet."""

    create: Create
    tap: ResponseTap | None = None
    #: the gate changed the request (upstream's history differs from the client's)
    changed: bool = False
    #: a tap changed the response
    altered: bool = False
    collector: OutputCollector = field(default_factory=OutputCollector)


class _GatedSocket:
    def __init__(self, request: web.Request, rec: RequestRecord, client: web.WebSocketResponse,
                 up: aiohttp.ClientWebSocketResponse) -> None:
        self.request, self.rec, self.client, self.up = request, rec, client, up
        self.secret = credential(request.headers)
        self.headers = safe_headers(request.headers)
        self.history = SocketHistory()
        self.inflight: deque[_InFlight] = deque()

    # ------------------------------------------------------------------ client → upstream

    async def from_client(self, text: str) -> None:
        frame = parse_create(text)
        if frame is None:
            await self.up.send_str(text)
            return
        create = self.history.resolve(frame)
        if create.body is None or create.warmup:
            self.inflight.append(_InFlight(create))
            await self.up.send_str(text)
            return
        decision = await self._decision(create, text)
        if decision.reject is not None:
            r = decision.reject
            self.rec.error = r.code
            await self.client.send_str(error_event(r.status, r.message, code=r.code, type=r.type, param=r.param,
                                                   headers={"x-should-retry": "false"}))
            return
        body = json.loads(decision.body) if decision.body is not None else None
        flight = _InFlight(create, decision.tap, changed=body is not None)
        self.inflight.append(flight)
        out = upstream_frame(create, body)
        await self.up.send_str(text if out is None else out)
        if decision.after_send is not None:
            try:
                late = await decision.after_send()
                flight.tap = merge(decision, late).tap
            except Exception as exc:  # noqa: BLE001 - the request is already on its way
                log_gate_failure("after_send", exc, self.secret, self.rec)

    async def _decision(self, create: Create, text: str) -> Decision:
        assert create.body is not None
        body = create.body
        ex = Exchange(
            method="POST", path="/v1/responses", query=self.request.query_string, dialect="openai",
            kind="responses", headers=frame_headers(self.headers, create.frame), tenant=self.rec.tenant,
            body=text.encode(), json=body, stream=True,
            model=body.get("model") if isinstance(body.get("model"), str) else None,
            request_id=self.rec.request_id,
        )
        config = self.request.app[CONFIG_KEY]
        decision, failure = await decide(self.request.app[INTERCEPTOR_KEY], ex, config, self.secret, self.rec)
        if decision is None:  # gate.fail_open is false and the gate failed: refuse this frame
            assert failure is not None
            status = failure.status if 400 <= failure.status <= 599 else 502
            return Decision(action="error", reject=Reject(status, failure.message, code=failure.code, type="api_error"))
        if decision.action != "none":
            self.rec.action = decision.action
        if decision.conversation_id:
            self.rec.conversation = decision.conversation_id
        return decision

    # ------------------------------------------------------------------ upstream → client

    async def from_upstream(self, text: str) -> None:
        flight = self.inflight[0] if self.inflight else None
        typ = event_type(text)
        terminal = typ in TERMINAL_EVENTS
        if flight is None or flight.tap is None:
            await self._deliver(flight, [text])
        else:
            out = self._through_tap(flight, text, terminal)
            await self._deliver(flight, out)
        if terminal and flight is not None:
            self.inflight.popleft()
            self._remember(flight)

    def _through_tap(self, flight: _InFlight, text: str, terminal: bool) -> list[str]:
        tap = flight.tap
        assert tap is not None
        raw = as_sse(text)
        try:
            emitted = tap.feed_event(raw)
            if terminal:
                emitted = emitted + tap.finish()
        except Exception as exc:  # noqa: BLE001 - a failing tap is disabled, the event passes
            log_gate_failure("tap", exc, self.secret, self.rec)
            flight.tap = None
            return [text]
        if emitted == [raw]:
            return [text]
        flight.altered = True
        return [t for t in (from_sse(e) for e in emitted) if t is not None]

    async def _deliver(self, flight: _InFlight | None, texts: list[str]) -> None:
        for t in texts:
            if flight is not None:
                with contextlib.suppress(ValueError):
                    flight.collector.feed(json.loads(t))
            await self.client.send_str(t)

    def _remember(self, flight: _InFlight) -> None:
        rid = flight.collector.response_id
        if rid is None or flight.create.body is None:
            return  # an error, or a continuation of a history this socket never saw
        synced = not flight.changed and not flight.altered
        self.history.remember(rid, flight.create.input_items + flight.collector.items(), synced)

    def closed(self, reason: str) -> None:
        while self.inflight:
            close_tap(self.inflight.popleft().tap, reason, self.rec, self.secret)


async def relay_responses(request: web.Request, rec: RequestRecord, client: web.WebSocketResponse,
                          up: aiohttp.ClientWebSocketResponse) -> None:
    """Relay one Responses API socket, gated, until either side closes."""
    from proxy.server.websocket import pump_both

    sock = _GatedSocket(request, rec, client, up)
    try:
        await pump_both(client, up, rec, client_text=sock.from_client, upstream_text=sock.from_upstream)
    finally:
        sock.closed("client_disconnected" if client.closed else "upstream_error")
