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

from proxy.gate import writes
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


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_token_counts_of_a_shared_store_are_made_after_the_response_and_match_a_sole_store(
    tmp_path: Path, backend: str
) -> None:
    """With a shared store the commit a response waits for (``acknowledge``) carries
    neither the request's nor its reply's token counts: they follow, counted when the
    loop is quiet or anything reads the conversation, and reach the store (another
    replica reads them). They are the counts a sole store makes, request after request."""
    server = RedisServer(tmp_path / "redis").start() if backend == "redis" else None
    path = tmp_path / "shared.sqlite3"

    def store() -> Any:
        return RedisStore(server.url) if server is not None else SharedSQLiteStore(path)

    a, b, sole = Tracker(store()), Tracker(store()), Tracker()
    for t in (a, b, sole):
        await t.start()
    held = HeldCommits(a.store)
    try:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "apply revision 3f9a1c2b7d4e"}]
        answers = ["applied 3f9a1c2b7d4e", "upload upl-77f2e9 started", "upl-77f2e9 at 40%", "done"]
        asks = ["now the upload", "status?", "and now?"]
        for i, answer in enumerate(answers):
            obs = await turn(a, [dict(m) for m in msgs], answer)
            # what the response waited for: the commit of the reply, without the counts
            acked = [d for c in held.commits for d in c.timeline if d["seq"] == obs.seq and d.get("reply_messages")]
            assert acked and all(d["tokens"] == 0 and d.get("reply_tokens") is None for d in acked), acked
            ref = await turn(sole, [dict(m) for m in msgs], answer)
            got = a.get(obs.conversation_id)  # a reader: the counts are made
            want = sole.get(ref.conversation_id)
            assert got is not None and want is not None
            assert [(e.tokens, e.reply_tokens) for e in got.timeline] == [(e.tokens, e.reply_tokens) for e in want.timeline]
            assert got.tokens == want.tokens > 0
            await a.flush_writes()
            stored = await b.store.read_conversation(obs.conversation_id)
            assert stored is not None
            assert [(e.tokens, e.reply_tokens) for e in stored.timeline] == [(e.tokens, e.reply_tokens) for e in want.timeline]
            assert stored.tokens == want.tokens
            if i < len(asks):
                msgs = msgs + [{"role": "assistant", "content": answer}, {"role": "user", "content": asks[i]}]
    finally:
        for t in (a, b, sole):
            await t.close()
        if server is not None:
            server.stop()


async def test_counts_made_after_a_response_go_with_the_next_commit_or_alone_after_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts a response left behind (:meth:`Replica.owe`) are written with the
    conversation's next commit — no write of their own while the conversation goes on;
    a transaction given up owes them again; once the conversation is quiet for
    ``OWED_SECONDS`` they are sent as a side write (another replica reads them)."""
    monkeypatch.setattr(writes, "OWED_SECONDS", 0.2)
    path = tmp_path / "shared.sqlite3"
    a, b = Tracker(SharedSQLiteStore(path)), Tracker(SharedSQLiteStore(path))
    for t in (a, b):
        await t.start()
    held = HeldCommits(a.store)
    sides: list[Any] = []
    real_side = a.store.side

    async def side(ws: Any) -> None:
        sides.extend(ws)
        await real_side(ws)

    a.store.side = side  # type: ignore[method-assign]
    try:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "apply revision 3f9a1c2b7d4e"}]
        first = await turn(a, [dict(m) for m in msgs], "applied 3f9a1c2b7d4e")
        cid = first.conversation_id
        for _ in range(5):
            await asyncio.sleep(0.01)  # the loop is quiet: the counts are made, and owed
        assert a._replica is not None and a._replica.owing(cid)
        msgs = msgs + [{"role": "assistant", "content": "applied 3f9a1c2b7d4e"}, {"role": "user", "content": "now the upload"}]
        n = len(held.commits)
        second = await turn(a, [dict(m) for m in msgs], "upload upl-77f2e9 started")
        carried = {d["seq"]: d for c in held.commits[n:] for d in c.timeline}
        assert carried[first.seq]["tokens"] > 0 and carried[first.seq]["reply_tokens"] > 0  # with the next commit
        assert any(c.stats is not None and c.stats.seq == second.seq for c in held.commits[n:])
        assert sides == []  # nothing written on its own
        # a transaction given up: what it carried is owed again
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert a._replica.owing(cid)
        msgs = msgs + [{"role": "assistant", "content": "upload upl-77f2e9 started"}, {"role": "user", "content": "status?"}]
        third = await a.observe(exchange({"model": "gpt-4o", "messages": [dict(m) for m in msgs]}), defer_accounting=True)
        assert third is not None and third.conversation_id == cid and not a._replica.owing(cid)  # in its transaction
        a.abandon(cid)
        assert a._replica.owing(cid)
        await asyncio.sleep(0.5)  # quiet past OWED_SECONDS: sent alone
        assert not a._replica.owing(cid)
        assert any(w.conversation_id == cid and {e["seq"] for e in w.timeline} == {second.seq} for w in sides), sides
        await a._replica.flush()
        stored = await b.store.read_conversation(cid)
        assert stored is not None
        entry = next(e for e in stored.timeline if e.seq == second.seq)
        assert entry.tokens > 0 and entry.reply_tokens is not None and entry.reply_tokens > 0
    finally:
        for t in (a, b):
            await t.close()
