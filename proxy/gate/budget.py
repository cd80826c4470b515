"""What the tracker keeps in memory, in bytes, and the bound on it (``state.max_memory_mb``).

The figures are estimates made from sizes the tracker already knows (how many digests a
history has, how many timeline entries and events a record holds, the text of a hot
snapshot's messages), never by walking objects: keeping the account costs O(what
changed) per request. The per-item constants were measured with ``tracemalloc`` on the
CPython this project runs on (``tests/gate/test_budget.py`` checks that the estimate
stays within a factor of what is really allocated, so a change that makes a record much
bigger shows up there).

Two tiers are accounted:

- a tracked conversation (:func:`record_bytes`): its record, its lineage entries (one
  posting per digest, its line fingerprints), its in-memory timeline and events — what
  matching and the next decision need;
- a hot history (:func:`messages_bytes`): the messages of its snapshot, with their text —
  a cache, re-read from the store when a request needs it.

Beyond the bound the least recently used hot histories are dropped first; when none is
left, the least recently used conversations stop being tracked in memory (see
:meth:`proxy.gate.tracker.Tracker._evict`).
"""

from __future__ import annotations

from collections.abc import Iterable

from proxy.core.messages import Message
from proxy.state.records import ConversationRecord

__all__ = ["MemoryBudget", "messages_bytes", "record_bytes"]

#: A record with empty lists, its entry in the tracker's maps and the lineage index.
CONVERSATION_BYTES = 3000
#: Per digest of a tracked history: its tuple slot, its posting, its line fingerprints
#: (the digest text itself is shared with the store's write queue and the hot snapshot).
#: 420 before the postings and the line index became 12-byte records
#: (:mod:`proxy.core.postings`): ``bench.memory`` measured ~100 bytes less per message.
DIGEST_BYTES = 320
TIMELINE_ENTRY_BYTES = 420
EVENT_BYTES = 700
#: Per message of a hot snapshot beyond its text: the Message, its parts, its token count.
MESSAGE_BYTES = 520


def record_bytes(rec: ConversationRecord) -> int:
    """Estimated bytes of a tracked conversation (without its hot history)."""
    return (
        CONVERSATION_BYTES
        + DIGEST_BYTES * len(rec.digests)
        + TIMELINE_ENTRY_BYTES * len(rec.timeline)
        + EVENT_BYTES * len(rec.events)
    )


def messages_bytes(msgs: Iterable[Message]) -> int:
    """Estimated bytes of messages held in a hot snapshot (text included)."""
    n = 0
    for m in msgs:
        n += MESSAGE_BYTES
        for p in m.parts:
            n += len(p.text)
    return n


class MemoryBudget:
    """Running totals per conversation of both tiers; ``limit`` bytes (``None``: no
    bound, the totals are still kept for ``GET /gate/memory``)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._records: dict[str, int] = {}
        self._hot: dict[str, int] = {}
        self.records_total = 0
        self.hot_total = 0

    @property
    def total(self) -> int:
        return self.records_total + self.hot_total

    def over(self) -> bool:
        return self.limit is not None and self.total > self.limit

    def set_record(self, cid: str, n: int) -> None:
        self.records_total += n - self._records.get(cid, 0)
        self._records[cid] = n

    def set_hot(self, cid: str, n: int) -> None:
        self.hot_total += n - self._hot.get(cid, 0)
        self._hot[cid] = n

    def hot_of(self, cid: str) -> int:
        return self._hot.get(cid, 0)

    def drop_hot(self, cid: str) -> None:
        self.hot_total -= self._hot.pop(cid, 0)

    def drop(self, cid: str) -> None:
        self.drop_hot(cid)
        self.records_total -= self._records.pop(cid, 0)

    def report(self) -> dict[str, int | None]:
        return {
            "bytes": self.total,
            "limit": self.limit,
            "conversations": len(self._records),
            "conversation_bytes": self.records_total,
            "hot": len(self._hot),
            "hot_bytes": self.hot_total,
        }
