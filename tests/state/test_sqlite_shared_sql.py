"""What a shared SQLite store executes (:mod:`proxy.state.sqlite_shared`): a commit
appending to a stored history updates the rows it changes in place — the last digest
chunk extended, the conversation's row and its shared state updated — and leaves the
same rows the general path (read, delete and write again from the changed chunk) does;
a sync with nothing committed since the last one reads no table; commits made together
share one transaction (the group commit), each with its own outcome."""

from __future__ import annotations

import asyncio
import fcntl
import os
import secrets
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.core.messages import Part, make_message
from proxy.state.protocol import Commit, StateUnavailable
from proxy.state.records import ConversationRecord
from proxy.state.sqlite_rows import DIGEST_CHUNK
from proxy.state.sqlite_shared import SharedSQLiteStore


def _commit(cid: str, digests: tuple[str, ...], expect: str | None, keep: int, seq: int) -> Commit:
    r = ConversationRecord(id=cid, tenant="t1", namespace="t1", created=1.0, last_seen=float(seq), digests=digests, seq=seq)
    return Commit(cid, "t1", "t1", expect, "e" + secrets.token_hex(4), r.meta_dict(), r.last_seen, keep, digests[keep:], ())


def _chunks(path: Path, cid: str) -> list[tuple[int, str]]:
    with sqlite3.connect(str(path)) as conn:
        return conn.execute("SELECT idx, body FROM digest_chunks WHERE conv = ? ORDER BY idx", (cid,)).fetchall()


def _layout(digests: tuple[str, ...]) -> list[tuple[int, str]]:
    """The chunks a history is stored in: :data:`DIGEST_CHUNK` digests a row, in order."""
    return [(i, ",".join(digests[j : j + DIGEST_CHUNK])) for i, j in enumerate(range(0, len(digests), DIGEST_CHUNK))]


async def test_an_appending_commit_updates_its_rows_in_place(tmp_path: Path) -> None:
    store = SharedSQLiteStore(tmp_path / "s.sqlite3")
    await store.open()
    try:
        m = [make_message("user", (Part("text", f"m{i}"),)) for i in range(DIGEST_CHUNK + 3)]
        d = tuple(x.digest for x in m)
        first = _commit("c1", d[:DIGEST_CHUNK - 1], None, 0, 1)
        assert (await store.commit(first)).ok
        ran: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(ran.append)  # the writer's connection (a small commit: on the loop)
        nxt = _commit("c1", d[: DIGEST_CHUNK + 3], first.etag, DIGEST_CHUNK - 1, 2)  # fills the chunk, starts one
        assert (await store.commit(nxt)).ok
        store._conn.set_trace_callback(None)
        sql = " | ".join(ran)
        assert "UPDATE digest_chunks" in sql and "UPDATE conversations" in sql and "UPDATE conv_state" in sql
        assert "SELECT body FROM digest_chunks" not in sql and "DELETE FROM digest_chunks" not in sql, sql
        assert "INSERT OR REPLACE INTO conversations" not in sql and "INTO conv_state" not in sql, sql
        assert _chunks(tmp_path / "s.sqlite3", "c1") == _layout(d)
        [ch] = (await store.sync("t1", "t1", 0)).changed
        assert (ch.record.etag, ch.record.seq, ch.keep, ch.tail) == (nxt.etag, 2, 0, d)
    finally:
        await store.close()


@settings(max_examples=15, deadline=None)
@example([(300, DIGEST_CHUNK - 3), (300, DIGEST_CHUNK), (300, 1), (5, 0)])  # full chunks, then one more
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 2 * DIGEST_CHUNK + 5)), min_size=1, max_size=6))
def test_chunks_after_any_appends_and_splices_are_the_histories_layout(steps: list[tuple[int, int]]) -> None:
    """Each step keeps ``min(keep, stored)`` digests and appends ``n`` new ones (a plain
    append when it keeps them all): the rows are the history's layout, and a sync from
    the start reads the history back."""

    async def run(path: Path) -> None:
        store = SharedSQLiteStore(path)
        await store.open()
        try:
            made = iter(range(10_000))
            hist = tuple(f"d{next(made)}" for _ in range(3))
            c = _commit("c1", hist, None, 0, 1)
            assert (await store.commit(c)).ok
            for seq, (keep, n) in enumerate(steps, start=2):
                keep = min(keep, len(hist))
                hist = hist[:keep] + tuple(f"d{next(made)}" for _ in range(n))
                nxt = _commit("c1", hist, c.etag, keep, seq)
                assert (await store.commit(nxt)).ok
                c = nxt
                assert _chunks(path, "c1") == _layout(hist)
            [ch] = (await store.sync("t1", "t1", 0)).changed
            assert (ch.record.etag, ch.keep, ch.tail) == (c.etag, 0, hist)
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp) / "s.sqlite3"))


async def test_a_sync_with_nothing_committed_since_reads_nothing(tmp_path: Path) -> None:
    """While no connection committed since the sync that answered a cursor (the reader's
    ``PRAGMA data_version`` unchanged), a sync from that cursor reads no table; another
    process's commit is read at the next sync; a commit in another namespace is a
    version check, not a read of changed conversations."""
    path = tmp_path / "s.sqlite3"
    a, b = SharedSQLiteStore(path), SharedSQLiteStore(path)
    await a.open()
    await b.open()
    try:
        first = _commit("c1", ("d1",), None, 0, 1)
        assert (await b.commit(first)).ok
        s1 = await a.sync("t1", "t1", 0)
        assert [ch.record.id for ch in s1.changed] == ["c1"]
        ran: list[str] = []
        assert a._reader is not None
        a._reader.set_trace_callback(ran.append)
        again = await a.sync("t1", "t1", s1.cursor)
        assert (again.cursor, again.changed) == (s1.cursor, ())
        assert ran == ["PRAGMA data_version"], ran
        nxt = _commit("c1", ("d1", "d2"), first.etag, 1, 2)
        assert (await b.commit(nxt)).ok  # another process
        s2 = await a.sync("t1", "t1", s1.cursor)
        assert [(ch.record.etag, ch.keep, ch.tail) for ch in s2.changed] == [(nxt.etag, 1, ("d2",))]
        other = Commit("c9", "t1", "t1|x", None, "e9", first.meta, 1.0, 0, ("d9",), ())
        assert (await a.commit(other)).ok  # this process's writer, another namespace
        del ran[:]
        s3 = await a.sync("t1", "t1", s2.cursor)
        assert (s3.cursor, s3.changed) == (s2.cursor, ())
        assert any("FROM namespaces" in q for q in ran) and not any("FROM conv_state" in q for q in ran), ran
        a._reader.set_trace_callback(None)
        assert [ch.record.id for ch in (await a.sync("t1", "t1", 0)).changed] == ["c1"]  # an older cursor reads
    finally:
        await a.close()
        await b.close()


def _stored_etag(path: Path, cid: str) -> str | None:
    """``cid``'s etag as another process reads it (its own connection)."""
    with sqlite3.connect(str(path)) as conn:
        row = conn.execute("SELECT etag FROM conv_state WHERE id = ?", (cid,)).fetchone()
    return None if row is None else str(row[0])


async def test_commits_of_one_loop_step_share_one_transaction_each_its_own_compare_and_set(tmp_path: Path) -> None:
    """Commits made together go in one ``BEGIN IMMEDIATE`` transaction (the group
    commit); each keeps its own outcome — a refused one writes nothing, the others are
    stored — and each caller is answered only when another process already reads its
    commit; commits made while a group waits for the writers' lock form the next group."""
    path = tmp_path / "s.sqlite3"
    store = SharedSQLiteStore(path)
    await store.open()
    try:
        first = _commit("c1", ("d1",), None, 0, 1)
        assert (await store.commit(first)).ok
        ran: list[str] = []
        assert store._conn is not None
        store._conn.set_trace_callback(ran.append)

        async def answered(c: Commit) -> tuple[bool, str | None]:
            res = await store.commit(c)
            return res.ok, _stored_etag(path, c.conversation_id)  # read as soon as answered

        c2, c3 = _commit("c2", ("d2",), None, 0, 1), _commit("c3", ("d3",), None, 0, 1)
        stale = _commit("c1", ("d1", "dx"), "not-the-etag", 1, 2)
        got = await asyncio.gather(answered(c2), answered(stale), answered(c3))
        assert got == [(True, c2.etag), (False, first.etag), (True, c3.etag)]
        assert sum(q == "BEGIN IMMEDIATE" for q in ran) == 1, ran

        del ran[:]
        other = os.open(str(path) + "-writer.lock", os.O_RDWR)  # another worker writing
        fcntl.flock(other, fcntl.LOCK_EX)
        try:
            waiting = asyncio.ensure_future(answered(_commit("c4", ("d4",), None, 0, 1)))
            await asyncio.sleep(0.05)  # the group of c4 waits for the lock on the writer thread
            later = [asyncio.ensure_future(answered(_commit(f"c{i}", (f"d{i}",), None, 0, 1))) for i in (5, 6)]
            await asyncio.sleep(0.05)
            assert not waiting.done() and not any(t.done() for t in later)
        finally:
            fcntl.flock(other, fcntl.LOCK_UN)
            os.close(other)
        assert [r[0] for r in await asyncio.gather(waiting, *later)] == [True, True, True]
        assert sum(q == "BEGIN IMMEDIATE" for q in ran) == 2, ran  # c4, then c5 with c6
        store._conn.set_trace_callback(None)
    finally:
        await store.close()


async def test_a_group_whose_transaction_fails_fails_every_commit_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error inside a group's transaction rolls it back whole: every commit of the
    group raises ``StateUnavailable`` (none was acknowledged) and none of them is
    stored; the next commit goes through."""
    import proxy.state.sqlite_shared_sql as sql

    path = tmp_path / "s.sqlite3"
    store = SharedSQLiteStore(path)
    await store.open()
    real = sql._parts

    def failing(conn: sqlite3.Connection, cid: str, *args: Any) -> int:
        if cid == "bad":
            raise sqlite3.OperationalError("disk I/O error")
        return real(conn, cid, *args)

    monkeypatch.setattr(sql, "_parts", failing)
    try:
        group = [_commit(cid, (f"d-{cid}",), None, 0, 1) for cid in ("ok1", "bad", "ok2")]
        got = await asyncio.gather(*(store.commit(c) for c in group), return_exceptions=True)
        assert all(isinstance(g, StateUnavailable) and g.reason == "error" for g in got), got
        assert [_stored_etag(path, c.conversation_id) for c in group] == [None, None, None]
        nxt = _commit("ok3", ("d3",), None, 0, 1)
        assert (await store.commit(nxt)).ok and _stored_etag(path, "ok3") == nxt.etag
    finally:
        await store.close()
