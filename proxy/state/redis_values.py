"""What the Redis store (:mod:`proxy.state.redis`) sends and reads, as values: the key
part of a conversation id or namespace, a reply's text, a record rebuilt from its
conversation hash's fields, and the counted groups of a script's arguments (messages
and blobs, timeline entries, events, log entries — encoded and redacted through
:mod:`proxy.state.records`). No I/O: apart from how the store talks to Redis and what
it keeps in memory, so that a commit's arguments can be made off the event loop."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from proxy.core.messages import Message
from proxy.state.protocol import Stats
from proxy.state.records import (
    ConversationRecord,
    GateEvent,
    TimelineEntry,
    message_to_json,
    stored_text,
)

__all__ = ["append_groups", "key_hash", "record_of_fields", "reply_text", "stats_args"]


@functools.lru_cache(maxsize=4096)
def key_hash(text: str) -> str:
    """The key part of a conversation id or namespace (remembered: every call names keys)."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def reply_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return "" if value is None else str(value)


def _blob_bytes(text: str) -> bytes:
    return stored_text(text).encode("utf-8", "surrogatepass")


def _log_json(entry: dict[str, Any]) -> str:
    d = {k: v for k, v in entry.items() if k != "id"}
    return stored_text(json.dumps(d, separators=(",", ":"), default=str))


def stats_args(stats: Stats | None) -> list[Any]:
    return ["", ""] if stats is None else [stats.seq, json.dumps(stats.as_list())]


def record_of_fields(meta: Any, etag: Any, evseq: Any, stats: Any) -> ConversationRecord:
    rec = ConversationRecord.from_row(reply_text(meta), "")
    rec.etag = reply_text(etag)
    with contextlib.suppress(TypeError, ValueError):
        rec.event_seq = int(evseq)
    st = Stats.of(json.loads(reply_text(stats))) if stats else None
    if st is not None:
        rec.tokens, rec.window, rec.exact = st.tokens, st.window, st.exact
    return rec


def append_groups(
    args: list[Any],
    messages: Iterable[Message],
    blobs: Iterable[tuple[str, str]],
    timeline: Iterable[dict[str, Any]],
    events: Iterable[GateEvent],
    log_entries: Iterable[dict[str, Any]],
) -> None:
    fields: list[Any] = []
    for m in messages:
        fields += [m.digest, message_to_json(m)]
    for k, v in blobs:
        fields += ["b:" + k, _blob_bytes(v)]
    args.append(len(fields) // 2)
    args.extend(fields)
    tl = list(timeline)
    args.append(len(tl))
    for d in tl:
        args += [d["seq"], TimelineEntry.dict_to_json(d)]
    ev = [e.to_json() for e in events]
    args.append(len(ev))
    args.extend(ev)
    lg = [_log_json(e) for e in log_entries]
    args.append(len(lg))
    args.extend(lg)
