"""The gate's conversation API (JSON, read-only).

- ``GET /gate/conversations``: every live conversation, most recent first (optional
  ``?tenant=`` filter and ``?limit=``, default 200).
- ``GET /gate/conversations/{id}``: one conversation with its timeline and events.
- ``GET /gate/events``: the most recent events of all conversations (``?limit=``).

Access control is the server's ``/gate/`` middleware. Nothing here exposes a secret:
tenants are key hashes and no request header is stored.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.gate.tracker import Tracker
from proxy.server.errors import gate_error
from proxy.state.protocol import StateUnavailable
from proxy.state.records import COMPACTION_KINDS, ConversationRecord, GateEvent

__all__ = ["TRACKER_KEY", "add_gate_routes", "conversation_json", "event_json"]

TRACKER_KEY: web.AppKey[Tracker] = web.AppKey("compaction_gate.tracker", Tracker)



def event_json(rec: ConversationRecord, e: GateEvent) -> dict[str, Any]:
    d = e.as_dict()
    d["conversation_id"] = rec.id
    return d


def conversation_json(rec: ConversationRecord, *, detail: bool = False) -> dict[str, Any]:
    """The JSON view of one conversation (``detail`` adds timeline and events)."""
    out: dict[str, Any] = {
        "id": rec.id,
        "tenant": rec.tenant,
        "model": rec.model,
        "dialect": rec.dialect,
        "message_count": len(rec.digests),
        "tokens": rec.tokens,
        "window": rec.window,
        "share": rec.share,
        "exact": rec.exact,
        "requests": rec.seq,
        "compactions": sum(1 for t in rec.timeline if t.transition in COMPACTION_KINDS)
        if rec.timeline
        else rec.compactions,
        "side_requests": sum(1 for t in rec.timeline if t.relation == "side_request")
        if rec.timeline
        else rec.side_requests,
        "created": rec.created,
        "last_seen": rec.last_seen,
        "parent_id": rec.parent_id,
        "explicit_source": rec.explicit_source,
        "last_relation": rec.timeline[-1].relation if rec.timeline else rec.last_relation,
        "event_count": len(rec.events) if rec.events else rec.event_seq,
    }
    if detail:
        out["timeline"] = [t.as_dict() for t in rec.timeline]
        out["events"] = [event_json(rec, e) for e in rec.events]
    return out


def _limit(request: web.Request, default: int) -> int:
    try:
        return max(1, min(10_000, int(request.query.get("limit", default))))
    except ValueError:
        # rendered as a JSON error by the app's router_errors middleware
        raise web.HTTPBadRequest(reason="limit must be an integer") from None


async def list_conversations(request: web.Request) -> web.Response:
    tracker = request.app[TRACKER_KEY]
    tenant = request.query.get("tenant")
    limit = _limit(request, 200)
    try:
        count, recs = await tracker.recent(tenant=tenant, limit=limit)
    except StateUnavailable as exc:
        return _unavailable(exc)
    body = {"count": count, "conversations": [conversation_json(r) for r in recs[:limit]]}
    return web.json_response(body)


def _unavailable(exc: StateUnavailable) -> web.Response:
    return gate_error(503, f"the state store is unavailable ({exc.reason})", "state_unavailable")


async def get_conversation(request: web.Request) -> web.Response:
    tracker = request.app[TRACKER_KEY]
    try:
        rec = await tracker.read(request.match_info["id"])
    except StateUnavailable as exc:
        return _unavailable(exc)
    if rec is None:
        return gate_error(404, "unknown conversation", "unknown_conversation")
    return web.json_response(conversation_json(rec, detail=True))


async def list_events(request: web.Request) -> web.Response:
    tracker = request.app[TRACKER_KEY]
    limit = _limit(request, 200)
    if not tracker.shared:
        recs = tracker.conversations()
    else:  # the most recent conversations of every replica, read from the store
        try:
            _, recent = await tracker.recent(limit=limit)
            recs = [r for r in [await tracker.read(x.id) for x in recent] if r is not None]
        except StateUnavailable as exc:
            return _unavailable(exc)
    events = [event_json(r, e) for r in recs for e in r.events]
    events.sort(key=lambda e: e["at"], reverse=True)
    return web.json_response({"count": len(events), "events": events[:limit]})


async def memory(request: web.Request) -> web.Response:
    """What this process's tracker keeps in memory (estimated bytes) and its bound."""
    return web.json_response(request.app[TRACKER_KEY].memory())


def add_gate_routes(app: web.Application, tracker: Tracker, *, events: bool = True) -> None:
    """Register the conversation API on ``app`` and tie the tracker's lifecycle to the
    app (``start`` on startup, ``close`` on cleanup). ``events=False`` leaves
    ``/gate/events`` to another component."""
    app[TRACKER_KEY] = tracker

    async def _ctx(app: web.Application) -> Any:
        await tracker.start()
        yield
        await tracker.close()

    app.cleanup_ctx.append(_ctx)
    app.router.add_get("/gate/conversations", list_conversations)
    app.router.add_get("/gate/conversations/{id}", get_conversation)
    app.router.add_get("/gate/memory", memory)
    if events:
        app.router.add_get("/gate/events", list_events)
