"""SQLite store: the embedded default (WAL, survives restarts).

All database work runs on one dedicated thread (one connection), never on the event
loop. Writes are buffered in memory and coalesced (the last save of a conversation wins)
and committed in batches: the first write of a batch schedules a flush ``flush_delay``
seconds later (so a busy proxy commits a few times a second, not once per request, and
the writer thread seldom competes with the loop for the GIL), and writes made while a
flush runs go to the next batch. Records are serialised to JSON on the writer thread,
from snapshots taken when the write is enqueued. :meth:`flush`, :meth:`close` and
:meth:`load` cut the delay short and run on that thread after flushing the buffer.

Messages and blobs are read on a thread and connection of their own (WAL: a reader
never waits for the writer's transaction), and a read never waits for the writer: a row
it asks for that is still pending (queued, or in the batch being written) is taken from
memory, encoded and decoded as a committed read would return it. Rows are keyed by
content digest or hash, so a pending row is exactly what the table will hold, and a row
not pending when the read starts is either committed already or written after it. A
read of conversation *Y* never waits behind *X*'s 10 MB text being redacted (issue 16:
such a read took 7.8 s with one pending, 17 s with four; and when *Y*'s own row was
pending, it waited for the whole batch — others' large rows included — 4–9 s in
``bench.stall``).

The backlog is bounded (:data:`MAX_BACKLOG_CHARS` of message text pending): past it,
:meth:`room` — which the request path awaits before a large body is taken in — waits
until the writer has caught up. Nothing acknowledged is dropped; the large tenant
waits, the others do not (the write methods themselves never block the loop).

A conversation's history digests are stored in chunks of
:data:`~proxy.state.sqlite_rows.DIGEST_CHUNK` (``digest_chunks``), and a save rewrites
only the chunks that changed since the last commit: appending to a 1,000-message
history writes one chunk, not the whole list. Rows written before chunking
(``conversations.digests`` non-empty) are still read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from proxy.core.messages import Message
from proxy.core.prefix import common_prefix
from proxy.state.longrows import LONG_ROW, message_from_long_row, read_blob
from proxy.state.offload import OFFLOAD_CHARS
from proxy.state.records import (
    ConversationRecord,
    GateEvent,
    TimelineEntry,
    message_from_json,
    message_to_json,
)
from proxy.state.sqlite_rows import (
    DIGEST_CHUNK,
    SCHEMA,
    SCHEMA_VERSION,
    as_committed,
    blob_value,
    chunk_count,
    insert_streamed,
    streamed,
)
from proxy.state.store import Store

__all__ = ["SQLiteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Orphaned messages are collected at most this often (seconds) after deletions.
GC_INTERVAL = 30.0


#: Default seconds between the first write of a batch and its commit. Each commit wakes
#: the writer thread, which then competes with the event loop for the GIL (measured: at
#: 50 ms the loop lost ~0.1 ms per request to it); a crash loses at most this much.
FLUSH_DELAY = 0.25

#: Message text (characters) pending in the writer beyond which :meth:`SQLiteStore.room`
#: waits: about six 10 MB texts, each more than a second of redaction.
MAX_BACKLOG_CHARS = 64 << 20


def _chars(m: Message) -> int:
    return sum(len(p.text) for p in m.parts)


class _Batch:
    def __init__(self) -> None:
        # snapshots: (last_seen, meta dict, digests); serialised on the writer thread
        self.convs: dict[str, tuple[float, dict[str, Any], tuple[str, ...]]] = {}
        self.messages: dict[str, Message] = {}
        self.blobs: dict[str, str] = {}
        self.timeline: dict[tuple[str, int], dict[str, Any]] = {}
        self.events: dict[tuple[str, int], str] = {}
        self.deletes: set[str] = set()
        #: conversations whose committed digests the writer need no longer remember
        self.released: set[str] = set()
        #: characters of message text in ``messages``
        self.chars = 0

    def __bool__(self) -> bool:
        return bool(self.convs or self.messages or self.blobs or self.timeline or self.events or self.deletes)


class SQLiteStore(Store):
    """``path`` is the database file (its folder is created); ``flush_delay``: seconds
    from the first write of a batch to its commit."""

    def __init__(self, path: str | Path, *, flush_delay: float = FLUSH_DELAY) -> None:
        self.path = Path(path)
        self.flush_delay = flush_delay
        self._hurry = threading.Event()
        #: the writer, at the loop's priority: niced, it fell behind a saturated loop and its
        #: backlog grew without a bound (bench.memory: 465 -> 813 MB after 10,000
        #: conversations); :meth:`room` bounds only what large bodies add
        self._exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cg-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._batch = _Batch()
        self._scheduled = False
        self._last_gc = 0.0
        self._need_gc = False
        self._closed = False
        self._inflight: Future[None] | None = None
        #: the batch the writer is writing (its rows are still pending for readers)
        self._writing: _Batch | None = None
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cg-sqlite-read")
        #: threads that wait for the request worker to decode long rows: their own, so a
        #: backlog of them never holds the loop's default executor, which aiohttp's
        #: resolver and the gate's other blocking calls use
        self._long = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cg-sqlite-long")
        self._rconn: sqlite3.Connection | None = None
        #: digests committed per conversation in ``digest_chunks`` (writer thread only)
        self._written: dict[str, tuple[str, ...]] = {}

    # -- thread side

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('schema', ?)", (SCHEMA_VERSION,))
        self._conn = conn

    def _connect_reader(self) -> None:
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        self._rconn = conn

    def _flush_sync(self) -> None:
        conn = self._conn
        with self._lock:
            self._scheduled = False
            if conn is None:  # not open yet: keep the batch for the first flush after open
                return
            batch, self._batch = self._batch, _Batch()
            if batch:
                self._writing = batch
        if batch:
            try:
                self._write(conn, batch)
            finally:
                with self._lock:  # committed (or dropped): no longer pending for readers
                    self._writing = None
        for cid in batch.released:  # after the commit, which remembers what it wrote
            self._written.pop(cid, None)
        if not batch:
            return
        if self._need_gc and time.monotonic() - self._last_gc >= GC_INTERVAL:
            self._gc_sync()

    def _write(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        try:
            conn.execute("BEGIN")
            # deletions first: a conversation deleted then re-created in one batch
            # keeps only its new rows
            if batch.deletes:
                ids = [(c,) for c in batch.deletes]
                conn.executemany("DELETE FROM conversations WHERE id = ?", ids)
                conn.executemany("DELETE FROM timeline WHERE conv = ?", ids)
                conn.executemany("DELETE FROM events WHERE conv = ?", ids)
                conn.executemany("DELETE FROM digest_chunks WHERE conv = ?", ids)
                for cid in batch.deletes:
                    self._written.pop(cid, None)
                self._need_gc = True
            if batch.messages:
                rows = [(d, message_to_json(m)) for d, m in batch.messages.items()]
                conn.executemany(
                    "INSERT OR IGNORE INTO messages(digest, body) VALUES(?, ?)",
                    [(d, body) for d, body in rows if not streamed(body)],
                )
                for d, body in rows:
                    if streamed(body):
                        insert_streamed(conn, d, body)
            if batch.blobs:
                conn.executemany(
                    "INSERT OR IGNORE INTO blobs(key, body) VALUES(?, ?)",
                    [(k, blob_value(v)) for k, v in batch.blobs.items()],
                )
            if batch.convs:
                meta_json = ConversationRecord.meta_dict_to_json
                conn.executemany(
                    "INSERT OR REPLACE INTO conversations(id, last_seen, meta, digests) VALUES(?, ?, ?, '')",
                    [(cid, ls, meta_json(meta)) for cid, (ls, meta, _) in batch.convs.items()],
                )
                chunk_rows: list[tuple[str, int, str]] = []
                trims: list[tuple[str, int]] = []
                for cid, (_, _, dg) in batch.convs.items():
                    old = self._written.get(cid)
                    first = 0 if old is None else common_prefix(old, dg) // DIGEST_CHUNK
                    n = chunk_count(len(dg))
                    for idx in range(first, n):
                        chunk_rows.append((cid, idx, ",".join(dg[idx * DIGEST_CHUNK : (idx + 1) * DIGEST_CHUNK])))
                    if old is None or chunk_count(len(old)) > n:
                        trims.append((cid, n))
                conn.executemany("DELETE FROM digest_chunks WHERE conv = ? AND idx >= ?", trims)
                conn.executemany("INSERT OR REPLACE INTO digest_chunks(conv, idx, body) VALUES(?, ?, ?)", chunk_rows)
            if batch.timeline:
                entry_json = TimelineEntry.dict_to_json
                conn.executemany(
                    "INSERT OR REPLACE INTO timeline(conv, seq, body) VALUES(?, ?, ?)",
                    [(c, s, entry_json(b)) for (c, s), b in batch.timeline.items()],
                )
            if batch.events:
                conn.executemany(
                    "INSERT OR REPLACE INTO events(conv, seq, body) VALUES(?, ?, ?)",
                    [(c, s, b) for (c, s), b in batch.events.items()],
                )
            conn.execute("COMMIT")
            for cid, (_, _, dg) in batch.convs.items():
                self._written[cid] = dg
        except Exception:  # sqlite3.Error, or a value SQLite cannot take: never leave BEGIN open
            log.exception("state: SQLite write failed; batch dropped")
            self._written.clear()  # unknown state: the next saves rewrite every chunk
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _gc_sync(self) -> None:
        conn = self._conn
        if conn is None:
            return
        self._need_gc = False
        self._last_gc = time.monotonic()
        live: set[str] = set()
        for meta, digests in conn.execute("SELECT meta, digests FROM conversations"):
            if digests:
                live.update(digests.split(","))
            live.update(ConversationRecord.from_row(meta, "").side_digests)
        for (body,) in conn.execute("SELECT body FROM digest_chunks"):
            live.update(body.split(","))
        for (body,) in conn.execute("SELECT body FROM timeline WHERE body LIKE '%\"reply_digests\":[\"%'"):
            live.update(TimelineEntry.from_json(body).reply_digests)
        dead = [(d,) for (d,) in conn.execute("SELECT digest FROM messages") if d not in live]
        if dead:
            conn.execute("BEGIN")
            conn.executemany("DELETE FROM messages WHERE digest = ?", dead)
            conn.execute("COMMIT")

    def _run(self, fn: Callable[[], T]) -> T:
        self._flush_sync()
        return fn()

    def _delayed_flush(self) -> None:
        self._hurry.wait(self.flush_delay)
        self._hurry.clear()
        self._flush_sync()

    async def _call(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        self._hurry.set()  # a pending delayed flush runs now: the read is not held up
        return await loop.run_in_executor(self._exec, self._run, fn)

    def _pending_rows(self, table: str, keys: list[str]) -> dict[str, Any]:
        """The rows of ``table`` (``messages`` or ``blobs``) with one of ``keys`` that are
        queued or being written. Both tables are content-addressed: a queued row is what
        the table will hold, so a read takes it from here instead of waiting for the
        writer — which may be busy with other tenants' multi-megabyte rows."""
        found: dict[str, Any] = {}
        with self._lock:
            for batch in (self._writing, self._batch):
                rows: dict[str, Any] | None = None if batch is None else batch.messages if table == "messages" else batch.blobs
                if rows:
                    found.update((k, rows[k]) for k in keys if k in rows)
        return found

    def backlog(self) -> int:
        """Characters of message text not yet committed."""
        with self._lock:
            return self._batch.chars + (self._writing.chars if self._writing is not None else 0)

    async def room(self) -> None:
        """Wait while more than :data:`MAX_BACKLOG_CHARS` of message text is pending
        (each pass waits until the writer has written what was queued)."""
        while not self._closed and self.backlog() > MAX_BACKLOG_CHARS:
            await self.flush()

    # -- loop side

    def _schedule(self) -> None:
        # Called with self._lock held.
        if not self._scheduled and not self._closed:
            self._scheduled = True
            self._inflight = self._exec.submit(self._delayed_flush)

    async def open(self) -> None:
        await self._call(self._connect)
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._reader, self._connect_reader)

    async def flush(self) -> None:
        await self._call(lambda: None)

    async def close(self) -> None:
        if self._closed:
            return

        def _final() -> None:
            self._flush_sync()
            if self._need_gc:
                self._gc_sync()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        def _close_reader() -> None:
            if self._rconn is not None:
                self._rconn.close()
                self._rconn = None

        loop = asyncio.get_running_loop()
        self._hurry.set()
        await loop.run_in_executor(self._exec, _final)
        await loop.run_in_executor(self._reader, _close_reader)
        self._closed = True
        self._exec.shutdown(wait=True)
        self._reader.shutdown(wait=True)
        self._long.shutdown(wait=True)

    async def load(self, max_timeline: int = 1000) -> list[ConversationRecord]:
        def _load() -> list[ConversationRecord]:
            assert self._conn is not None
            recs: dict[str, ConversationRecord] = {}
            chunked: set[str] = set()
            for meta, digests in self._conn.execute("SELECT meta, digests FROM conversations"):
                rec = ConversationRecord.from_row(meta, digests)
                recs[rec.id] = rec
                if not digests:
                    chunked.add(rec.id)
            parts: dict[str, list[str]] = {}
            for conv, body in self._conn.execute("SELECT conv, body FROM digest_chunks ORDER BY conv, idx"):
                if conv in chunked and body:
                    parts.setdefault(conv, []).append(body)
            for cid in chunked:
                rec = recs[cid]
                rec.digests = tuple(",".join(parts[cid]).split(",")) if cid in parts else ()
                self._written[cid] = rec.digests
            for conv, body in self._conn.execute(
                "SELECT conv, body FROM (SELECT conv, seq, body, ROW_NUMBER() OVER "
                "(PARTITION BY conv ORDER BY seq DESC) AS rn FROM timeline) WHERE rn <= ? ORDER BY conv, seq",
                (max_timeline,),
            ):
                if conv in recs:
                    recs[conv].timeline.append(TimelineEntry.from_json(body))
            for conv, body in self._conn.execute("SELECT conv, body FROM events ORDER BY conv, seq"):
                if conv in recs:
                    recs[conv].events.append(GateEvent.from_json(body))
            return list(recs.values())

        return await self._call(_load)

    async def load_messages(self, digests: Iterable[str]) -> dict[str, Message]:
        wanted = list(dict.fromkeys(digests))

        pending = self._pending_rows("messages", wanted)
        stored = [d for d in wanted if d not in pending]
        # a long pending row is redacted in the store's worker, behind the writer's own
        # long rows: never on the reader thread, where every other read would wait for it
        # (bench.stall: a small request's hydration waited 0.3-3 s behind one)
        long_ = {d: m for d, m in pending.items() if any(len(p.text) > OFFLOAD_CHARS for p in m.parts)}

        def _load() -> tuple[dict[str, Message], dict[str, bytes]]:
            assert self._rconn is not None
            # a pending row as a committed read would return it (secrets redacted)
            out = {d: as_committed(m) for d, m in pending.items() if d not in long_}
            rows: dict[str, bytes] = {}
            for i in range(0, len(stored), 500):
                chunk = stored[i : i + 500]
                # a long row (a BLOB) is not fetched with the others: read here without a
                # 10 MB C call holding the GIL, decoded beside this thread
                # (proxy.state.longrows)
                q = (f"SELECT digest, CASE WHEN typeof(body) = 'blob' AND length(body) >= {LONG_ROW} "
                     f"THEN NULL ELSE body END, rowid, length(body) FROM messages "
                     f"WHERE digest IN ({','.join('?' * len(chunk))})")
                for d, body, rowid, size in self._rconn.execute(q, chunk).fetchall():
                    if body is None:
                        rows[d] = read_blob(self._rconn, "messages", "body", rowid, size)
                    else:
                        out[d] = message_from_json(body)
            return out, rows

        loop = asyncio.get_running_loop()
        ready = [loop.run_in_executor(self._long, as_committed, m) for m in long_.values()]
        out, rows = await loop.run_in_executor(self._reader, _load)
        decoded = [loop.run_in_executor(self._long, message_from_long_row, body) for body in rows.values()]
        out.update(zip(long_, await asyncio.gather(*ready), strict=True))
        out.update(zip(rows, await asyncio.gather(*decoded), strict=True))
        return out

    async def load_blobs(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))

        pending = self._pending_rows("blobs", wanted)

        def _load() -> dict[str, str]:
            assert self._rconn is not None
            out: dict[str, str] = {}
            for k in wanted:
                if k in pending:
                    body: str | bytes = blob_value(pending[k])  # as a committed read would return it
                else:
                    row = self._rconn.execute("SELECT body FROM blobs WHERE key = ?", (k,)).fetchone()
                    if row is None:
                        continue
                    body = row[0]
                out[k] = body.decode("utf-8", "surrogatepass") if isinstance(body, bytes) else body
            return out

        return await asyncio.get_running_loop().run_in_executor(self._reader, _load)

    def save_conversation(self, rec: ConversationRecord) -> None:
        row = (rec.last_seen, rec.meta_dict(), rec.digests)
        with self._lock:
            self._batch.convs[rec.id] = row
            self._batch.released.discard(rec.id)  # held again
            self._schedule()

    def put_messages(self, msgs: Iterable[Message]) -> None:
        with self._lock:
            batch = self._batch
            for m in msgs:
                if m.digest not in batch.messages:
                    batch.chars += _chars(m)
                batch.messages[m.digest] = m
            self._schedule()

    def put_blob(self, key: str, text: str) -> None:
        with self._lock:
            self._batch.blobs[key] = text
            self._schedule()

    def put_timeline(self, conversation_id: str, entry: TimelineEntry) -> None:
        body = entry.as_dict()
        with self._lock:
            self._batch.timeline[(conversation_id, entry.seq)] = body
            self._schedule()

    def put_event(self, conversation_id: str, event: GateEvent) -> None:
        body = event.to_json()
        with self._lock:
            self._batch.events[(conversation_id, event.seq)] = body
            self._schedule()

    def delete(self, conversation_ids: Iterable[str]) -> None:
        with self._lock:
            for cid in conversation_ids:
                self._batch.convs.pop(cid, None)
                for key in [k for k in self._batch.timeline if k[0] == cid]:
                    del self._batch.timeline[key]
                for key in [k for k in self._batch.events if k[0] == cid]:
                    del self._batch.events[key]
                self._batch.deletes.add(cid)
            self._schedule()

    def release(self, conversation_ids: Iterable[str]) -> None:
        """Forget the digests last committed for these conversations (the writer keeps
        them to rewrite only the chunks that changed): their next save, if any, rewrites
        every chunk. Done by the writer after the batch under way; no write of its own."""
        with self._lock:
            self._batch.released.update(conversation_ids)
