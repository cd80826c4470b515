"""State stores: round trips, restart, deletion and garbage collection, batching."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proxy.core.messages import Part, make_message, text_message
from proxy.state import (
    ConversationRecord,
    GateEvent,
    MemoryStore,
    SQLiteStore,
    Store,
    TimelineEntry,
)


def _rec(cid: str, digests: tuple[str, ...]) -> ConversationRecord:
    return ConversationRecord(id=cid, tenant="t1", namespace="t1", created=1.0, last_seen=2.0, model="gpt-4o",
                              digests=digests, request_len=len(digests), tokens=42, window=128000, seq=1)


def _entry(seq: int) -> TimelineEntry:
    return TimelineEntry(seq=seq, at=3.0, relation="new", transition="new", messages=2, new_messages=2, dropped=0,
                         tokens=42, window=128000, share=0.0003, exact=True, model="gpt-4o", stream=False)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    s: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    await s.open()
    yield s  # type: ignore[misc]
    await s.close()


async def test_round_trip(store: Store) -> None:
    m1 = text_message("user", "hello")
    m2 = make_message("assistant", (Part("tool_call", '{"a":1}', tool_name="f", tool_call_id="c1"),))
    m3 = make_message("tool", (Part("tool_result", "out", tool_call_id="c1", is_error=True),))
    store.put_messages([m1, m2, m3])
    store.put_blob("sys", "be careful")
    rec = _rec("c1", (m1.digest, m2.digest, m3.digest))
    store.save_conversation(rec)
    store.put_timeline("c1", _entry(1))
    store.put_event("c1", GateEvent(1, 4.0, "compaction", "warn", 1, "dropped 1", {"dropped": [{"value": "x"}]}))
    [got] = await store.load()
    assert got.id == "c1" and got.digests == rec.digests and got.tokens == 42 and got.window == 128000
    assert got.timeline == [_entry(1)]
    assert got.events[0].details == {"dropped": [{"value": "x"}]}
    msgs = await store.load_messages(rec.digests)
    assert [msgs[d] for d in rec.digests] == [m1, m2, m3]
    assert all(msgs[d].digest == d for d in rec.digests)
    assert await store.load_blobs(["sys", "nope"]) == {"sys": "be careful"}


async def test_delete_collects_orphan_messages(store: Store) -> None:
    shared, own = text_message("user", "shared"), text_message("user", "own")
    store.put_messages([shared, own])
    store.save_conversation(_rec("a", (shared.digest, own.digest)))
    store.save_conversation(_rec("b", (shared.digest,)))
    store.put_timeline("a", _entry(1))
    store.delete(["a"])
    if isinstance(store, SQLiteStore):
        await store.flush()
        await store._call(store._gc_sync)  # noqa: SLF001
    else:
        store.collect_garbage()
    assert [r.id for r in await store.load()] == ["b"]
    assert set(await store.load_messages([shared.digest, own.digest])) == {shared.digest}


async def test_sqlite_survives_restart_and_batches(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gate.db"
    s = SQLiteStore(path)
    await s.open()
    msgs = [text_message("user", f"m{i}") for i in range(300)]
    for i in range(300):  # many small writes, coalesced into few transactions
        s.put_messages([msgs[i]])
        s.save_conversation(_rec("c", tuple(m.digest for m in msgs[: i + 1])))
        s.put_timeline("c", _entry(i + 1))
    await s.close()
    s2 = SQLiteStore(path)
    await s2.open()
    [rec] = await s2.load(max_timeline=10)
    assert len(rec.digests) == 300 and [e.seq for e in rec.timeline] == list(range(291, 301))
    assert len(await s2.load_messages(rec.digests)) == 300
    journal = s2._conn.execute("PRAGMA journal_mode").fetchone()[0]  # noqa: SLF001
    assert journal == "wal"
    await s2.close()


async def test_sqlite_reads_see_pending_writes_and_never_block_the_loop(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "x.db")
    await s.open()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    t = asyncio.create_task(ticker())
    for i in range(200):
        s.put_blob(f"k{i}", "v" * 10_000)
    got = await s.load_blobs([f"k{i}" for i in range(200)])
    t.cancel()
    assert len(got) == 200 and ticks > 0
    await s.close()


async def test_sqlite_history_chunks_follow_every_kind_of_edit(tmp_path: Path) -> None:
    """Histories are stored in chunks rewritten only where they changed: appends, a
    shrink, an edit in the middle, a rewrite, deletion and re-creation all read back
    exactly, in this process and after a restart."""
    from proxy.state.sqlite_rows import DIGEST_CHUNK

    path = tmp_path / "h.db"
    n = DIGEST_CHUNK * 3 + 5
    ds = tuple(f"{i:032x}" for i in range(n))
    versions = [
        ds[:1], ds[: DIGEST_CHUNK], ds[: DIGEST_CHUNK + 1], ds,  # appends across chunk edges
        ds[: DIGEST_CHUNK * 2],  # shrink to a chunk edge
        ds[:10] + ("e" * 32,) + ds[11 : DIGEST_CHUNK * 2 + 7],  # edit in the first chunk
        tuple(reversed(ds)),  # rewrite
        (),  # empty
        ds[:3],
    ]
    s = SQLiteStore(path, flush_delay=0)
    await s.open()
    for v in versions:
        s.save_conversation(_rec("c", v))
        await s.flush()
        [got] = await s.load()
        assert got.digests == v
        s2 = SQLiteStore(path)
        await s2.open()
        [got2] = await s2.load()
        assert got2.digests == v
        await s2.close()
    s.delete(["c"])
    s.save_conversation(_rec("c", ds[:2]))
    await s.close()
    s3 = SQLiteStore(path)
    await s3.open()
    [got3] = await s3.load()
    assert got3.digests == ds[:2]
    await s3.close()


async def test_sqlite_appending_rewrites_one_chunk(tmp_path: Path) -> None:
    from proxy.state.sqlite_rows import DIGEST_CHUNK

    s = SQLiteStore(tmp_path / "a.db")
    await s.open()
    ds = tuple(f"{i:032x}" for i in range(DIGEST_CHUNK * 8))
    s.save_conversation(_rec("c", ds[:-2]))
    await s.flush()

    def changes() -> int:
        assert s._conn is not None
        return s._conn.total_changes

    before = await s._call(changes)
    s.save_conversation(_rec("c", ds))
    await s.flush()
    assert await s._call(changes) - before == 2  # the conversation row and one chunk
    await s.close()


async def test_sqlite_reads_rows_written_before_chunking(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    s = SQLiteStore(path)
    await s.open()
    await s.close()
    rec = _rec("legacy", ("a" * 32, "b" * 32))
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO conversations(id, last_seen, meta, digests) VALUES(?, ?, ?, ?)",
                 (rec.id, rec.last_seen, rec.meta_json(), rec.digests_text()))
    conn.commit()
    conn.close()
    s = SQLiteStore(path)
    await s.open()
    [got] = await s.load()
    assert got.digests == rec.digests
    s.save_conversation(_rec("legacy", rec.digests + ("c" * 32,)))  # rewritten as chunks
    await s.close()
    s = SQLiteStore(path)
    await s.open()
    [got] = await s.load()
    assert got.digests == rec.digests + ("c" * 32,)
    await s.close()


async def test_sqlite_keeps_lone_surrogates_and_keeps_writing(tmp_path: Path) -> None:
    """A request may carry lone surrogates (valid JSON escapes such as "\\ud800"): such
    messages and system prompts are stored and read back exactly, and a batch holding
    them never leaves the store unable to write."""
    path = tmp_path / "u.db"
    s = SQLiteStore(path)
    await s.open()
    odd = text_message("user", "half an emoji \ud83d and more")
    s.put_messages([odd, text_message("user", "fine")])
    s.put_blob("sys", "system \udc00 prompt")
    s.save_conversation(_rec("c", (odd.digest,)))
    await s.flush()
    later = text_message("user", "written afterwards")
    s.put_messages([later])
    await s.close()
    s2 = SQLiteStore(path)
    await s2.open()
    got = await s2.load_messages([odd.digest, later.digest])
    assert got[odd.digest] == odd and got[odd.digest].digest == odd.digest and later.digest in got
    assert await s2.load_blobs(["sys"]) == {"sys": "system \udc00 prompt"}
    await s2.close()
