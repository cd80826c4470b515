"""GET /gate/conversations and /gate/conversations/{id}."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from proxy.gate.api import add_gate_routes
from proxy.gate.tracker import Tracker
from proxy.state import MemoryStore
from tests.gate.conftest import exchange


async def test_conversations_json() -> None:
    tracker = Tracker(MemoryStore())
    app = web.Application()
    add_gate_routes(app, tracker)
    async with TestClient(TestServer(app)) as client:
        await tracker.warm(["gpt-4o"])
        body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "system", "content": "S"},
                                                               {"role": "user", "content": "deploy abc"}]}
        obs = await tracker.observe(exchange(body, tenant="t-hash-1", headers={"authorization": "Bearer sk-secret"}))
        assert obs is not None
        tracker.add_event(obs.conversation_id, "compaction", action="warn", details={"verdict": "destructive"},
                          request_seq=obs.seq)
        r = await client.get("/gate/conversations")
        assert r.status == 200
        data = await r.json()
        assert data["count"] == 1
        [c] = data["conversations"]
        assert c["id"] == obs.conversation_id and c["tenant"] == "t-hash-1" and c["model"] == "gpt-4o"
        assert c["message_count"] == 1 and c["tokens"] == obs.tokens and c["window"] == 128000
        assert c["share"] == obs.share and c["requests"] == 1

        r = await client.get(f"/gate/conversations/{obs.conversation_id}")
        detail = await r.json()
        [t] = detail["timeline"]
        assert t["seq"] == 1 and t["tokens"] == obs.tokens and t["relation"] == "new" and t["share"] == obs.share
        [e] = detail["events"]
        assert e["kind"] == "compaction" and e["conversation_id"] == obs.conversation_id
        assert "sk-secret" not in await r.text()

        assert (await client.get("/gate/conversations/nope")).status == 404
        assert (await client.get("/gate/conversations?tenant=other")).status == 200
        assert (await (await client.get("/gate/conversations?tenant=other")).json())["count"] == 0
        assert (await client.get("/gate/conversations?limit=x")).status == 400
        ev = await (await client.get("/gate/events")).json()
        assert ev["count"] == 1
