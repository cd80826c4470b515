"""The shared-store protocol (:mod:`proxy.state.protocol`), the same for Redis (a real
``redis-server``) and SQLite shared by several workers: versioned compare-and-set
commits never lose an update, syncs send only what changed, side writes never
resurrect, everything is capped, scoped and redacted at rest."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.messages import Message, Part, make_message
from proxy.state.protocol import Commit, SideWrite, StateUnavailable, Stats
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry
from proxy.state.redis import RedisStore
from proxy.state.redis_scripts import SPLICE_LOG
from proxy.state.sqlite_shared import SharedSQLiteStore
from proxy.state.store import Store
from tests.state.test_at_rest_redaction import HANDLE, SECRETS
from tests.support.redis_server import RedisServer, free_port, require_redis


def msg(text: str) -> Message:
    return make_message("user", (Part("text", text),))


@dataclass
class Pair:
    """Two processes' stores on the same shared state; ``make(**kw)`` another one."""

    a: Store
    b: Store
    make: Callable[..., Store]
    kind: str
    raw: Callable[[], Any]


@pytest.fixture(params=["redis", "sqlite"])
async def pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pair]:
    made: list[Store] = []
    server: RedisServer | None = None
    if request.param == "redis":
        require_redis()
        server = RedisServer(tmp_path / "redis").start()
        url = server.url

        def make(**kw: Any) -> Store:
            s = RedisStore(url, **kw)
            made.append(s)
            return s

        def raw() -> Any:
            import redis

            return redis.Redis.from_url(url)
    else:
        path = tmp_path / "state.sqlite3"

        def make(**kw: Any) -> Store:
            kw.pop("ttl_seconds", None)
            s = SharedSQLiteStore(path, **kw)
            made.append(s)
            return s

        def raw() -> Any:
            return path

    a, b = make(), make()
    for s in (a, b):
        await s.open()
    try:
        yield Pair(a, b, make, str(request.param), raw)
    finally:
        for s in made:
            await s.close()
        if server is not None:
            server.stop()


def rec(cid: str, digests: tuple[str, ...], *, tenant: str = "t1", ns: str = "t1", seq: int = 1) -> ConversationRecord:
    return ConversationRecord(
        id=cid, tenant=tenant, namespace=ns, created=1.0, last_seen=float(seq), digests=digests, request_len=len(digests), seq=seq
    )


def commit(r: ConversationRecord, expect: str | None, *, keep: int = 0, msgs: tuple[Message, ...] = (), **kw: Any) -> Commit:
    return Commit(
        r.id, r.tenant, r.namespace, expect, "e" + secrets.token_hex(4), r.meta_dict(), r.last_seen, keep,
        r.digests[keep:], msgs, **kw,
    )  # fmt: skip


async def test_create_exists_conflict(pair: Pair) -> None:
    m = [msg(f"m{i}") for i in range(3)]
    r = rec("c1", tuple(x.digest for x in m))
    first = commit(r, None, msgs=tuple(m))
    assert (await pair.a.commit(first)).ok
    assert (await pair.b.commit(commit(r, None))).reason == "exists"  # another process, the same id
    stale = commit(r, "not-the-etag", keep=3)
    assert (await pair.b.commit(stale)).reason == "conflict"
    assert (await pair.b.commit(commit(r, first.etag, keep=4))).reason == "conflict"  # keeps more than stored
    ok = await pair.b.commit(commit(r, first.etag, keep=3))
    assert ok.ok and ok.ver == ok.ver_before + 1
    assert (await pair.a.commit(commit(r, first.etag, keep=3))).reason == "conflict"  # the update it would lose


async def test_sync_sends_only_the_changed_tail_with_its_messages(pair: Pair) -> None:
    m = [msg(f"message {i}") for i in range(12)]
    d = tuple(x.digest for x in m)
    c1 = commit(rec("c1", d[:5]), None, msgs=tuple(m[:5]))
    await pair.a.commit(c1)
    s0 = await pair.b.sync("t1", "t1", 0)
    [ch] = s0.changed
    assert (ch.record.id, ch.record.etag, ch.keep, ch.tail) == ("c1", c1.etag, 0, d[:5])
    assert ch.messages is not None and [ch.messages[x].text for x in d[:5]] == [f"message {i}" for i in range(5)]
    c2 = commit(rec("c1", d[:7], seq=2), c1.etag, keep=5, msgs=tuple(m[5:7]))
    await pair.a.commit(c2)
    [ch] = (await pair.b.sync("t1", "t1", s0.cursor)).changed
    assert (ch.keep, ch.tail, ch.record.etag, ch.record.seq) == (5, d[5:7], c2.etag, 2)
    assert ch.messages is not None and set(ch.messages) == set(d[5:7])
    # a compaction: keep 2, then new messages; the caller that knew c2 keeps 2
    s1 = await pair.b.sync("t1", "t1", 0)
    c3 = commit(rec("c1", d[:2] + d[9:12], seq=3), c2.etag, keep=2, msgs=tuple(m[9:12]))
    await pair.a.commit(c3)
    [ch] = (await pair.b.sync("t1", "t1", s1.cursor)).changed
    assert (ch.keep, ch.tail) == (2, d[9:12])
    # several splices since the cursor: the smallest kept prefix holds
    c4 = commit(rec("c1", d[:2] + d[9:12] + d[5:6], seq=4), c3.etag, keep=5, msgs=(m[5],))
    await pair.a.commit(c4)
    [ch] = (await pair.b.sync("t1", "t1", s1.cursor)).changed
    assert (ch.keep, ch.tail) == (2, d[9:12] + d[5:6])
    # nothing changed since: nothing sent
    now = await pair.b.sync("t1", "t1", 0)
    assert (await pair.b.sync("t1", "t1", now.cursor)).changed == ()
    # in full on request
    [full] = (await pair.b.sync("t1", "t1", now.cursor, reload=["c1"])).changed
    assert (full.keep, full.tail) == (0, d[:2] + d[9:12] + d[5:6])


async def test_sync_leaves_out_what_the_caller_says_it_holds(pair: Pair) -> None:
    """``known``: the caller's own commits since its cursor are not sent back while the
    store still holds the etag it knows; a later commit by another process, a stale
    etag, or a reload in full are sent as usual."""
    m = [msg(f"k{i}") for i in range(4)]
    d = tuple(x.digest for x in m)
    c1 = commit(rec("c1", d[:1]), None, msgs=(m[0],))
    c2 = commit(rec("c2", d[1:2]), None, msgs=(m[1],))
    assert (await pair.a.commit(c1)).ok and (await pair.b.commit(c2)).ok
    got = await pair.a.sync("t1", "t1", 0, known={"c1": c1.etag})
    assert [ch.record.id for ch in got.changed] == ["c2"]
    got = await pair.a.sync("t1", "t1", 0, known={"c1": "stale", "c2": c2.etag})
    assert [ch.record.id for ch in got.changed] == ["c1"]
    c1b = commit(rec("c1", d[:2], seq=2), c1.etag, keep=1, msgs=(m[1],))
    assert (await pair.b.commit(c1b)).ok  # another process moved c1 on
    got = await pair.a.sync("t1", "t1", 0, known={"c1": c1.etag, "c2": c2.etag})
    assert [(ch.record.id, ch.record.etag) for ch in got.changed] == [("c1", c1b.etag)]
    [full] = (await pair.a.sync("t1", "t1", got.cursor, reload=["c2"], known={"c2": c2.etag})).changed
    assert (full.record.id, full.keep, full.tail) == ("c2", 0, d[1:2])


async def test_a_cursor_older_than_the_splice_log_gets_the_whole_history(pair: Pair) -> None:
    m = [msg(f"n{i}") for i in range(SPLICE_LOG + 4)]
    d = tuple(x.digest for x in m)
    c = commit(rec("c1", d[:1]), None, msgs=(m[0],))
    await pair.a.commit(c)
    old = await pair.b.sync("t1", "t1", 0)
    for n in range(2, len(d) + 1):
        nxt = commit(rec("c1", d[:n], seq=n), c.etag, keep=n - 1, msgs=(m[n - 1],))
        assert (await pair.a.commit(nxt)).ok
        c = nxt
    [ch] = (await pair.b.sync("t1", "t1", old.cursor)).changed
    assert (ch.keep, ch.tail) == (0, d)  # the log no longer reaches back to the cursor


async def test_a_large_namespace_comes_in_pages_and_namespaces_stay_apart(pair: Pair) -> None:
    n = 450
    for i in range(n):
        r = rec(f"c{i}", (msg(f"x{i}").digest,))
        await pair.a.commit(commit(r, None))
    await pair.a.commit(commit(rec("other", (msg("y").digest,), ns="t1|session-9"), None))
    await pair.a.commit(commit(rec("else", (msg("z").digest,), tenant="t2", ns="t2"), None))
    got = await pair.b.sync("t1", "t1", 0, bodies=0)
    assert sorted(ch.record.id for ch in got.changed) == sorted(f"c{i}" for i in range(n))
    assert all(ch.messages is None and len(ch.tail) == 1 for ch in got.changed)  # bodies=0: digests only
    assert [ch.record.id for ch in (await pair.b.sync("t1", "t1|session-9", 0)).changed] == ["other"]
    assert [ch.record.id for ch in (await pair.b.sync("t2", "t2", 0)).changed] == ["else"]


async def test_side_writes_events_stats_log_and_never_resurrect(pair: Pair) -> None:
    r = rec("c1", (msg("a").digest,), seq=3)
    entry = TimelineEntry(3, 1.0, "new", "new", 1, 1, 0, 0, None, None, False, "gpt-4o", False)
    c = commit(r, None, timeline=(entry.as_dict(),), events=(GateEvent(0, 1.0, "compaction", "reinject"),),
               log=({"at": 1.0, "kind": "compaction", "action": "reinject", "conversation": "c1"},))  # fmt: skip
    await pair.a.commit(c)
    entry.status, entry.usage = "ok", {"input_tokens": 10}
    await pair.b.side([
        SideWrite("c1", "t1", timeline=(entry.as_dict(),), events=(GateEvent(0, 2.0, "tripwire", "warn"),),
                  stats=Stats(3, 120, 1000, True),
                  log=({"at": 2.0, "kind": "tripwire", "action": "warn", "conversation": "c1"},)),
        SideWrite("c1", "t1", stats=Stats(2, 5, 1000, True)),  # older than what is stored: ignored
        SideWrite("gone", "t1", events=(GateEvent(0, 3.0, "x"),), log=({"at": 3.0, "kind": "orphan", "action": "none"},)),
        SideWrite(None, "t1", log=({"at": 4.0, "kind": "state_recovered", "action": "none"},)),
    ])  # fmt: skip
    got = await pair.a.read_conversation("c1")
    assert got is not None
    assert [(e.seq, e.kind) for e in got.events] == [(1, "compaction"), (2, "tripwire")]
    assert got.tokens == 120 and [t.status for t in got.timeline] == ["ok"]
    assert got.timeline[0].usage == {"input_tokens": 10}
    assert await pair.a.read_conversation("gone") is None  # not resurrected by its side write
    log = await pair.b.log()
    assert [e["kind"] for e in log] == ["compaction", "tripwire", "orphan", "state_recovered"]
    assert [e["id"] for e in log] == sorted(e["id"] for e in log)
    assert [e["kind"] for e in await pair.b.log(conversation="c1", kind="tripwire")] == ["tripwire"]
    assert [e["kind"] for e in await pair.b.log(since=log[1]["id"])] == ["orphan", "state_recovered"]
    count, recent = await pair.b.recent_conversations(tenant="t1")
    assert count == 1 and [x.id for x in recent] == ["c1"] and recent[0].event_seq == 2


async def test_timelines_events_and_the_log_are_capped(pair: Pair) -> None:
    small = pair.make(max_timeline=3, max_events=2, max_log=4)
    await small.open()
    r = rec("c1", (msg("a").digest,))
    c = commit(r, None)
    await small.commit(c)
    for seq in range(1, 8):
        e = TimelineEntry(seq, float(seq), "extend", "append", 1, 0, 0, 0, None, None, False, None, False)
        await small.side([SideWrite("c1", "t1", timeline=(e.as_dict(),), events=(GateEvent(0, 1.0, f"k{seq}"),),
                                    log=({"at": 1.0, "kind": f"k{seq}", "action": "none"},))])  # fmt: skip
    got = await small.read_conversation("c1")
    assert got is not None
    assert [t.seq for t in got.timeline] == [5, 6, 7]
    assert [e.kind for e in got.events] == ["k6", "k7"]
    assert [e["kind"] for e in await small.log()] == ["k4", "k5", "k6", "k7"]


async def _writer(store: Store, cid: str, mine: list[str], jitter: list[float]) -> int:
    """Append each of ``mine`` with compare-and-set, re-reading and retrying when the
    commit is refused; returns how many were."""
    refused = 0
    for k, digest in enumerate(mine):
        while True:
            cur = await store.read_conversation(cid)
            assert cur is not None
            await asyncio.sleep(jitter[(k + refused) % len(jitter)])
            r = rec(cid, cur.digests + (digest,), seq=cur.seq + 1)
            if (await store.commit(commit(r, cur.etag, keep=len(cur.digests)))).ok:
                break
            refused += 1
    return refused


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    writers=st.integers(2, 5),
    appends=st.integers(1, 4),
    jitter=st.lists(st.sampled_from([0.0, 0.0, 0.001, 0.003]), min_size=1, max_size=5),
)
def test_concurrent_writers_on_two_processes_never_lose_an_update(
    tmp_path_factory: pytest.TempPathFactory, writers: int, appends: int, jitter: list[float]
) -> None:
    """Writers on two store clients append to one conversation at once; every append
    they were told succeeded is in the history, exactly once, in commit order."""
    require_redis()
    base = tmp_path_factory.mktemp("cas")
    with RedisServer(base / "redis") as server:

        async def main(make: Callable[[], Store]) -> None:
            a, b = make(), make()
            await a.open()
            await b.open()
            try:
                cid = "c-" + secrets.token_hex(4)
                await a.commit(commit(rec(cid, ()), None))
                planned = [[f"w{w}-{k}" for k in range(appends)] for w in range(writers)]
                await asyncio.gather(*[_writer(a if w % 2 else b, cid, planned[w], jitter) for w in range(writers)])
                final = await a.read_conversation(cid)
                assert final is not None
                assert sorted(final.digests) == sorted(d for p in planned for d in p)
                for p in planned:  # each writer's appends in its own order
                    assert [d for d in final.digests if d in p] == p
                assert final.seq == 1 + writers * appends  # every commit built on the one before
            finally:
                await a.close()
                await b.close()

        asyncio.run(main(lambda: RedisStore(server.url)))
        path = base / f"s-{secrets.token_hex(3)}.sqlite3"
        asyncio.run(main(lambda: SharedSQLiteStore(path)))


async def test_nothing_secret_is_stored(pair: Pair) -> None:
    text = "deploy with GH_TOKEN=" + SECRETS[0] + " and OPENAI_API_KEY=" + SECRETS[1] + f"; lock {HANDLE} held"
    m = make_message("tool", (Part("tool_result", text, tool_call_id="c1"), Part("tool_call", f'{{"key": "{SECRETS[2]}"}}', "bash", "c2")))
    r = rec("c1", (m.digest,))
    r.gate_state = {"lost": [{"value": "[redacted]", "note": "token " + SECRETS[3]}]}
    c = commit(r, None, msgs=(m,), blobs=(("sys", "system prompt with " + SECRETS[3]),),
               events=(GateEvent(0, 1.0, "compaction", details={"note": "saw " + SECRETS[0]}),),
               log=({"at": 1.0, "kind": "compaction", "action": "none", "note": SECRETS[1]},))  # fmt: skip
    await pair.a.commit(c)
    await pair.a.side([SideWrite("c1", "t1", events=(GateEvent(0, 2.0, "tripwire", details={"x": SECRETS[2]}),))])
    raw = pair.raw()
    if pair.kind == "redis":
        blob = b"".join(_redis_dump(raw))
    else:
        await pair.a.close()
        await pair.b.close()
        blob = b"".join(p.read_bytes() for p in raw.parent.glob(raw.name + "*"))
    for s in SECRETS:
        assert s.encode() not in blob
    assert HANDLE.encode() in blob  # a capability handle is a binding, kept


def _redis_dump(client: Any) -> list[bytes]:
    out = []
    for key in client.scan_iter("*"):
        out.append(key)
        kind = client.type(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            for k, v in client.hgetall(key).items():
                out += [k, v]
        elif kind == b"list":
            out += client.lrange(key, 0, -1)
        elif kind == b"zset":
            out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
    return out


async def test_redis_keys_are_scoped_by_tenant_and_expire_with_the_conversation(tmp_path: Path) -> None:
    import redis

    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.url, prefix="gate-x", ttl_seconds=600)
        await store.open()
        try:
            for tenant in ("aaaa1111", "bbbb2222"):
                m = msg("hello " + tenant)
                await store.commit(commit(rec("c-" + tenant, (m.digest,), tenant=tenant, ns=tenant), None, msgs=(m,),
                                          timeline=(TimelineEntry(1, 1.0, "new", "new", 1, 1, 0, 0, None, None, False, None, False).as_dict(),),
                                          events=(GateEvent(0, 1.0, "k"),)))  # fmt: skip
            client = redis.Redis.from_url(server.url)
            keys = [k.decode() for k in client.scan_iter("*")]
            assert all(k.startswith("gate-x:") for k in keys)
            scoped = [k for k in keys if k.startswith("gate-x:t:")]
            for tenant in ("aaaa1111", "bbbb2222"):
                own = [k for k in scoped if k.startswith(f"gate-x:t:{tenant}:")]
                assert len(own) >= 7  # namespace zset + version, record, history, messages, timeline, events, tenant index
                for k in own:
                    if not k.endswith(":convs"):
                        assert 0 < client.pttl(k) <= 600_000, k
            assert set(scoped) == {k for t in ("aaaa1111", "bbbb2222") for k in scoped if k.startswith(f"gate-x:t:{t}:")}
            # the sweep forgets what expired from the store-wide indexes too
            assert await store.sweep(1e12, 600, 10_000) == 2
            assert (await store.recent_conversations())[0] == 0
            assert not [k for k in client.scan_iter("gate-x:t:*:c:*")]
        finally:
            await store.close()


async def test_redis_down_fails_fast_and_says_nothing_of_the_password(tmp_path: Path) -> None:
    require_redis()
    port = free_port()
    store = RedisStore(f"redis://:hunter2-very-secret@127.0.0.1:{port}/0", timeout=0.5)
    assert "hunter2" not in store.describe and f"127.0.0.1:{port}" in store.describe
    lost: list[StateUnavailable] = []
    recovered: list[int] = []
    store.lost.append(lost.append)
    store.recovered.append(lambda: recovered.append(1))
    await store.open()  # a Redis that is down does not stop the start
    with pytest.raises(StateUnavailable) as first:
        await store.sync("t", "t", 0)
    assert "hunter2" not in str(first.value) and first.value.reason == "unreachable"
    with pytest.raises(StateUnavailable) as second:  # within the backoff: refused without trying
        await store.sync("t", "t", 0)
    assert str(second.value).endswith("; retrying") and second.value.reason == "unreachable"
    assert "hunter2" not in str(second.value)
    assert len(lost) == 1
    server = RedisServer(tmp_path / "redis", password="hunter2-very-secret", port=port).start()
    try:
        for _ in range(100):  # reconnects by itself once the backoff has passed
            try:
                await store.sync("t", "t", 0)
                break
            except StateUnavailable:
                await asyncio.sleep(0.05)
        assert store.available and recovered == [1]
    finally:
        await store.close()
        server.stop()


async def test_sqlite_writers_queue_on_the_lock_file_and_give_up_like_a_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit waits while another process holds the writers' lock, goes through once
    it is released, and gives up (``StateUnavailable``) after ``LOCK_TIMEOUT``."""
    import fcntl
    import os

    import proxy.state.sqlite_shared as shared

    path = tmp_path / "s.sqlite3"
    store = SharedSQLiteStore(path)
    await store.open()
    try:
        other = os.open(str(path) + "-writer.lock", os.O_RDWR)  # another worker's descriptor
        fcntl.flock(other, fcntl.LOCK_EX)
        waiting = asyncio.ensure_future(store.commit(commit(rec("c1", (msg("a").digest,)), None)))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        fcntl.flock(other, fcntl.LOCK_UN)
        assert (await asyncio.wait_for(waiting, 5)).ok
        monkeypatch.setattr(shared, "LOCK_TIMEOUT", 0.2)
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(StateUnavailable) as info:
            await store.commit(commit(rec("c2", (msg("b").digest,)), None))
        assert info.value.reason == "error" and "locked" in str(info.value)
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
        assert (await store.commit(commit(rec("c2", (msg("b").digest,)), None))).ok
    finally:
        await store.close()


def _count_encoded(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """The digests of the messages ``module`` encodes from now on (its ``message_to_json``)."""
    encoded: list[str] = []
    real = module.message_to_json

    def counting(m: Message) -> Any:
        encoded.append(m.digest)
        return real(m)

    monkeypatch.setattr(module, "message_to_json", counting)
    return encoded


async def test_sqlite_a_message_this_process_stored_is_not_encoded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork's shared prefix is neither redacted, encoded nor written again by the
    process that stored it (``STORED_DIGESTS``), yet every replica reads it; a refused
    commit's messages are not taken as stored."""
    import proxy.state.sqlite_shared_rows as rows

    encoded = _count_encoded(monkeypatch, rows)
    a, b = SharedSQLiteStore(tmp_path / "s.sqlite3"), SharedSQLiteStore(tmp_path / "s.sqlite3")
    await a.open()
    await b.open()
    try:
        m1, m2, m3, m4 = msg("deploy 7f3a9c21"), msg("upload upl-0001-9fe2"), msg("lock lk-77aa"), msg("big " + "x" * 100_000)
        r1 = rec("c1", (m1.digest, m2.digest))
        assert (await a.commit(commit(r1, None, msgs=(m1, m2)))).ok
        assert encoded == [m1.digest, m2.digest]
        fork = rec("c2", (m1.digest, m2.digest, m3.digest))
        assert (await a.commit(commit(fork, None, msgs=(m1, m2, m3)))).ok
        assert encoded[2:] == [m3.digest]
        refused = rec("c3", (m4.digest,))
        assert not (await a.commit(commit(refused, "wrong-etag", msgs=(m4,)))).ok  # c3 does not exist
        assert (await a.commit(commit(refused, None, msgs=(m4,)))).ok  # larger than INLINE_BYTES: the thread
        assert encoded[3:] == [m4.digest, m4.digest]
        got = await b.load_messages([m1.digest, m2.digest, m3.digest, m4.digest])
        assert [got[d].parts[0].text for d in (m1.digest, m2.digest, m3.digest, m4.digest)] == [
            "deploy 7f3a9c21", "upload upl-0001-9fe2", "lock lk-77aa", m4.parts[0].text,
        ]  # fmt: skip
        synced = await b.sync("t1", "t1", 0)
        assert {c.record.id for c in synced.changed} == {"c1", "c2", "c3"}
    finally:
        await a.close()
        await b.close()


async def test_redis_a_message_this_process_stored_in_a_conversation_is_not_encoded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a conversation's later commits, a message this process's commit already stored
    in it (the same short turn again) is neither redacted, encoded nor sent again, yet
    every replica reads it; a create, a refused commit and another process's change of
    the conversation make it send everything again."""
    import proxy.state.redis_values as redis_values

    require_redis()
    encoded = _count_encoded(monkeypatch, redis_values)
    with RedisServer(tmp_path / "redis") as server:
        a, b = RedisStore(server.url), RedisStore(server.url)
        await a.open()
        await b.open()
        try:
            go, out1, out2 = msg("continue"), msg("tool output 1"), msg("tool output 2")
            r = rec("c1", (go.digest, out1.digest))
            first = commit(r, None, msgs=(go, out1))
            assert (await a.commit(first)).ok
            assert encoded == [go.digest, out1.digest]
            r.digests += (go.digest, out2.digest)
            second = commit(r, first.etag, keep=2, msgs=(go, out2))
            assert (await a.commit(second)).ok
            assert encoded[2:] == [out2.digest]  # "continue" is stored in c1 already
            hist = await b.read_conversation("c1")
            assert hist is not None and hist.digests == r.digests
            got = await b.conversation_messages(hist, r.digests)
            assert [got[d].parts[0].text for d in r.digests] == ["continue", "tool output 1", "continue", "tool output 2"]
            # refused: the memory of c1 is dropped, the next commit sends everything
            assert not (await a.commit(commit(r, "stale", keep=4, msgs=(go,)))).ok
            third = commit(r, second.etag, keep=4, msgs=(go,))
            assert (await a.commit(third)).ok
            assert encoded[3:] == [go.digest]
            # another process changes c1: a's sync brings it, and a sends everything again
            r.digests += (out1.digest,)
            fourth = commit(r, third.etag, keep=4, msgs=(out1,))
            assert (await b.commit(fourth)).ok
            await a.sync("t1", "t1", 0)
            r.digests += (go.digest,)
            assert (await a.commit(commit(r, fourth.etag, keep=5, msgs=(go, out1)))).ok
            assert encoded[4:] == [out1.digest, go.digest, out1.digest]
            # a create sends every message, whatever was remembered
            r2 = rec("c2", (go.digest,))
            assert (await a.commit(commit(r2, None, msgs=(go,)))).ok
            assert (await a.commit(commit(r2, None, msgs=(go,)))).reason == "exists"
            assert encoded[7:] == [go.digest, go.digest]
        finally:
            await a.close()
            await b.close()


async def test_redis_sync_leaves_out_own_commits_acknowledged_while_it_was_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``known`` is read again when the SYNC script's answer is read: a commit of the
    caller's that it came to hold after the script's arguments were made (the script
    ran behind it in the pipeline) is left out as if known then — not parsed, and the
    memory of the messages stored in it kept; another process's change and a reload in
    full are sent as usual."""
    import redis

    import proxy.state.redis_values as redis_values

    require_redis()
    encoded = _count_encoded(monkeypatch, redis_values)
    with RedisServer(tmp_path / "redis") as server:
        a, b = RedisStore(server.url), RedisStore(server.url)
        await a.open()
        await b.open()
        raw = redis.Redis.from_url(server.url)
        try:
            go, out = msg("continue"), msg("tool output")
            r1 = rec("c1", (go.digest,))
            c1 = commit(r1, None, msgs=(go,))
            c2 = commit(rec("c2", (out.digest,)), None, msgs=(out,))
            assert (await a.commit(c1)).ok and (await b.commit(c2)).ok
            known: dict[str, str] = {}
            raw.execute_command("CLIENT", "PAUSE", 300, "ALL")  # Redis answers nothing for 0.3 s
            task = asyncio.create_task(a.sync("t1", "t1", 0, known=known))
            await asyncio.sleep(0.1)  # sent with nothing known, not answered
            known["c1"] = c1.etag  # acknowledged meanwhile
            got = await task
            assert [ch.record.id for ch in got.changed] == ["c2"]
            r1.digests += (go.digest,)
            del encoded[:]
            again = commit(r1, c1.etag, keep=1, msgs=(go,))
            assert (await a.commit(again)).ok
            assert encoded == []  # "continue" is still known to be stored in c1
            known["c1"] = again.etag
            [full] = (await a.sync("t1", "t1", got.cursor, reload=["c1"], known=known)).changed
            assert (full.record.id, full.keep, full.tail) == ("c1", 0, r1.digests)
        finally:
            raw.close()
            await a.close()
            await b.close()


def test_redis_the_memory_of_stored_messages_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import proxy.state.redis as redis_store

    monkeypatch.setattr(redis_store, "STORED_DIGESTS", 5)
    monkeypatch.setattr(redis_store, "STORED_PER_CONVERSATION", 3)
    store = RedisStore("redis://127.0.0.1:1/0")
    for c in range(4):
        store._remember_stored(f"c{c}", [msg(f"m{c}-{i}") for i in range(4)])  # 3 kept of each
        assert store._stored_n == sum(len(d) for d in store._stored.values()) <= 5
    assert list(store._stored) == ["c3"] and len(store._stored["c3"]) == 3  # the most recent
    store._forget_stored("c3")
    assert store._stored_n == 0 and not store._stored
