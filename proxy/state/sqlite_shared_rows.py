"""What the shared SQLite store (:mod:`proxy.state.sqlite_shared`) writes and reads,
as values: a change's rows encoded and redacted (before the writers' lock is taken, so
that the lock is held only for the statements), and a conversation's record and kept
history rebuilt from its ``conv_state`` row. No I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy.state.protocol import Commit, SideWrite, Stats
from proxy.state.records import (
    ConversationRecord,
    TimelineEntry,
    message_to_json,
    stored_text,
)
from proxy.state.sqlite_rows import blob_value

__all__ = ["Encoded", "Rows", "blob_text", "encode", "keep_since", "record_of", "rows_of"]


def _log_json(entry: dict[str, Any]) -> str:
    d = {k: v for k, v in entry.items() if k != "id"}
    return stored_text(json.dumps(d, separators=(",", ":"), default=str))


def blob_text(body: Any) -> str:
    """A stored blob's text (a body too large for text is stored as bytes)."""
    return body.decode("utf-8", "surrogatepass") if isinstance(body, bytes) else str(body)


@dataclass(frozen=True, slots=True)
class Rows:
    """What a change writes besides its record, encoded and redacted (before the write
    lock is taken)."""

    messages: list[tuple[str, str | bytes | bytearray]]
    blobs: list[tuple[str, Any]]
    timeline: list[tuple[int, str]]
    events: list[str]
    log: list[str]


def rows_of(w: Commit | SideWrite) -> Rows:
    """What ``w`` writes besides its record (a side write has no blobs)."""
    return Rows(
        [(m.digest, message_to_json(m)) for m in w.messages],
        [(k, blob_value(v)) for k, v in w.blobs] if isinstance(w, Commit) else [],
        [(d["seq"], TimelineEntry.dict_to_json(d)) for d in w.timeline],
        [e.to_json() for e in w.events],
        [_log_json(e) for e in w.log],
    )


#: A commit's rows, its meta JSON and its stats JSON (see :func:`encode`).
Encoded = tuple[Rows, str, str | None]


def encode(c: Commit) -> Encoded:
    """What ``c`` writes, encoded and redacted (before the writers' lock is taken)."""
    rows = rows_of(c)
    meta = ConversationRecord.meta_dict_to_json(c.meta)
    return rows, meta, json.dumps(c.stats.as_list()) if c.stats is not None else None


def record_of(cid: str, meta: str, st: tuple[Any, ...]) -> ConversationRecord:
    """A record from its stored meta and ``conv_state`` row (etag, ver, hlen, splices,
    floor, evseq, stats)."""
    rec = ConversationRecord.from_row(meta, "")
    rec.id = cid
    rec.etag, rec.event_seq = st[0], st[5]
    stats = Stats.of(json.loads(st[6])) if st[6] else None
    if stats is not None:
        rec.tokens, rec.window, rec.exact = stats.tokens, stats.window, stats.exact
    return rec


def keep_since(splices: str, floor: int, hlen: int, cursor: int, full: bool) -> int:
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
