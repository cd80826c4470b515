"""The gate's decision log: every decision is one event, listed at ``GET /gate/events``.

Events are JSON-ready dicts with no secrets (tenant is a hash; sensitive values arrive
already redacted from the analysis). The log is an in-memory ring buffer; each event is
also appended to its conversation through the tracker (persisted with the conversation).

``GET /gate/events`` query parameters: ``conversation``, ``action``, ``kind``,
``since`` (event id), ``limit`` (default 100, max 1000). Newest last. The route sits
under ``/gate/`` and is protected by the operator access middleware.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..server.errors import gate_error


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


EVENT_LOG_KEY: web.AppKey[EventLog] = web.AppKey("compaction_gate.event_log", EventLog)


async def list_events(request: web.Request) -> web.Response:
    log = request.app[EVENT_LOG_KEY]
    q = request.query
    try:
        since = int(q.get("since", "0"))
        limit = max(1, min(1000, int(q.get("limit", "100"))))
    except ValueError:
        return gate_error(400, "since and limit must be integers", "invalid_query")
    events = log.list(
        conversation=q.get("conversation"), action=q.get("action"), kind=q.get("kind"), since=since, limit=limit
    )
    return web.json_response({"events": events, "count": len(events)}, dumps=_dumps)


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, ensure_ascii=False, default=str)


def add_routes(app: web.Application, log: EventLog) -> None:
    app[EVENT_LOG_KEY] = log
    app.router.add_get("/gate/events", list_events)
