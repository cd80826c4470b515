"""Long stored message rows read without a 10 MB C call in the server (issue 16).

Reading a 10 MB row back (a conversation hydrated from the store, or a pending row made
as a committed read returns it) was two single C calls holding the GIL on the store's
reader thread — fetching the BLOB into a new ``bytes`` (the copy and its page faults)
and ``json.loads`` of it (~25 ms on a quiet core) — and every other tenant's request
waited for them on the event loop. Here a row of :data:`LONG_ROW` bytes or more is
read from its blob a slice at a time into a ``bytes`` made for it
(:class:`proxy.server.filled`'s way, each copy without the GIL), decoded by
:func:`~proxy.state.records.message_from_json` in the request path's worker process
(the row through shared memory; not the store's worker, whose queue holds the writer's
redactions of other 10 MB rows), beside the reader thread, and sent back with its long texts as spans of the row
(:mod:`proxy.core.bodyrefs`); an ASCII one is made here a slice at a time
(:class:`~proxy.state.rawmem.AsciiText`). The message is the one
``message_from_json(row)`` gives — in the worker or, without one, here.
"""

from __future__ import annotations

import ctypes
import sqlite3

from proxy.core import bodyrefs
from proxy.core.messages import Message
from proxy.state import offload, rawmem
from proxy.state.records import Row, message_from_json

__all__ = ["LONG_ROW", "message_from_long_row", "read_blob"]

#: Rows from this many bytes on are read and decoded so.
LONG_ROW = 1 << 20


def read_blob(conn: sqlite3.Connection, table: str, column: str, rowid: int, size: int) -> bytes:
    """The ``size`` bytes of a BLOB, read a :data:`~proxy.state.rawmem.SLICE` at a time
    into one ``bytes`` (SQLite's blob reads and the copies run without the GIL)."""
    if size < 2:
        with conn.blobopen(table, column, rowid, readonly=True) as blob:
            return blob.read()
    out = rawmem.new_bytes(size)
    addr = rawmem.bytes_address(out)
    at = 0
    with conn.blobopen(table, column, rowid, readonly=True) as blob:
        while at < size:
            piece = blob.read(min(rawmem.SLICE, size - at))
            if not piece:
                break
            ctypes.memmove(addr + at, piece, len(piece))
            at += len(piece)
    return out if at == size else out[:at]


def _decoded(row: bytes) -> bytes | None:
    """In the worker: the row's message, pickled with its long texts as spans
    (``None``: not a row; the caller's own decoding raises what it raises)."""
    try:
        return bodyrefs.dumps(message_from_json(row), row)
    except Exception:  # noqa: BLE001 - never raise in the worker (a failed call restarts it)
        return None


def message_from_long_row(row: Row) -> Message:
    """``message_from_json(row)``, a long ``bytes``/``bytearray`` row decoded in the
    request path's worker (blocking: call it from a thread that is not the reader's)."""
    if isinstance(row, str) or len(row) < LONG_ROW:
        return message_from_json(row)
    fut = offload.submit(_decoded, row)
    try:
        pickled = fut.result() if fut is not None else None
    except Exception:  # noqa: BLE001 - the worker failed (logged, restarted on the next call): here
        pickled = None
    if pickled is None:
        return message_from_json(row)
    made: dict[tuple[int, int], str] = {}
    for a, b in bodyrefs.ascii_spans(pickled):
        if b - a >= 2:
            making = rawmem.AsciiText(row, a, b)
            while (text := making.step()) is None:
                pass
            made[(a, b)] = text
    msg = bodyrefs.loads(pickled, row, made)
    assert isinstance(msg, Message)
    return msg
