"""The gate's decision log: every decision is one event, listed at ``GET /gate/events``.

Events are JSON-ready dicts with no secrets (tenant is a hash; sensitive values arrive
already redacted from the analysis). With a sole store the log is an in-memory ring
buffer (:class:`EventLog`); with a shared store it is the store's (:class:`StoreEventLog`:
every replica's events, in commit order). Each event is also appended to its
conversation through the tracker (persisted with the conversation).

``GET /gate/events`` query parameters: ``conversation``, ``action``, ``kind``,
``since`` (event id), ``limit`` (default 100, max 1000). Newest last. The route sits
under ``/gate/`` and is protected by the operator access middleware.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..server.errors import gate_error
from ..state.protocol import StateUnavailable

if TYPE_CHECKING:
    from .tracker import Tracker

_log = logging.getLogger("compaction_gate.gate")


class EventLog:
    def __init__(self, maxlen: int = 5000, clock: Callable[[], float] = time.time) -> None:
        self._events: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._seq = 0
        self._clock = clock

    def add(self, kind: str, action: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            ev = {"id": self._seq, "at": self._clock(), "kind": kind, "action": action, **fields}
            self._events.append(ev)
        return ev

    def add_local(self, kind: str, action: str, **fields: Any) -> dict[str, Any]:
        """:meth:`add` for an event that cannot reach a store (the same here)."""
        return self.add(kind, action, **fields)

    async def query(
        self,
        *,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
        since: int = 0,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """:meth:`list` (what ``GET /gate/events`` serves)."""
        return self.list(conversation=conversation, action=action, kind=kind, since=since, limit=limit)

    def list(
        self,
        *,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
        since: int = 0,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self._events)
        out = [
            e
            for e in items
            if e["id"] > since
            and (conversation is None or e.get("conversation") == conversation)
            and (action is None or e.get("action") == action)
            and (kind is None or e.get("kind") == kind)
        ]
        return out[-limit:]

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


class StoreEventLog(EventLog):
    """The event log of a shared store. :meth:`add` hands the event to the tracker,
    which stores it with the conversation's commit (or on its own); :meth:`query` reads
    the store's log — every replica's events. Events recorded while the store is
    unreachable stay in this process's ring (:meth:`add_local`), are what
    :meth:`query` serves while the store is down, and are handed to the store when it is
    back (:meth:`hand_over`)."""

    def __init__(self, tracker: Tracker, maxlen: int = 5000, clock: Callable[[], float] = time.time) -> None:
        super().__init__(maxlen, clock)
        self.tracker = tracker
        recovered = getattr(tracker.store, "recovered", None)
        if isinstance(recovered, list):
            recovered.append(self.hand_over)

    def add(self, kind: str, action: str, **fields: Any) -> dict[str, Any]:
        ev = {"at": self._clock(), "kind": kind, "action": action, **fields}
        self.tracker.log_event(fields.get("conversation"), str(fields.get("tenant") or ""), ev)
        return ev

    def add_local(self, kind: str, action: str, **fields: Any) -> dict[str, Any]:
        return super().add(kind, action, **fields)

    def hand_over(self) -> None:
        """Give the events kept while the store was unreachable to the store."""
        with self._lock:
            kept, self._events = list(self._events), deque(maxlen=self._events.maxlen)
        for ev in kept:
            self.tracker.log_event(None, str(ev.get("tenant") or ""), {k: v for k, v in ev.items() if k != "id"})

    async def query(
        self,
        *,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
        since: int = 0,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        try:
            await self.tracker.flush_writes()
            return await self.tracker.store.log(
                since=since, limit=limit, conversation=conversation, action=action, kind=kind
            )
        except StateUnavailable as exc:
            _log.warning("events: the store is unavailable (%s); serving this process's", exc.reason)
            return self.list(conversation=conversation, action=action, kind=kind, since=since, limit=limit)


EVENT_LOG_KEY: web.AppKey[EventLog] = web.AppKey("compaction_gate.event_log", EventLog)


async def list_events(request: web.Request) -> web.Response:
    log = request.app[EVENT_LOG_KEY]
    q = request.query
    try:
        since = int(q.get("since", "0"))
        limit = max(1, min(1000, int(q.get("limit", "100"))))
    except ValueError:
        return gate_error(400, "since and limit must be integers", "invalid_query")
    events = await log.query(
        conversation=q.get("conversation"), action=q.get("action"), kind=q.get("kind"), since=since, limit=limit
    )
    return web.json_response({"events": events, "count": len(events)}, dumps=_dumps)


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False, default=str)


def add_routes(app: web.Application, log: EventLog) -> None:
    app[EVENT_LOG_KEY] = log
    app.router.add_get("/gate/events", list_events)
