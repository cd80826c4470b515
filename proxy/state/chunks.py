"""A conversation's history digests in ``digest_chunks`` rows, as the shared SQLite
store (:mod:`proxy.state.sqlite_shared`) reads and writes them: row ``idx`` holds
digests ``idx * DIGEST_CHUNK`` to ``(idx + 1) * DIGEST_CHUNK`` of the history, comma
separated (the layout of :class:`~proxy.state.sqlite.SQLiteStore`'s rows too)."""

from __future__ import annotations

import sqlite3

from proxy.state.sqlite_rows import DIGEST_CHUNK

__all__ = ["append_chunks", "read_digests", "write_chunks"]


def read_digests(conn: sqlite3.Connection, cid: str, first_chunk: int = 0) -> tuple[str, ...]:
    """The digests of ``cid`` stored from chunk ``first_chunk`` on."""
    bodies = [
        b
        for (b,) in conn.execute(
            "SELECT body FROM digest_chunks WHERE conv = ? AND idx >= ? ORDER BY idx", (cid, first_chunk)
        )
        if b
    ]
    return tuple(",".join(bodies).split(",")) if bodies else ()


def write_chunks(conn: sqlite3.Connection, cid: str, keep: int, kept_tail: tuple[str, ...], append: tuple[str, ...]) -> None:
    """Rewrite the chunks from the one holding digest ``keep`` on: ``kept_tail`` is
    what that chunk keeps before ``keep``, then ``append``."""
    first = keep // DIGEST_CHUNK
    rest = kept_tail + append
    rows = [
        (cid, first + i, ",".join(rest[i * DIGEST_CHUNK : (i + 1) * DIGEST_CHUNK]))
        for i in range((len(rest) + DIGEST_CHUNK - 1) // DIGEST_CHUNK)
    ]
    conn.execute("DELETE FROM digest_chunks WHERE conv = ? AND idx >= ?", (cid, first))
    conn.executemany("INSERT INTO digest_chunks(conv, idx, body) VALUES(?, ?, ?)", rows)


def append_chunks(conn: sqlite3.Connection, cid: str, hlen: int, append: tuple[str, ...]) -> None:
    """Add ``append`` after the ``hlen`` digests stored: the last chunk, when it has
    room, extended in place (not read, deleted and written again), then new chunks
    (the same rows :func:`write_chunks` would leave)."""
    first, held = divmod(hlen, DIGEST_CHUNK)
    if held:
        room = DIGEST_CHUNK - held
        conn.execute(
            "UPDATE digest_chunks SET body = body || ',' || ? WHERE conv = ? AND idx = ?",
            (",".join(append[:room]), cid, first),
        )
        append, first = append[room:], first + 1
    conn.executemany(
        "INSERT INTO digest_chunks(conv, idx, body) VALUES(?, ?, ?)",
        [(cid, first + i, ",".join(append[j : j + DIGEST_CHUNK])) for i, j in enumerate(range(0, len(append), DIGEST_CHUNK))],
    )
