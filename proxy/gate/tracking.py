"""Tracking as an interceptor: :class:`TrackingInterceptor` forwards every request
untouched and tracks it off the critical path; :class:`TrackingTap` records the reply.

The policy layer (:mod:`proxy.gate.interceptor`) composes :meth:`Tracker.observe` with
its own analysis instead, and records replies with the same tap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.core.responses import Reply, StreamAssembler, reply_from_json
from proxy.server.hooks import Decision, Exchange

if TYPE_CHECKING:
    from proxy.gate.tracker import Observation, Tracker

__all__ = ["TrackingInterceptor", "TrackingTap"]

log = logging.getLogger("proxy.gate.tracker")


class TrackingTap:
    """Records the reply of one request. Never raises, never changes a response:
    ``observe_only`` (the server may feed it a JSON reply right after sending it, see
    :class:`proxy.server.hooks.ResponseTap`). What it is fed is only kept: SSE events
    are passed through unchanged and immediately, and the reply is parsed or reassembled
    from them, and recorded, once the event loop is quiet (:meth:`Tracker.later`)."""

    observe_only = True

    def __init__(self, tracker: Tracker, obs: Observation) -> None:
        self.tracker = tracker
        self.obs = obs
        self._events: list[bytes] = []
        self._done = False

    def _record(self, reply: Callable[[], Reply | None], status: str) -> None:
        if self._done:
            return
        self._done = True
        tracker, obs = self.tracker, self.obs

        def record() -> None:
            try:
                got, got_status = reply(), status
            except Exception:  # a stream that cannot be reassembled: recorded as such
                log.exception("tracker: could not reassemble the reply")
                got, got_status = None, "tap_error"
            tracker.record_reply(obs, got, got_status)

        try:
            tracker.later(record, obs.conversation_id)
        except Exception:  # observing must never break the response
            log.exception("tracker: could not record reply")

    def feed_json(self, status: int, body: bytes) -> bytes:
        api = self.obs.api
        if not 200 <= status < 300:
            self._record(lambda: None, f"http_{status}")
            return body

        def reply() -> Reply | None:
            try:
                return reply_from_json(api, json.loads(body))
            except Exception:  # noqa: BLE001 - not JSON, too deep, ...: no reply to record
                return None

        self._record(reply, "ok")
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        self._events.append(raw_event)
        return [raw_event]

    def _assembled(self) -> Reply | None:
        asm = StreamAssembler(self.obs.api)
        for raw in self._events:
            try:  # noqa: SIM105 - per SSE event: a plain try is cheaper than suppress()
                asm.feed(raw)
            except Exception:  # noqa: BLE001 - a malformed event is skipped, as it streamed
                pass
        self._events = []
        return asm.result()

    def finish(self) -> list[bytes]:
        self._record(self._assembled, "ok")
        return []

    def closed(self, reason: str) -> None:
        def reply() -> Reply | None:
            try:
                return self._assembled()
            except Exception:  # noqa: BLE001 - cut short mid-event: nothing usable
                return None

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
