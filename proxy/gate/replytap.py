"""The tap that records a tracked request's reply (:class:`TrackingTap`).

It depends on the tracker only through :class:`ReplySink` (``later`` and
``record_reply``), so the tracker can hand out taps without the tap's module importing
the tracker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Protocol

from proxy.core.responses import Reply, StreamAssembler, reply_from_json
from proxy.gate.observation import Observation

__all__ = ["ASSEMBLE_BYTES", "ReplySink", "TrackingTap"]

log = logging.getLogger("proxy.gate.tracker")


class ReplySink(Protocol):
    """Where a :class:`TrackingTap` records the reply (the tracker)."""

    @property
    def shared(self) -> bool: ...

    def later(self, fn: Callable[[], None], conversation_id: str | None = None) -> None: ...

    def record_reply(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None: ...

    async def acknowledge(self, obs: Observation) -> None: ...


#: Stream bytes a :class:`TrackingTap` keeps unparsed: past them the events kept are
#: parsed at once (~1-2 ms of work), so that the reply of a 10 MB stream is not parsed in
#: one piece of ~0.5 s when it ends.
ASSEMBLE_BYTES = 1 << 18


class TrackingTap:
    """Records the reply of one request. Never raises, never changes a response:
    ``observe_only`` (the server may feed it a JSON reply right after sending it, see
    :class:`proxy.server.hooks.ResponseTap`). What it is fed is only kept: SSE events
    are passed through unchanged and immediately, and the reply is parsed or reassembled
    from them, and recorded, once the event loop is quiet (:meth:`Tracker.later`) — a
    long stream's events are parsed as they come, :data:`ASSEMBLE_BYTES` at a time.

    With a shared store the tap ``settles``: the server awaits :meth:`settle` before the
    response ends, and the reply is recorded and committed by then — so the client's
    next request, whichever replica it reaches, sees it. The server then feeds a JSON
    reply before sending it rather than after."""

    observe_only = True

    def __init__(self, tracker: ReplySink, obs: Observation) -> None:
        self.tracker = tracker
        self.obs = obs
        self._events: list[bytes] = []
        self._pending = 0
        self._asm: StreamAssembler | None = None
        self._done = False
        self.settles = tracker.shared

    async def settle(self) -> None:
        await self.tracker.acknowledge(self.obs)

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
        self._pending += len(raw_event)
        if self._pending > ASSEMBLE_BYTES:
            self._assemble()  # a long stream is parsed as it goes, a bounded piece at a time
        return [raw_event]

    def _assemble(self) -> StreamAssembler:
        asm = self._asm = self._asm or StreamAssembler(self.obs.api)
        for raw in self._events:
            try:  # noqa: SIM105 - per SSE event: a plain try is cheaper than suppress()
                asm.feed(raw)
            except Exception:  # noqa: BLE001 - a malformed event is skipped, as it streamed
                pass
        self._events = []
        self._pending = 0
        return asm

    def _assembled(self) -> Reply | None:
        return self._assemble().result()

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
