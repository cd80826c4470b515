"""The tracker's cache of a shared store (:mod:`proxy.gate.replica_sync`), driven the
way the gate drives it — observe, commit or defer, the reply tap, acknowledge — by two
trackers on one shared SQLite file (two replicas in one process). Every request body is
a new list: the normaliser remembers the last one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.gate.budget import messages_bytes, record_bytes
from proxy.gate.observation import Observation
from proxy.gate.tracker import Tracker
from proxy.state.sqlite_shared import SharedSQLiteStore
from tests.gate.conftest import exchange

SYSTEM = {"role": "system", "content": "You are a migration agent."}


def reply(text: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()


async def turn(t: Tracker, msgs: list[dict[str, Any]], answer: str, *, defer: bool = True) -> Observation:
    """One request and its reply through ``t``, as the gate does it for a plain
    continuation (deferred to the reply's commit) or any other request (committed
    before it goes upstream)."""
    obs = await t.observe(exchange({"model": "gpt-4o", "messages": msgs}), defer_accounting=True)
    assert obs is not None
    if not (defer and t.defer_commit(obs.conversation_id)):
        assert await t.commit(obs.conversation_id)
    t.tap(obs).feed_json(200, reply(answer))
    await t.acknowledge(obs)
    return obs


async def test_a_synced_tail_extends_the_hot_history_and_its_memory_account(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    a, b = (Tracker(SharedSQLiteStore(path)) for _ in range(2))
    for t in (a, b):
        await t.start()
    try:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "apply revision 3f9a1c2b7d4e"}]
        first = await turn(a, msgs, "applied 3f9a1c2b7d4e")
        cid = first.conversation_id
        msgs = msgs + [{"role": "assistant", "content": "applied 3f9a1c2b7d4e"}, {"role": "user", "content": "now the upload"}]
        assert (await turn(b, msgs, "upload upl-77f2e9 started")).conversation_id == cid  # hot on b
        msgs = msgs + [{"role": "assistant", "content": "upload upl-77f2e9 started"}, {"role": "user", "content": "status?"}]
        assert (await turn(a, msgs, "upl-77f2e9 at 40%")).conversation_id == cid  # b's cache is behind
        before = len(b._hot.get(cid).snapshot.messages)  # type: ignore[union-attr]
        rec = b._recs[cid]
        await b._sync(rec.tenant, rec.namespace)  # a's turn, with its messages
        hot = b._hot.get(cid)
        assert hot is not None and len(hot.snapshot.messages) == before + 2  # extended, not dropped
        assert b.budget.hot_of(cid) == messages_bytes(hot.snapshot.messages)
        assert b.budget.records_total == sum(record_bytes(r) for r in b._recs.values())
    finally:
        for t in (a, b):
            await t.close()

