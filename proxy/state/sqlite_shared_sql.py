"""The statements of the shared SQLite store (:mod:`proxy.state.sqlite_shared`), as
functions of a connection: the schema it adds to :class:`~proxy.state.sqlite.SQLiteStore`'s,
a commit's compare-and-set transaction, a sync's read of a namespace's changes, side
writes, reads, and a sweep's deletes. Which connection, which thread, and the writers'
lock are the store's concern; a function here that writes is called under that lock."""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from proxy.core.messages import Message
from proxy.state.chunks import append_chunks, read_digests, write_chunks
from proxy.state.protocol import Changed, Commit, Committed, SideWrite, Stats, Synced
from proxy.state.records import (
    ConversationRecord,
    GateEvent,
    StoredMessages,
    TimelineEntry,
    message_from_json,
)
from proxy.state.redis_scripts import SPLICE_LOG
from proxy.state.sqlite_rows import DIGEST_CHUNK
from proxy.state.sqlite_shared_rows import Encoded, Rows, blob_text, keep_since, record_of

__all__ = [
    "SHARED_SCHEMA",
    "Bounds",
    "adopt_rows",
    "commit_group",
    "data_version",
    "delete",
    "expired",
    "log_entries",
    "messages",
    "read",
    "recent",
    "record",
    "side_locked",
    "sync",
]

SHARED_SCHEMA = """
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


class Bounds(NamedTuple):
    """What is kept: timeline entries and events per conversation, store-wide log entries."""

    timeline: int
    events: int
    log: int


def data_version(conn: sqlite3.Connection) -> int:
    """``PRAGMA data_version`` of ``conn``: changes whenever another connection (of any
    process, this one's writer included) commits."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def adopt_rows(conn: sqlite3.Connection, rows: list[Any]) -> None:
    """Give conversations written by the sole-process store (``rows``: id, meta,
    digests) their shared state."""
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


def record(conn: sqlite3.Connection, cid: str) -> tuple[ConversationRecord, tuple[Any, ...]] | None:
    """``cid``'s record and ``conv_state`` row (etag, ver, hlen, splices, floor, evseq, stats)."""
    row = conn.execute("SELECT meta FROM conversations WHERE id = ?", (cid,)).fetchone()
    st = conn.execute(
        "SELECT etag, ver, hlen, splices, floor, evseq, stats FROM conv_state WHERE id = ?", (cid,)
    ).fetchone()
    if row is None or st is None:
        return None
    return record_of(cid, row[0], st), st


def _bodies(conn: sqlite3.Connection, digests: Iterable[str]) -> dict[str, str | bytes]:
    """The stored JSON of messages by digest (those found)."""
    wanted = list(dict.fromkeys(digests))
    out: dict[str, str | bytes] = {}
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        q = f"SELECT digest, body FROM messages WHERE digest IN ({','.join('?' * len(chunk))})"
        for d, body in conn.execute(q, chunk):
            out[d] = body
    return out


def messages(conn: sqlite3.Connection, digests: Iterable[str]) -> dict[str, Message]:
    """The stored messages by digest (those found)."""
    return {d: message_from_json(blob_text(b)) for d, b in _bodies(conn, digests).items()}


def sync(
    conn: sqlite3.Connection,
    quiet: dict[str, tuple[int, int]],
    ns: str,
    cursor: int,
    reload: list[str],
    bodies: int,
    known: Mapping[str, str],
    most: int | None = None,
) -> Synced | None:
    """The changes of ``ns`` since ``cursor``; ``None`` when there are more than
    ``most`` (then nothing was read but the namespace's version). ``quiet``: namespace
    -> (the cursor its last sync on ``conn`` answered, ``conn``'s ``PRAGMA
    data_version`` in that sync's snapshot) — while that version holds, nothing was
    committed since, and a sync from that cursor reads nothing."""
    q = quiet.get(ns)
    if not reload and q == (cursor, data_version(conn)):
        return Synced(cursor, ())  # nothing committed since the sync that answered ``cursor``
    conn.execute("BEGIN")
    try:
        seen = data_version(conn)  # the snapshot this transaction reads
        row = conn.execute("SELECT ver FROM namespaces WHERE ns = ?", (ns,)).fetchone()
        ver = row[0] if row else 0
        if most is not None and ver - cursor > most:
            return None
        quiet[ns] = (ver, seen)
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
                    found.append((record_of(r[0], r[8], r[1:8]), r[1:8], False))
            if len(rows) < SYNC_PAGE:
                break
            after = rows[-1][2]
        for cid in reload:
            got = record(conn, cid)
            if got is not None:
                found.append((got[0], got[1], True))
        return Synced(ver, _changes(conn, found, cursor, bodies))
    finally:
        conn.execute("COMMIT")


def _changes(
    conn: sqlite3.Connection, found: list[tuple[ConversationRecord, tuple[Any, ...], bool]], cursor: int, bodies: int
) -> tuple[Changed, ...]:
    """What changed of each conversation ``found`` since ``cursor``: the tail of its
    history and, for tails of at most ``bodies`` digests, their messages (read in one
    query for all)."""
    tails: list[tuple[ConversationRecord, int, tuple[str, ...], int]] = []
    wanted: list[str] = []
    for rec, st, full in found:
        _, cver, hlen, splices, floor, _, _ = st
        keep = keep_since(splices, floor, hlen, cursor, full)
        tail = read_digests(conn, rec.id, keep // DIGEST_CHUNK)[keep % DIGEST_CHUNK :] if keep < hlen else ()
        tails.append((rec, keep, tail, cver))
        if tail and len(tail) <= bodies:
            wanted.extend(tail)
    got = _bodies(conn, wanted) if wanted else {}
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


def commit_group(conn: sqlite3.Connection, changes: list[tuple[Commit, Encoded]], bounds: Bounds) -> list[Committed]:
    """Several commits in one ``BEGIN IMMEDIATE`` transaction (under the writers' lock),
    in order, each its own compare-and-set: a refused one writes nothing and the others
    go on; an error rolls back them all. Durable and visible to every process when this
    returns — not before, so no caller may take one as accepted earlier."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        out = [_commit_one(conn, c, *encoded, bounds) for c, encoded in changes]
        conn.execute("COMMIT" if any(r.ok for r in out) else "ROLLBACK")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return out


def _commit_one(
    conn: sqlite3.Connection, c: Commit, rows: Rows, meta: str, new_stats: str | None, bounds: Bounds
) -> Committed:
    """``c``'s compare-and-set inside the open transaction: refused (nothing written)
    unless ``c.expect`` is the stored etag (or ``None`` and nothing is stored)."""
    cid = c.conversation_id
    st = conn.execute(
        "SELECT etag, hlen, splices, floor, evseq, stats_seq, stats FROM conv_state WHERE id = ?", (cid,)
    ).fetchone()
    if c.expect is None:
        if st is not None:
            return Committed(False, "exists")
        hlen, splices, floor, evseq, stats_seq, stats = 0, "", 0, 0, -1, None
    elif st is None or st[0] != c.expect or c.keep > st[1]:
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
    evseq = _parts(conn, cid, rows, evseq, bounds)
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
    return Committed(True, "", before, ver)


def _parts(conn: sqlite3.Connection, cid: str, rows: Rows, evseq: int, bounds: Bounds) -> int:
    """Write a change's messages, blobs, timeline entries, events and log entries
    (each trim only once there is something beyond its bound); returns the
    conversation's event counter after them."""
    if rows.messages:
        conn.executemany("INSERT OR IGNORE INTO messages(digest, body) VALUES(?, ?)", rows.messages)
    if rows.blobs:
        conn.executemany("INSERT OR IGNORE INTO blobs(key, body) VALUES(?, ?)", rows.blobs)
    for seq, body in rows.timeline:
        conn.execute("INSERT OR REPLACE INTO timeline(conv, seq, body) VALUES(?, ?, ?)", (cid, seq, body))
        if seq > bounds.timeline:
            conn.execute("DELETE FROM timeline WHERE conv = ? AND seq <= ?", (cid, seq - bounds.timeline))
    for body in rows.events:
        evseq += 1
        conn.execute("INSERT OR REPLACE INTO events(conv, seq, body) VALUES(?, ?, ?)", (cid, evseq, body))
        if evseq > bounds.events:
            conn.execute("DELETE FROM events WHERE conv = ? AND seq <= ?", (cid, evseq - bounds.events))
    for body in rows.log:
        cur = conn.execute("INSERT INTO event_log(body) VALUES(?)", (body,))
        last = cur.lastrowid or 0
        if last > bounds.log:
            conn.execute("DELETE FROM event_log WHERE id <= ?", (last - bounds.log,))
    return evseq


def side_locked(conn: sqlite3.Connection, encoded: list[tuple[SideWrite, Rows, str | None]], bounds: Bounds) -> None:
    """Side writes in one transaction (under the writers' lock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for w, rows, stats in encoded:
            st = None
            if w.conversation_id is not None:
                st = conn.execute(
                    "SELECT evseq, stats_seq FROM conv_state WHERE id = ?", (w.conversation_id,)
                ).fetchone()
            if st is None:  # gone (or no conversation): only the store-wide log
                _parts(conn, "", Rows([], [], [], [], rows.log), 0, bounds)
                continue
            cid = w.conversation_id
            assert cid is not None
            evseq = _parts(conn, cid, rows, st[0], bounds)
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


def read(conn: sqlite3.Connection, cid: str, max_timeline: int) -> ConversationRecord | None:
    """``cid``'s record with its history, last ``max_timeline`` timeline entries and events."""
    got = record(conn, cid)
    if got is None:
        return None
    rec, _ = got
    rec.digests = read_digests(conn, cid)
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


def recent(conn: sqlite3.Connection, tenant: str | None, limit: int) -> tuple[int, list[ConversationRecord]]:
    """How many conversations (of ``tenant``), and the ``limit`` last seen."""
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


def log_entries(conn: sqlite3.Connection, since: int, limit: int, filters: dict[str, str | None]) -> list[dict[str, Any]]:
    """The last ``limit`` store-wide log entries after ``since`` that match ``filters``."""
    out = []
    for i, body in conn.execute("SELECT id, body FROM event_log WHERE id > ? ORDER BY id", (since,)):
        e = json.loads(body)
        if all(v is None or e.get(k) == v for k, v in filters.items()):
            out.append({"id": i, **e})
    return out[-limit:]


def expired(conn: sqlite3.Connection, cutoff: float, max_conversations: int) -> list[str]:
    """The conversations a sweep deletes: those last seen before ``cutoff``, then the
    least recently seen beyond ``max_conversations``."""
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
    return gone


def delete(conn: sqlite3.Connection, ids: list[tuple[str]]) -> None:
    """Delete the conversations ``ids`` (under the writers' lock); their messages and
    blobs stay (content-addressed, shared between conversations)."""
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
