"""Tracking as an interceptor: :class:`TrackingInterceptor` forwards every request
untouched and tracks it off the critical path; :class:`TrackingTap` records the reply.

The policy layer (:mod:`proxy.gate.interceptor`) composes :meth:`Tracker.observe` with
its own analysis instead, and records replies with the same tap.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from proxy.core.responses import Reply, StreamAssembler, reply_from_json
from proxy.server.hooks import Decision, Exchange

if TYPE_CHECKING:
    from proxy.gate.tracker import Observation, Tracker

__all__ = ["TrackingInterceptor", "TrackingTap"]

log = logging.getLogger("proxy.gate.tracker")


class TrackingTap:
    """Records the reply of one request. Events are passed through unchanged and
    immediately; reassembly is a cheap parse per event. Never raises, never changes a
    response: ``observe_only`` (the server may record a JSON reply right after sending
    it, see :class:`proxy.server.hooks.ResponseTap`). The reassembled reply is recorded
    when the event loop is quiet (:meth:`Tracker.record_reply_soon`)."""

    observe_only = True

    def __init__(self, tracker: Tracker, obs: Observation) -> None:
        self.tracker = tracker
        self.obs = obs
        self._asm = StreamAssembler(obs.api)
        self._done = False

    def _record(self, reply: Reply | None, status: str) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.tracker.record_reply_soon(self.obs, reply, status)
        except Exception:  # observing must never break the response
            log.exception("tracker: could not record reply")

    def feed_json(self, status: int, body: bytes) -> bytes:
        reply: Reply | None = None
        if 200 <= status < 300:
            try:
                reply = reply_from_json(self.obs.api, json.loads(body))
            except Exception:  # noqa: BLE001 - not JSON, too deep, ...: no reply to record
                reply = None
        self._record(reply, "ok" if 200 <= status < 300 else f"http_{status}")
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        try:  # noqa: SIM105 - per SSE event: a plain try is cheaper than suppress()
            self._asm.feed(raw_event)
        except Exception:  # noqa: BLE001 - observing must never break the stream
            pass
        return [raw_event]

    def finish(self) -> list[bytes]:
        self._record(self._asm.result(), "ok")
        return []

    def closed(self, reason: str) -> None:
        try:
            reply = self._asm.result()
        except Exception:
            reply = None
        self._record(reply, reason)


class TrackingInterceptor:
    """An :class:`~proxy.server.hooks.Interceptor` that only tracks: every request is
    forwarded untouched. Tracking never delays a request: it is deferred
    (``Decision.after_send``) until the request is on its way upstream, and completes
    the response with the resolved conversation id and a reply-recording tap."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    async def before(self, ex: Exchange) -> Decision:
        if not self.tracker.tracks(ex):
            return Decision()

        async def track() -> Decision:
            obs = await self.tracker.observe(ex, defer_accounting=True)
            if obs is None:
                return Decision()
            return Decision(conversation_id=obs.conversation_id, tap=self.tracker.tap(obs))

        return Decision(after_send=track)
