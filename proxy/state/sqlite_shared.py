"""SQLite as a shared store: the workers of ``serve --workers N`` on one machine.

The same file and tables as :class:`~proxy.state.sqlite.SQLiteStore` (a file written by
one mode is read by the other), plus what the shared protocol
(:mod:`proxy.state.protocol`) needs: per conversation its etag, namespace, the
namespace version of its last change, a short splice log, its event counter and token
stats (``conv_state``); per namespace its version (``namespaces``); and the store-wide
event log (``event_log``). WAL mode lets the processes read while one writes; a commit
is one ``BEGIN IMMEDIATE`` transaction (the compare-and-set holds the write lock), so it
is durable and visible to every worker when the call returns. Writers queue on an
``flock`` of a lock file beside the database before they take SQLite's write lock,
tried again within 0.1–1 ms while another worker holds it (SQLite's own busy handler
sleeps 1, 2, 5, 10 … ms between tries); what a change writes is encoded and
redacted before the lock is taken, so the lock is held only for the statements.
Database work that may wait or run long goes off the event loop: writes on one thread
per process, reads (syncs, reads of conversations, messages, the event log) on another
with its own connection, so a sync never waits behind a commit queued for the lock.
The small, uncontended cases run on the loop itself (:meth:`SharedSQLiteStore.sync`,
:meth:`SharedSQLiteStore.commit`): a sync of at most :data:`INLINE_CHANGES` changes
while the reader thread is idle (a WAL read never waits for a writer), a commit of at
most :data:`INLINE_BYTES` of text while the writer thread is idle and the writers'
lock is free at once (under it nothing else writes, so ``BEGIN IMMEDIATE`` does not
wait). Measured under ``bench.replicas``: a hop to a thread and back cost a request
~3 ms queued and ~8 ms before the loop resumed it, for ~1 ms of work. Checkpoints
(copying the WAL back into the database, with its ``fsync``) run on a third thread,
passive, every :data:`CHECKPOINT_EVERY` commits, never inside a commit: SQLite's
automatic checkpoint ran in the commit that crossed 1000 pages, holding up that
request and — behind the writers' lock — the other workers' commits for tens of ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from proxy.core.messages import Message
from proxy.state.chunks import append_chunks, read_digests, write_chunks
from proxy.state.protocol import (
    Changed,
    Commit,
    Committed,
    SideWrite,
    StateUnavailable,
    Stats,
    Synced,
)
from proxy.state.records import (
    ConversationRecord,
    GateEvent,
    StoredMessages,
    TimelineEntry,
    message_from_json,
    message_to_json,
    stored_text,
)
from proxy.state.redis_scripts import SPLICE_LOG
from proxy.state.sqlite import _SCHEMA, DIGEST_CHUNK, _blob_value
from proxy.state.store import SharedStore

__all__ = ["SharedSQLiteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SHARED_SCHEMA = """
CREATE TABLE IF NOT EXISTS conv_state(
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, ns TEXT NOT NULL, etag TEXT NOT NULL,
    ver INTEGER NOT NULL, hlen INTEGER NOT NULL DEFAULT 0, splices TEXT NOT NULL DEFAULT '',
    floor INTEGER NOT NULL DEFAULT 0, evseq INTEGER NOT NULL DEFAULT 0,
    stats_seq INTEGER NOT NULL DEFAULT -1, stats TEXT);
CREATE INDEX IF NOT EXISTS conv_state_ns ON conv_state(ns, ver);
CREATE TABLE IF NOT EXISTS namespaces(ns TEXT PRIMARY KEY, ver INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS event_log(id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
"""

SYNC_PAGE = 200
#: A passive checkpoint after this many commits of one process (see the module docstring).
CHECKPOINT_EVERY = 100
#: Seconds a writer waits for the writers' lock (as SQLite's busy timeout did).
LOCK_TIMEOUT = 10.0
#: A sync of at most this many namespace changes runs on the event loop (see the
#: module docstring); more go to the reader thread.
INLINE_CHANGES = 32
#: A commit of at most this many characters of message and blob text runs on the event
#: loop when the writers' lock is free (see the module docstring).
INLINE_BYTES = 64 * 1024
#: Digests of messages this process's commits stored, remembered (most recent) so that
#: a message committed again — a fork's shared prefix, the same tool result in many
#: conversations — is neither redacted, encoded nor written again. Message rows are
#: content-addressed and a shared store's sweep never deletes them.
STORED_DIGESTS = 16384


def _log_json(entry: dict[str, Any]) -> str:
    d = {k: v for k, v in entry.items() if k != "id"}
    return stored_text(json.dumps(d, separators=(",", ":"), default=str))


def _blob_text(body: Any) -> str:
    return body.decode("utf-8", "surrogatepass") if isinstance(body, bytes) else str(body)


@dataclass(frozen=True, slots=True)
class _Rows:
    """What a change writes besides its record, encoded and redacted (before the write
    lock is taken)."""

    messages: list[tuple[str, str | bytes | bytearray]]
    blobs: list[tuple[str, Any]]
    timeline: list[tuple[int, str]]
    events: list[str]
    log: list[str]


def _rows(
    messages: Iterable[Message],
    blobs: Iterable[tuple[str, str]],
    timeline: Iterable[dict[str, Any]],
    events: Iterable[GateEvent],
    log_entries: Iterable[dict[str, Any]],
) -> _Rows:
    return _Rows(
        [(m.digest, message_to_json(m)) for m in messages],
        [(k, _blob_value(v)) for k, v in blobs],
        [(d["seq"], TimelineEntry.dict_to_json(d)) for d in timeline],
        [e.to_json() for e in events],
        [_log_json(e) for e in log_entries],
    )


#: A commit's rows, its meta JSON and its stats JSON (see :func:`_encode`).
_Encoded = tuple[_Rows, str, str | None]


def _encode(c: Commit) -> _Encoded:
    """What ``c`` writes, encoded and redacted (before the writers' lock is taken)."""
    rows = _rows(c.messages, c.blobs, c.timeline, c.events, c.log)
    meta = ConversationRecord.meta_dict_to_json(c.meta)
    return rows, meta, json.dumps(c.stats.as_list()) if c.stats is not None else None


def _small(c: Commit) -> bool:
    """Whether ``c`` carries at most :data:`INLINE_BYTES` of message and blob text."""
    size = sum(len(v) for _, v in c.blobs)
    for m in c.messages:
        for p in m.parts:
            size += len(p.text) if p.text else 0
        if size > INLINE_BYTES:
            return False
    return size <= INLINE_BYTES


def _data_version(conn: sqlite3.Connection) -> int:
    """``PRAGMA data_version`` of ``conn``: changes whenever another connection (of any
    process, this one's writer included) commits."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def _record_of(cid: str, meta: str, st: tuple[Any, ...]) -> ConversationRecord:
    """A record from its stored meta and ``conv_state`` row (etag, ver, hlen, splices,
    floor, evseq, stats)."""
    rec = ConversationRecord.from_row(meta, "")
    rec.id = cid
    rec.etag, rec.event_seq = st[0], st[5]
    stats = Stats.of(json.loads(st[6])) if st[6] else None
    if stats is not None:
        rec.tokens, rec.window, rec.exact = stats.tokens, stats.window, stats.exact
    return rec


def _keep_since(splices: str, floor: int, hlen: int, cursor: int, full: bool) -> int:
    """How many leading digests a caller that knew the conversation at namespace version
    ``cursor`` still holds (the minimum kept by every splice after it)."""
    if full or cursor < floor:
        return 0
    keep = hlen
    for item in splices.split(";"):
        if item:
            v, k = item.split(":")
            if int(v) > cursor:
                keep = min(keep, int(k))
    return keep


class SharedSQLiteStore(SharedStore):
    """A shared store in the SQLite file ``path`` (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_timeline: int = 1000,
        max_events: int = 1000,
        max_log: int = 5000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.describe = f"sqlite at {self.path} (shared by the workers)"
        self.max_timeline = max_timeline
        self.max_events = max_events
        self.max_log = max_log
        self.clock = clock
        self._exec = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cg-sqlite-shared")
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cg-sqlite-shared-read")
        self._checkpoints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cg-sqlite-shared-checkpoint")
        self._checkpointer: sqlite3.Connection | None = None
        self._commits = 0
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._local = threading.local()
        self._lock_fd: int | None = None
        self._closed = False
        #: per thread pool, the calls submitted to it and not yet ended (see :meth:`_idle`)
        self._busy: dict[ThreadPoolExecutor, int] = {}
        #: see :data:`STORED_DIGESTS` (the loop's thread only)
        self._stored: OrderedDict[str, None] = OrderedDict()
        #: namespace -> (the cursor its last sync answered, the reader connection's
        #: ``PRAGMA data_version`` in that sync's snapshot): while that version holds, no
        #: connection committed anything since, and a sync from that cursor has nothing
        #: to read (:meth:`_sync`; the reader thread or the loop, never both at once)
        self._quiet: dict[str, tuple[int, int]] = {}

    # -- thread side

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=10.0)
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints off the commit path
        conn.executescript(_SCHEMA)
        conn.executescript(_SHARED_SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('schema', '1')")
        self._lock_fd = os.open(str(self.path) + "-writer.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._conn = conn
        self._local.conn = conn
        self._adopt()

    def _connect_reader(self) -> None:
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=10.0)
        conn.execute("PRAGMA busy_timeout=10000")
        self._quiet.clear()  # versions of another connection
        self._reader = conn
        self._local.conn = conn

    def _checkpoint(self) -> None:
        """A passive checkpoint (on the checkpoint thread, its own connection)."""
        try:
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("state: checkpoint failed (%s)", exc.__class__.__name__)

    def _committed(self) -> None:
        """Count a commit (writer thread); every :data:`CHECKPOINT_EVERY`, a checkpoint."""
        self._commits += 1
        if self._commits % CHECKPOINT_EVERY == 0 and not self._closed:
            with contextlib.suppress(RuntimeError):  # shutting down
                self._checkpoints.submit(self._checkpoint)

    @contextlib.contextmanager
    def _inline(self, conn: sqlite3.Connection | None) -> Iterator[None]:
        """Use ``conn`` (the writer's or the reader's, whose thread is idle) on the
        event loop's thread for the duration."""
        if conn is None:
            raise StateUnavailable(f"{self.describe}: not open", "unreachable")
        before = getattr(self._local, "conn", None)
        self._local.conn = conn
        try:
            yield
        except sqlite3.Error as exc:
            raise StateUnavailable(f"{self.describe}: {exc.__class__.__name__}: {exc}", "error") from None
        finally:
            self._local.conn = before

    def _try_writing(self) -> bool:
        """Take the writers' ``flock`` if it is free at once (released by the caller)."""
        fd = self._lock_fd
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the writers' ``flock`` (see the module docstring); like SQLite's busy
        timeout, give up after :data:`LOCK_TIMEOUT` seconds (``database is locked``)."""
        fd = self._lock_fd
        if fd is None:
            raise StateUnavailable(f"{self.describe}: not open", "unreachable")
        deadline = 0.0
        pause = 0.0001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                deadline = deadline or now + LOCK_TIMEOUT
                if now > deadline:
                    raise sqlite3.OperationalError("database is locked (the writers' lock)") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.001)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _adopt(self) -> None:
        """Give conversations written by the sole-process store their shared state."""
        conn = self._db()
        rows = conn.execute(
            "SELECT id, meta, digests FROM conversations WHERE id NOT IN (SELECT id FROM conv_state)"
        ).fetchall()
        if not rows:
            return
        with self._writing():
            self._adopt_rows(conn, rows)

    def _adopt_rows(self, conn: sqlite3.Connection, rows: list[Any]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for cid, meta, digests in rows:
                rec = ConversationRecord.from_row(meta, digests)
                if digests:  # the pre-chunk format: move the digests into chunks
                    write_chunks(conn, cid, 0, (), rec.digests)
                    conn.execute("UPDATE conversations SET digests = '' WHERE id = ?", (cid,))
                else:
                    rec.digests = read_digests(conn, cid)
                conn.execute(
                    "INSERT OR IGNORE INTO conv_state(id, tenant, ns, etag, ver, hlen, evseq) VALUES(?, ?, ?, ?, 0, ?, ?)",
                    (cid, rec.tenant, rec.namespace, "adopted-" + secrets.token_hex(8), len(rec.digests), rec.event_seq),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (the writer's or the reader's)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._conn is None:
            raise StateUnavailable(f"{self.describe}: not open", "unreachable")
        return conn

    def _record(self, cid: str) -> tuple[ConversationRecord, tuple[Any, ...]] | None:
        conn = self._db()
        row = conn.execute("SELECT meta FROM conversations WHERE id = ?", (cid,)).fetchone()
        st = conn.execute(
            "SELECT etag, ver, hlen, splices, floor, evseq, stats FROM conv_state WHERE id = ?", (cid,)
        ).fetchone()
        if row is None or st is None:
            return None
        return _record_of(cid, row[0], st), st

    def _bodies(self, digests: Iterable[str]) -> dict[str, str | bytes]:
        """The stored JSON of messages by digest (those found)."""
        wanted = list(dict.fromkeys(digests))
        out: dict[str, str | bytes] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            q = f"SELECT digest, body FROM messages WHERE digest IN ({','.join('?' * len(chunk))})"
            for d, body in self._db().execute(q, chunk):
                out[d] = body
        return out

    def _messages(self, digests: Iterable[str]) -> dict[str, Message]:
        return {d: message_from_json(_blob_text(b)) for d, b in self._bodies(digests).items()}

    def _sync(
        self, ns: str, cursor: int, reload: list[str], bodies: int, known: Mapping[str, str], most: int | None = None
    ) -> Synced | None:
        """The changes of ``ns`` since ``cursor``; ``None`` when there are more than
        ``most`` (then nothing was read but the namespace's version)."""
        conn = self._db()
        quiet = self._quiet.get(ns)
        if not reload and quiet == (cursor, _data_version(conn)):
            return Synced(cursor, ())  # nothing committed since the sync that answered ``cursor``
        conn.execute("BEGIN")
        try:
            seen = _data_version(conn)  # the snapshot this transaction reads
            row = conn.execute("SELECT ver FROM namespaces WHERE ns = ?", (ns,)).fetchone()
            ver = row[0] if row else 0
            if most is not None and ver - cursor > most:
                return None
            self._quiet[ns] = (ver, seen)
            found: list[tuple[ConversationRecord, tuple[Any, ...], bool]] = []
            after = cursor
            while ver > after:  # a page of changed conversations, their records in the same query
                rows = conn.execute(
                    "SELECT s.id, s.etag, s.ver, s.hlen, s.splices, s.floor, s.evseq, s.stats, c.meta"
                    " FROM conv_state s JOIN conversations c ON c.id = s.id"
                    " WHERE s.ns = ? AND s.ver > ? AND s.ver <= ? ORDER BY s.ver LIMIT ?",
                    (ns, after, ver, SYNC_PAGE),
                ).fetchall()
                for r in rows:
                    if known.get(r[0]) != r[1]:
                        found.append((_record_of(r[0], r[8], r[1:8]), r[1:8], False))
                if len(rows) < SYNC_PAGE:
                    break
                after = rows[-1][2]
            for cid in reload:
                got = self._record(cid)
                if got is not None:
                    found.append((got[0], got[1], True))
            return Synced(ver, self._changes(found, cursor, bodies))
        finally:
            conn.execute("COMMIT")

    def _changes(
        self, found: list[tuple[ConversationRecord, tuple[Any, ...], bool]], cursor: int, bodies: int
    ) -> tuple[Changed, ...]:
        """What changed of each conversation ``found`` since ``cursor``: the tail of its
        history and, for tails of at most ``bodies`` digests, their messages (read in one
        query for all)."""
        tails: list[tuple[ConversationRecord, int, tuple[str, ...], int]] = []
        wanted: list[str] = []
        for rec, st, full in found:
            _, cver, hlen, splices, floor, _, _ = st
            keep = _keep_since(splices, floor, hlen, cursor, full)
            tail = read_digests(self._db(), rec.id, keep // DIGEST_CHUNK)[keep % DIGEST_CHUNK :] if keep < hlen else ()
            tails.append((rec, keep, tail, cver))
            if tail and len(tail) <= bodies:
                wanted.extend(tail)
        got = self._bodies(wanted) if wanted else {}
        out = []
        for rec, keep, tail, cver in tails:
            msgs: Mapping[str, Message] | None = {}
            if tail and len(tail) <= bodies:
                mine = {d: got[d] for d in tail if d in got}
                msgs = StoredMessages(mine) if len(mine) == len(set(tail)) else None
            elif tail:
                msgs = None
            out.append(Changed(rec, keep, tail, msgs, cver))
        return tuple(out)

    def _commit(self, c: Commit, encoded: _Encoded | None = None) -> Committed:
        rows, meta, new_stats = encoded or _encode(c)
        with self._writing():
            res = self._commit_locked(c, rows, meta, new_stats)
        if res.ok:
            self._committed()
        return res

    def _commit_locked(self, c: Commit, rows: _Rows, meta: str, new_stats: str | None) -> Committed:
        conn = self._db()
        cid = c.conversation_id
        conn.execute("BEGIN IMMEDIATE")
        try:
            st = conn.execute(
                "SELECT etag, hlen, splices, floor, evseq, stats_seq, stats FROM conv_state WHERE id = ?", (cid,)
            ).fetchone()
            if c.expect is None:
                if st is not None:
                    conn.execute("ROLLBACK")
                    return Committed(False, "exists")
                hlen, splices, floor, evseq, stats_seq, stats = 0, "", 0, 0, -1, None
            elif st is None or st[0] != c.expect or c.keep > st[1]:
                conn.execute("ROLLBACK")
                return Committed(False, "conflict")
            else:
                _, hlen, splices, floor, evseq, stats_seq, stats = st
            got = conn.execute("UPDATE namespaces SET ver = ver + 1 WHERE ns = ? RETURNING ver", (c.namespace,)).fetchall()
            if got:
                ver = got[0][0]
            else:
                ver = 1
                conn.execute("INSERT INTO namespaces(ns, ver) VALUES(?, 1)", (c.namespace,))
            before = ver - 1
            if c.keep < hlen or c.append:
                if st is not None and c.keep == hlen:  # appended to a stored history
                    append_chunks(conn, cid, hlen, c.append)
                else:
                    first = c.keep // DIGEST_CHUNK
                    kept = read_digests(conn, cid, first)[: c.keep % DIGEST_CHUNK] if c.keep % DIGEST_CHUNK else ()
                    write_chunks(conn, cid, c.keep, kept, c.append)
                entries = [e for e in splices.split(";") if e] + [f"{ver}:{c.keep}"]
                while len(entries) > SPLICE_LOG:
                    floor = int(entries.pop(0).split(":")[0])
                splices = "".join(e + ";" for e in entries)
            hlen = c.keep + len(c.append)
            # rows that exist are updated in place (a replace deletes and inserts the row
            # and its index entries)
            if (
                st is None
                or not conn.execute(
                    "UPDATE conversations SET last_seen = ?, meta = ?, digests = '' WHERE id = ?", (c.last_seen, meta, cid)
                ).rowcount
            ):
                conn.execute(
                    "INSERT OR REPLACE INTO conversations(id, last_seen, meta, digests) VALUES(?, ?, ?, '')",
                    (cid, c.last_seen, meta),
                )
            evseq = self._parts(cid, rows, evseq)
            if c.stats is not None and c.stats.seq >= stats_seq:
                stats_seq, stats = c.stats.seq, new_stats
            state = (c.tenant, c.namespace, c.etag, ver, hlen, splices, floor, evseq, stats_seq, stats, cid)
            if st is not None:
                conn.execute(
                    "UPDATE conv_state SET tenant = ?, ns = ?, etag = ?, ver = ?, hlen = ?, splices = ?, floor = ?,"
                    " evseq = ?, stats_seq = ?, stats = ? WHERE id = ?",
                    state,
                )
            else:
                conn.execute(
                    "INSERT INTO conv_state(tenant, ns, etag, ver, hlen, splices, floor, evseq, stats_seq, stats, id)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    state,
                )
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return Committed(True, "", before, ver)

    def _parts(self, cid: str, rows: _Rows, evseq: int) -> int:
        """Write a change's messages, blobs, timeline entries, events and log entries
        (each trim only once there is something beyond its bound); returns the
        conversation's event counter after them."""
        conn = self._db()
        if rows.messages:
            conn.executemany("INSERT OR IGNORE INTO messages(digest, body) VALUES(?, ?)", rows.messages)
        if rows.blobs:
            conn.executemany("INSERT OR IGNORE INTO blobs(key, body) VALUES(?, ?)", rows.blobs)
        for seq, body in rows.timeline:
            conn.execute("INSERT OR REPLACE INTO timeline(conv, seq, body) VALUES(?, ?, ?)", (cid, seq, body))
            if seq > self.max_timeline:
                conn.execute("DELETE FROM timeline WHERE conv = ? AND seq <= ?", (cid, seq - self.max_timeline))
        for body in rows.events:
            evseq += 1
            conn.execute("INSERT OR REPLACE INTO events(conv, seq, body) VALUES(?, ?, ?)", (cid, evseq, body))
            if evseq > self.max_events:
                conn.execute("DELETE FROM events WHERE conv = ? AND seq <= ?", (cid, evseq - self.max_events))
        for body in rows.log:
            cur = conn.execute("INSERT INTO event_log(body) VALUES(?)", (body,))
            last = cur.lastrowid or 0
            if last > self.max_log:
                conn.execute("DELETE FROM event_log WHERE id <= ?", (last - self.max_log,))
        return evseq

    def _side(self, writes: list[SideWrite]) -> None:
        encoded = [
            (w, _rows(w.messages, (), w.timeline, w.events, w.log), json.dumps(w.stats.as_list()) if w.stats else None)
            for w in writes
        ]
        with self._writing():
            self._side_locked(encoded)
        self._committed()

    def _side_locked(self, encoded: list[tuple[SideWrite, _Rows, str | None]]) -> None:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for w, rows, stats in encoded:
                st = None
                if w.conversation_id is not None:
                    st = conn.execute(
                        "SELECT evseq, stats_seq FROM conv_state WHERE id = ?", (w.conversation_id,)
                    ).fetchone()
                if st is None:  # gone (or no conversation): only the store-wide log
                    self._parts("", _Rows([], [], [], [], rows.log), 0)
                    continue
                cid = w.conversation_id
                assert cid is not None
                evseq = self._parts(cid, rows, st[0])
                if evseq != st[0]:
                    conn.execute("UPDATE conv_state SET evseq = ? WHERE id = ?", (evseq, cid))
                if w.stats is not None and w.stats.seq >= st[1]:
                    conn.execute(
                        "UPDATE conv_state SET stats_seq = ?, stats = ? WHERE id = ?", (w.stats.seq, stats, cid)
                    )
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _read(self, cid: str, max_timeline: int) -> ConversationRecord | None:
        got = self._record(cid)
        if got is None:
            return None
        rec, _ = got
        rec.digests = read_digests(self._db(), cid)
        conn = self._db()
        rows = conn.execute(
            "SELECT body FROM timeline WHERE conv = ? ORDER BY seq DESC LIMIT ?", (cid, max_timeline)
        ).fetchall()
        rec.timeline = [TimelineEntry.from_json(b) for (b,) in reversed(rows)]
        events = []
        for seq, body in conn.execute("SELECT seq, body FROM events WHERE conv = ? ORDER BY seq", (cid,)):
            e = GateEvent.from_json(body)
            e.seq = seq
            events.append(e)
        rec.events = events
        return rec

    def _recent(self, tenant: str | None, limit: int) -> tuple[int, list[ConversationRecord]]:
        conn = self._db()
        where, args = ("WHERE s.tenant = ?", [tenant]) if tenant is not None else ("", [])
        (count,) = conn.execute(f"SELECT COUNT(*) FROM conv_state s {where}", args).fetchone()
        out = []
        for cid, meta, etag, evseq, stats in conn.execute(
            "SELECT c.id, c.meta, s.etag, s.evseq, s.stats FROM conversations c JOIN conv_state s ON s.id = c.id "
            f"{where} ORDER BY c.last_seen DESC LIMIT ?",
            [*args, limit],
        ):
            rec = ConversationRecord.from_row(meta, "")
            rec.id, rec.etag, rec.event_seq = cid, etag, evseq
            st = Stats.of(json.loads(stats)) if stats else None
            if st is not None:
                rec.tokens, rec.window, rec.exact = st.tokens, st.window, st.exact
            out.append(rec)
        return count, out

    def _log(self, since: int, limit: int, filters: dict[str, str | None]) -> list[dict[str, Any]]:
        out = []
        for i, body in self._db().execute("SELECT id, body FROM event_log WHERE id > ? ORDER BY id", (since,)):
            e = json.loads(body)
            if all(v is None or e.get(k) == v for k, v in filters.items()):
                out.append({"id": i, **e})
        return out[-limit:]

    def _sweep(self, cutoff: float, max_conversations: int) -> int:
        conn = self._db()
        gone = [cid for (cid,) in conn.execute("SELECT id FROM conversations WHERE last_seen < ?", (cutoff,))]
        (count,) = conn.execute("SELECT COUNT(*) FROM conversations").fetchone()
        surplus = count - len(gone) - max_conversations
        if surplus > 0:
            gone += [
                cid
                for (cid,) in conn.execute(
                    "SELECT id FROM conversations WHERE last_seen >= ? ORDER BY last_seen LIMIT ?", (cutoff, surplus)
                )
            ]
        if not gone:
            return 0
        ids = [(c,) for c in gone]
        with self._writing():
            self._delete(conn, ids)
        return len(gone)

    @staticmethod
    def _delete(conn: sqlite3.Connection, ids: list[tuple[str]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for table, col in (
                ("conversations", "id"), ("conv_state", "id"), ("timeline", "conv"), ("events", "conv"), ("digest_chunks", "conv"),
            ):  # fmt: skip
                conn.executemany(f"DELETE FROM {table} WHERE {col} = ?", ids)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    # -- loop side

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._on(self._exec, fn, *args)

    async def _read_call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._on(self._reads, fn, *args)

    async def _on(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StateUnavailable(f"{self.describe}: closed", "unreachable")
        busy = self._busy
        busy[pool] = busy.get(pool, 0) + 1  # the thread's connection is in use until it ends
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        except sqlite3.Error as exc:
            raise StateUnavailable(f"{self.describe}: {exc.__class__.__name__}: {exc}", "error") from None
        finally:
            busy[pool] -= 1

    def _idle(self, pool: ThreadPoolExecutor) -> bool:
        """Whether nothing runs or waits on ``pool`` (its connection is free for the
        loop: only the loop's thread submits work, so this holds until it awaits)."""
        return not self._closed and self._busy.get(pool, 0) == 0

    def _snapshot(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn`` in one read transaction: its SELECTs see one committed state (without
        it a record's meta and its etag could come from two different commits)."""
        conn = self._db()
        conn.execute("BEGIN")
        try:
            return fn(*args)
        finally:
            conn.execute("COMMIT")

    async def open(self) -> None:
        await self._call(self._connect)
        await self._read_call(self._connect_reader)

    async def close(self) -> None:
        if self._closed:
            return

        def _final_read() -> None:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

        def _final() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

        def _final_checkpoint() -> None:
            self._checkpoint()  # what this process wrote, into the database file
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._reads, _final_read)
        await loop.run_in_executor(self._exec, _final)
        self._closed = True
        await loop.run_in_executor(self._checkpoints, _final_checkpoint)
        self._reads.shutdown(wait=True)
        self._exec.shutdown(wait=True)
        self._checkpoints.shutdown(wait=True)

    async def ping(self) -> None:
        await self._call(lambda: self._db().execute("SELECT 1").fetchone())

    async def sync(
        self,
        tenant: str,
        namespace: str,
        cursor: int,
        *,
        reload: Iterable[str] = (),
        bodies: int = 256,
        known: Mapping[str, str] | None = None,
    ) -> Synced:
        # ``known`` is read as the sync runs (the caller's commits that end meanwhile count)
        wanted = list(reload)
        held: Mapping[str, str] = known if known is not None else {}  # looked up as the sync runs
        if len(wanted) <= INLINE_CHANGES and cursor > 0 and self._idle(self._reads):
            with self._inline(self._reader):
                got = self._sync(namespace, cursor, wanted, bodies, held, INLINE_CHANGES - len(wanted))
            if got is not None:
                return got
        synced = await self._read_call(self._sync, namespace, cursor, wanted, bodies, held)
        assert synced is not None
        return synced

    async def commit(self, change: Commit) -> Committed:
        stored = self._stored
        if any(m.digest in stored for m in change.messages):
            change = replace(change, messages=tuple(m for m in change.messages if m.digest not in stored))
        res = await self._commit_now(change)
        if res.ok and change.messages:
            for m in change.messages:
                stored[m.digest] = None
                stored.move_to_end(m.digest)
            while len(stored) > STORED_DIGESTS:
                stored.popitem(last=False)
        return res

    async def _commit_now(self, change: Commit) -> Committed:
        if not _small(change) or not self._idle(self._exec):
            return await self._call(self._commit, change)
        encoded = _encode(change)
        if not self._try_writing():  # another worker is writing: wait for it on the thread
            return await self._call(self._commit, change, encoded)
        try:
            with self._inline(self._conn):
                res = self._commit_locked(change, *encoded)
        finally:
            assert self._lock_fd is not None
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if res.ok:
            self._committed()
        return res

    async def side(self, writes: Iterable[SideWrite]) -> None:
        batch = list(writes)
        if batch:
            await self._call(self._side, batch)

    async def read_conversation(self, conversation_id: str, max_timeline: int = 1000) -> ConversationRecord | None:
        return await self._read_call(self._snapshot, self._read, conversation_id, max_timeline)

    async def recent_conversations(
        self, *, tenant: str | None = None, limit: int = 200
    ) -> tuple[int, list[ConversationRecord]]:
        return await self._read_call(self._snapshot, self._recent, tenant, limit)

    async def conversation_messages(self, rec: ConversationRecord, digests: Iterable[str]) -> dict[str, Message]:
        return await self._read_call(self._messages, list(digests))

    async def load_messages(self, digests: Iterable[str]) -> dict[str, Message]:
        return await self._read_call(self._messages, list(digests))

    async def load_blobs(self, keys: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(keys))

        def _load() -> dict[str, str]:
            out = {}
            for k in wanted:
                row = self._db().execute("SELECT body FROM blobs WHERE key = ?", (k,)).fetchone()
                if row is not None:
                    out[k] = _blob_text(row[0])
            return out

        return await self._read_call(_load)

    async def log(
        self,
        *,
        since: int = 0,
        limit: int = 100,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read_call(self._log, since, limit, {"conversation": conversation, "action": action, "kind": kind})

    async def sweep(self, now: float, ttl_seconds: float, max_conversations: int) -> int:
        return await self._call(self._sweep, now - ttl_seconds, max_conversations)
