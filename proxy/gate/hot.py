"""The full histories the tracker keeps in memory (an LRU of snapshots), the text blobs
they refer to, and loading a cold one back from the store.

A conversation's record (:class:`~proxy.state.records.ConversationRecord`) holds only
message digests; its snapshot — the messages themselves, with their cumulative token
counts — is kept for the ``limit`` most recently used conversations and re-read from
the store (:meth:`HotHistories.hydrate`) when a request needs one that is cold.
"""

from __future__ import annotations

import asyncio
import json
import logging
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.core.messages import Message, Snapshot, ToolDef
from proxy.gate.ledger import no_counts
from proxy.state.records import ConversationRecord
from proxy.state.store import Store

__all__ = ["Hot", "HotHistories", "tools_blob", "tools_from_blob"]

log = logging.getLogger("proxy.gate.tracker")

#: Text blobs (system prompts, tool definitions) kept in memory.
MAX_BLOBS = 256


@dataclass
class Hot:
    """In-memory state of a conversation: its current history as a snapshot and the
    cumulative token counts of its messages (``cum[i]`` = tokens of the first ``i``)."""

    snapshot: Snapshot
    cum: array[int] = field(default_factory=no_counts)
    tokenizer: str = ""


def tools_blob(tools: tuple[ToolDef, ...]) -> str:
    return json.dumps([[t.name, t.description, t.schema] for t in tools], separators=(",", ":"))


def tools_from_blob(text: str) -> tuple[ToolDef, ...]:
    try:
        return tuple(ToolDef(n, d, s) for n, d, s in json.loads(text))
    except (ValueError, TypeError):
        return ()


class HotHistories:
    """Snapshots by conversation id (least recently used dropped beyond ``limit``), and
    the blobs (system prompts, tool lists) by content hash."""

    def __init__(self, limit: int, on_drop: Callable[[str], None] | None = None) -> None:
        self.limit = limit
        #: told of every snapshot dropped (the memory account, :mod:`proxy.gate.budget`)
        self._on_drop = on_drop
        self._hot: OrderedDict[str, Hot] = OrderedDict()
        self._blobs: OrderedDict[str, str] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def __contains__(self, cid: object) -> bool:
        return cid in self._hot

    def __len__(self) -> int:
        return len(self._hot)

    def get(self, cid: str) -> Hot | None:
        return self._hot.get(cid)

    def set(self, cid: str, hot: Hot) -> None:
        self._hot[cid] = hot

    def touch(self, cid: str) -> None:
        """Mark ``cid`` most recently used; drop the oldest beyond the limit."""
        if cid in self._hot:
            self._hot.move_to_end(cid)
        while len(self._hot) > self.limit:
            old, _ = self._hot.popitem(last=False)
            if self._on_drop is not None:
                self._on_drop(old)

    def oldest(self) -> str | None:
        """The least recently used conversation with a hot snapshot."""
        return next(iter(self._hot), None)

    def forget(self, cid: str) -> None:
        if self._hot.pop(cid, None) is not None and self._on_drop is not None:
            self._on_drop(cid)
        lock = self._locks.get(cid)
        if lock is not None and not lock.locked():
            del self._locks[cid]

    # -- blobs

    def has_blob(self, key: str) -> bool:
        return key in self._blobs

    def blob(self, key: str, default: str = "") -> str:
        return self._blobs.get(key, default)

    def keep_blob(self, key: str, text: str) -> None:
        self._blobs[key] = text
        while len(self._blobs) > MAX_BLOBS:
            self._blobs.popitem(last=False)

    # -- loading

    async def hydrate(
        self, store: Store, cid: str, current: Callable[[str], ConversationRecord | None]
    ) -> tuple[Message, ...] | None:
        """Load the cold conversation ``cid`` (its record as ``current(cid)`` gives it)
        from ``store``, under the conversation's lock; returns the messages made hot, or
        ``None`` when nothing was loaded (gone, already hot, or changed meanwhile)."""
        lock = self._locks.setdefault(cid, asyncio.Lock())
        async with lock:
            rec = current(cid)
            if rec is None or cid in self._hot:
                return None
            digests = rec.digests
            msgs = await store.conversation_messages(rec, digests)
            keys = [k for k in (rec.system_hash, rec.tools_hash) if k and k not in self._blobs]
            blobs = await store.conversation_blobs(rec, keys) if keys else {}
            for k, v in blobs.items():
                self._blobs[k] = v
            rec = current(cid)
            if rec is None or cid in self._hot or rec.digests != digests:
                return None
            if any(d not in msgs for d in digests):
                log.warning("state: conversation %s has missing messages; history not restored", cid)
                snapshot_msgs: tuple[Message, ...] = ()
            else:
                snapshot_msgs = tuple(msgs[d] for d in digests)
            system = self._blobs.get(rec.system_hash, "") if rec.system_hash else ""
            tools = tools_from_blob(self._blobs.get(rec.tools_hash, "[]")) if rec.tools_hash else ()
            snap = Snapshot(rec.dialect, system, snapshot_msgs, tools, rec.model)  # type: ignore[arg-type]
            self._hot[cid] = Hot(snap, no_counts(), "")
            return snapshot_msgs
