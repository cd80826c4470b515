"""The tables of the SQLite stores and how a row is bound and read back, apart from the
sole store's threads and batching (:mod:`proxy.state.sqlite`): the schema (which the
shared SQLite store, :mod:`proxy.state.sqlite_shared`, creates too), a history's digests
in rows of :data:`DIGEST_CHUNK`, a text as SQLite binds it, a long message row written
into its blob a slice at a time (the counterpart of :mod:`proxy.state.longrows`, which
reads it back so), and a pending message as a committed read returns it. No store
state."""

from __future__ import annotations

import sqlite3
from typing import TypeGuard

from proxy.core.messages import Message
from proxy.state.longrows import LONG_ROW, message_from_long_row
from proxy.state.records import message_to_json, stored_text

__all__ = [
    "BLOB_SLICE",
    "DIGEST_CHUNK",
    "SCHEMA",
    "SCHEMA_VERSION",
    "as_committed",
    "blob_value",
    "chunk_count",
    "insert_streamed",
    "streamed",
]

SCHEMA_VERSION = "1"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conversations(
    id TEXT PRIMARY KEY, last_seen REAL NOT NULL, meta TEXT NOT NULL, digests TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages(digest TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs(key TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS timeline(conv TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY(conv, seq));
CREATE TABLE IF NOT EXISTS events(conv TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY(conv, seq));
CREATE TABLE IF NOT EXISTS digest_chunks(conv TEXT NOT NULL, idx INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY(conv, idx));
"""

#: Digests per row of ``digest_chunks``.
DIGEST_CHUNK = 128


def blob_value(text: str) -> str | bytes:
    """A text as SQLite can bind it, its secrets redacted: text with lone surrogates (a
    system prompt may carry them) is stored as its surrogate-preserving UTF-8 bytes."""
    text = stored_text(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


def as_committed(m: Message) -> Message:
    """A pending message as a committed read will return it (its secrets redacted)."""
    return message_from_long_row(message_to_json(m))


#: A long message row (a BLOB of :data:`~proxy.state.longrows.LONG_ROW` bytes or more,
#: encoded in the store's worker) is written into its blob a slice of this many bytes
#: at a time — and read back the same way (:func:`~proxy.state.longrows.read_blob`).
BLOB_SLICE = 1 << 20


def streamed(body: str | bytes | bytearray) -> TypeGuard[bytes | bytearray]:
    return not isinstance(body, str) and len(body) >= LONG_ROW


def insert_streamed(conn: sqlite3.Connection, digest: str, body: bytes | bytearray) -> None:
    """``INSERT OR IGNORE`` of a long row's UTF-8 bytes as the table holds them (a BLOB),
    written through SQLite's incremental blob I/O: binding 10 MB copies it in one call
    holding the GIL (the writer thread's largest GIL samples under ``bench.stall``),
    each ``Blob.write`` copies a slice without it."""
    cur = conn.execute("INSERT OR IGNORE INTO messages(digest, body) VALUES(?, zeroblob(?))", (digest, len(body)))
    if cur.rowcount != 1 or cur.lastrowid is None:  # stored already (rows are content-addressed)
        return
    view = memoryview(body)
    with conn.blobopen("messages", "body", cur.lastrowid) as blob:
        for at in range(0, len(view), BLOB_SLICE):
            blob.write(view[at : at + BLOB_SLICE])


def chunk_count(n: int) -> int:
    return (n + DIGEST_CHUNK - 1) // DIGEST_CHUNK
