"""SQLite as a shared store: the workers of ``serve --workers N`` on one machine.

The same file and tables as :class:`~proxy.state.sqlite.SQLiteStore` (a file written by
one mode is read by the other), plus what the shared protocol
(:mod:`proxy.state.protocol`) needs: per conversation its etag, namespace, the
namespace version of its last change, a short splice log, its event counter and token
stats (``conv_state``); per namespace its version (``namespaces``); and the store-wide
event log (``event_log``). WAL mode lets the processes read while one writes; commits
go in ``BEGIN IMMEDIATE`` transactions (the compare-and-set holds the write lock), so a
commit is durable and visible to every worker when the call returns. The commits a
process makes in one loop step — or while its previous group waits for the lock or
runs — share one transaction (the group commit, :mod:`proxy.state.groups`),
each with its own compare-and-set and outcome; an error fails the whole group. Writers queue on an
``flock`` of a lock file beside the database before they take SQLite's write lock,
tried again within 0.1–1 ms while another worker holds it (SQLite's own busy handler
sleeps 1, 2, 5, 10 … ms between tries); what a change writes is encoded and
redacted before the lock is taken, so the lock is held only for the statements.
Database work that may wait or run long goes off the event loop: writes on one thread
per process, reads (syncs, reads of conversations, messages, the event log) on another
with its own connection, so a sync never waits behind a commit queued for the lock.
The small, uncontended cases run on the loop itself (:meth:`SharedSQLiteStore.sync`,
:meth:`SharedSQLiteStore.commit`): a sync of at most :data:`INLINE_CHANGES` changes
while the reader thread is idle (a WAL read never waits for a writer), a group of at
most :data:`INLINE_BYTES` of text while the writer thread is idle and the writers'
lock is free at once (under it nothing else writes, so ``BEGIN IMMEDIATE`` does not
wait). Measured under ``bench.replicas``: a hop to a thread and back cost a request
~3 ms queued and ~8 ms before the loop resumed it, for ~1 ms of work. Checkpoints
(copying the WAL back into the database, with its ``fsync``) run on a third thread,
passive, every :data:`CHECKPOINT_EVERY` commits, never inside a commit: SQLite's
automatic checkpoint ran in the commit that crossed 1000 pages, holding up that
request and — behind the writers' lock — the other workers' commits for tens of ms.
The statements are in :mod:`proxy.state.sqlite_shared_sql`, the rows' encoding (no I/O)
in :mod:`proxy.state.sqlite_shared_rows`; this module holds the threads, connections and
locks, and the loop side.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from proxy.core.messages import Message
from proxy.state import sqlite_shared_sql as sql
from proxy.state.groups import CommitGroups
from proxy.state.protocol import Commit, Committed, SideWrite, StateUnavailable, Synced
from proxy.state.records import ConversationRecord
from proxy.state.sqlite_rows import SCHEMA
from proxy.state.sqlite_shared_rows import Encoded, Rows, blob_text, encode, rows_of
from proxy.state.store import SharedStore

__all__ = ["SharedSQLiteStore"]

log = logging.getLogger(__name__)
T = TypeVar("T")

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


def _small(changes: Iterable[Commit]) -> bool:
    """Whether ``changes`` carry at most :data:`INLINE_BYTES` of message and blob text."""
    size = 0
    for c in changes:
        size += sum(len(v) for _, v in c.blobs)
        for m in c.messages:
            for p in m.parts:
                size += len(p.text) if p.text else 0
            if size > INLINE_BYTES:
                return False
    return size <= INLINE_BYTES


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
        #: commits made together share a transaction (:mod:`proxy.state.groups`)
        self._groups = CommitGroups(self._commit_now)
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
        conn.executescript(SCHEMA)
        conn.executescript(sql.SHARED_SCHEMA)
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
            sql.adopt_rows(conn, rows)

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (the writer's or the reader's)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._conn is None:
            raise StateUnavailable(f"{self.describe}: not open", "unreachable")
        return conn

    def _bounds(self) -> sql.Bounds:
        return sql.Bounds(self.max_timeline, self.max_events, self.max_log)

    def _messages(self, digests: Iterable[str]) -> dict[str, Message]:
        return sql.messages(self._db(), digests)

    def _sync(
        self, ns: str, cursor: int, reload: list[str], bodies: int, known: Mapping[str, str], most: int | None = None
    ) -> Synced | None:
        """The changes of ``ns`` since ``cursor`` on this thread's connection (see
        :func:`~proxy.state.sqlite_shared_sql.sync`)."""
        return sql.sync(self._db(), self._quiet, ns, cursor, reload, bodies, known, most)

    def _commit(self, c: Commit, encoded: Encoded | None = None) -> Committed:
        """One commit on this thread's connection (see :meth:`_commit_many`)."""
        return self._commit_many([c], None if encoded is None else [encoded])[0]

    def _commit_many(self, changes: list[Commit], encoded: list[Encoded] | None = None) -> list[Committed]:
        """``changes`` in one transaction, waiting for the writers' lock."""
        rows = encoded if encoded is not None else [encode(c) for c in changes]
        with self._writing():
            results = sql.commit_group(self._db(), list(zip(changes, rows, strict=True)), self._bounds())
        if any(r.ok for r in results):
            self._committed()
        return results

    def _side(self, writes: list[SideWrite]) -> None:
        encoded = [(w, rows_of(w), json.dumps(w.stats.as_list()) if w.stats else None) for w in writes]
        with self._writing():
            self._side_locked(encoded)
        self._committed()

    def _side_locked(self, encoded: list[tuple[SideWrite, Rows, str | None]]) -> None:
        sql.side_locked(self._db(), encoded, self._bounds())

    def _read(self, cid: str, max_timeline: int) -> ConversationRecord | None:
        return sql.read(self._db(), cid, max_timeline)

    def _recent(self, tenant: str | None, limit: int) -> tuple[int, list[ConversationRecord]]:
        return sql.recent(self._db(), tenant, limit)

    def _log(self, since: int, limit: int, filters: dict[str, str | None]) -> list[dict[str, Any]]:
        return sql.log_entries(self._db(), since, limit, filters)

    def _sweep(self, cutoff: float, max_conversations: int) -> int:
        conn = self._db()
        gone = sql.expired(conn, cutoff, max_conversations)
        if not gone:
            return 0
        ids = [(c,) for c in gone]
        with self._writing():
            sql.delete(conn, ids)
        return len(gone)

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
        if self._closed:
            raise StateUnavailable(f"{self.describe}: closed", "unreachable")
        res = await self._groups.commit(change)
        if res.ok and change.messages:
            for m in change.messages:
                stored[m.digest] = None
                stored.move_to_end(m.digest)
            while len(stored) > STORED_DIGESTS:
                stored.popitem(last=False)
        return res

    async def _commit_now(self, changes: list[Commit]) -> list[Committed]:
        """A group of commits in one transaction: on the loop when small and the lock is
        free at once (see the module docstring), else on the writer thread."""
        if not _small(changes) or not self._idle(self._exec):
            return await self._call(self._commit_many, changes)
        encoded = [encode(c) for c in changes]
        if not self._try_writing():  # another worker is writing: wait for it on the thread
            return await self._call(self._commit_many, changes, encoded)
        try:
            with self._inline(self._conn):
                results = sql.commit_group(self._db(), list(zip(changes, encoded, strict=True)), self._bounds())
        finally:
            assert self._lock_fd is not None
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if any(r.ok for r in results):
            self._committed()
        return results

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
                    out[k] = blob_text(row[0])
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

