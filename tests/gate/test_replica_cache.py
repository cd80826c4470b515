"""The tracker's cache of a shared store (:mod:`proxy.gate.replica_sync`), driven the
way the gate drives it — observe, commit or defer, the reply tap, acknowledge — by two
trackers on one shared SQLite file (two replicas in one process). Every request body is
a new list: the normaliser remembers the last one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.gate.budget import messages_bytes, record_bytes
from proxy.gate.observation import Observation
from proxy.gate.tracker import Tracker
from proxy.state.protocol import Commit, Committed
from proxy.state.redis import RedisStore
from proxy.state.sqlite_shared import SharedSQLiteStore
from tests.gate.conftest import exchange
from tests.support.redis_server import RedisServer

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



async def test_a_sync_leaves_out_what_the_cache_holds_already(tmp_path: Path) -> None:
    """A change a sync would answer with that the cache holds already — another
    replica's change an earlier sync brought (two syncs made from one cursor, as
    pipelined syncs are), this replica's own commit — the store leaves out (nothing of
    it read, sent or parsed: it is a no-op to adopt); once the cache is dropped (the
    store came back) it is sent again."""
    path = tmp_path / "shared.sqlite3"
    a, b = (Tracker(SharedSQLiteStore(path)) for _ in range(2))
    for t in (a, b):
        await t.start()
    answers: list[Any] = []
    real = a.store.sync

    async def sync(*args: Any, **kw: Any) -> Any:
        answers.append(got := await real(*args, **kw))
        return got

    a.store.sync = sync  # type: ignore[method-assign]
    try:
        obs = await turn(b, [SYSTEM, {"role": "user", "content": "rotate key kid-5e1f"}], "rotated kid-5e1f")
        cid, rec = obs.conversation_id, b._recs[obs.conversation_id]
        rep = a._replica
        assert rep is not None
        await a._sync(rec.tenant, rec.namespace)
        assert [ch.record.id for ch in answers[-1].changed] == [cid]
        assert a._recs[cid].etag == rec.etag
        rep.cursors[rec.namespace] = 0  # another sync made from the same cursor
        await a._sync(rec.tenant, rec.namespace)
        assert answers[-1].changed == ()
        a._reset_cache()
        await a._sync(rec.tenant, rec.namespace)
        assert [ch.record.id for ch in answers[-1].changed] == [cid]
        assert a._recs[cid].etag == rec.etag
    finally:
        for t in (a, b):
            await t.close()


class HeldCommits:
    """Wraps a store's ``commit``: once ``hold`` is set, the next commit waits for
    ``release`` after it has started (``started`` is set), then goes on."""

    def __init__(self, store: Any) -> None:
        self.real = store.commit
        self.hold = False
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.commits: list[Commit] = []
        store.commit = self.commit

    async def commit(self, change: Commit) -> Committed:
        self.commits.append(change)
        if self.hold:
            self.hold = False
            self.started.set()
            await self.release.wait()
        return await self.real(change)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_reply_that_arrives_while_its_request_is_committed_early_is_committed_before_its_response_ends(
    tmp_path: Path, backend: str
) -> None:
    """Request 1 of a conversation is deferred (a plain continuation); request 2 of the
    same conversation comes before request 1's reply, so request 1 is committed early;
    request 1's reply arrives while that commit is under way. The reply waits for it,
    is committed on its own, and ``acknowledge`` (the end of request 1's response)
    returns only once another replica can read it; request 2 goes on on top of both."""
    server = RedisServer(tmp_path / "redis").start() if backend == "redis" else None
    path = tmp_path / "shared.sqlite3"

    def store() -> Any:
        return RedisStore(server.url) if server is not None else SharedSQLiteStore(path)

    a, b = Tracker(store()), Tracker(store())
    for t in (a, b):
        await t.start()
    held = HeldCommits(a.store)
    try:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "apply revision 3f9a1c2b7d4e"}]
        cid = (await turn(a, msgs, "applied 3f9a1c2b7d4e")).conversation_id
        msgs = msgs + [{"role": "assistant", "content": "applied 3f9a1c2b7d4e"}, {"role": "user", "content": "now upload"}]
        first = await a.observe(exchange({"model": "gpt-4o", "messages": msgs}), defer_accounting=True)
        assert first is not None and first.conversation_id == cid
        assert a.defer_commit(cid)  # request 1 goes upstream uncommitted
        held.hold = True
        second_body = {"model": "gpt-4o", "messages": msgs + [{"role": "user", "content": "and lock lk-5e1d0c"}]}
        second = asyncio.create_task(a.observe(exchange(second_body), defer_accounting=True))
        await asyncio.wait_for(held.started.wait(), 10)  # request 1's early commit is under way
        early = held.commits[-1]
        assert early.expect is not None and len(early.append) == 1  # request 1: its new user message
        a.tap(first).feed_json(200, reply("upload upl-77f2e9 started"))  # request 1's reply, now
        ack = asyncio.create_task(a.acknowledge(first))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not ack.done()  # the response does not end while its reply is uncommitted
        held.release.set()
        obs2 = await asyncio.wait_for(second, 10)
        assert obs2 is not None and obs2.conversation_id == cid and obs2.relation == "extend"
        # as the gate does: request 2 goes upstream uncommitted when it only extends what
        # is committed (request 1's reply was recorded into it); when request 1's reply
        # was committed first, request 2 (which does not carry it) cuts it off: now
        if not a.defer_commit(cid):
            assert await a.commit(cid)
        await asyncio.wait_for(ack, 10)
        # what request 1's client was answered is in the store: another replica reads it
        stored = await b.store.read_conversation(cid)
        assert stored is not None
        entry = next(e for e in stored.timeline if e.seq == first.seq)
        assert (entry.status, entry.reply_messages) == ("ok", 1), entry
        assert await a.commit(cid)  # request 2, if deferred (its reply would be committed with it)
        final = await b.store.read_conversation(cid)
        assert final is not None
        assert [e.seq for e in final.timeline] == [1, first.seq, obs2.seq]
        assert next(e for e in final.timeline if e.seq == first.seq).status == "ok"  # not lost by request 2
        assert len(final.digests) == len(second_body["messages"]) - 1  # request 2's history (no system)
    finally:
        for t in (a, b):
            await t.close()
        if server is not None:
            server.stop()
