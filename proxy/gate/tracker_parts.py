"""What the parts of the conversation tracker share.

:class:`~proxy.gate.tracker.Tracker` is assembled from parts, each a mixin over the same
structures, declared once here (and set by ``Tracker.__init__``):

- :class:`~proxy.gate.bookkeeping.Bookkeeping`: what is recorded after a request —
  replies, deferred token accounting, the quiet-loop queue;
- :class:`~proxy.gate.residency.Residency`: what stays in memory — eviction by age and
  count, the memory bound, hydrating a cold history;
- :class:`~proxy.gate.replica_sync.ReplicaSync`: the cache of a shared store;
- the tracker itself: lifecycle, queries, policy hooks, observing a request (its
  synchronous step, recording the matched request, is functions of the tracker in
  :mod:`proxy.gate.admission`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.accounting import TokenAccounting
from proxy.core.lineage_index import History, LineageIndex
from proxy.core.messages import Message
from proxy.gate.budget import MemoryBudget
from proxy.gate.hints import LineMemory, RequestHints
from proxy.gate.hot import HotHistories
from proxy.gate.ledger import PendingCount
from proxy.gate.quiet import QuietQueue
from proxy.gate.writes import Replica, Writes
from proxy.state.records import ConversationRecord, TimelineEntry
from proxy.state.store import Store

if TYPE_CHECKING:
    from proxy.gate.normalize import IncrementalNormalizer

__all__ = ["TrackerConfig", "TrackerParts"]


@dataclass(frozen=True)
class TrackerConfig:
    """Bounds of the tracker. ``ttl_seconds``: conversations idle longer are evicted;
    ``max_conversations``: beyond it the least recently used are evicted;
    ``hot_conversations``: how many full snapshots stay in memory (others are re-read
    from the store when needed); ``max_timeline``: timeline entries kept in memory per
    conversation (all are stored); ``max_memory_bytes``: the bound on what the tracker
    keeps in memory (:mod:`proxy.gate.budget`; ``None``: only the bounds above)."""

    ttl_seconds: float = 7 * 24 * 3600.0
    max_conversations: int = 10_000
    hot_conversations: int = 512
    max_timeline: int = 1000
    max_events: int = 1000
    max_memory_bytes: int | None = None


class TrackerParts:
    """The tracker's structures (see ``Tracker.__init__`` for what each holds) and what
    one part calls of another."""

    store: Store
    config: TrackerConfig
    accounting: TokenAccounting
    clock: Callable[[], float]
    index: LineageIndex
    normalizer: IncrementalNormalizer
    budget: MemoryBudget
    hints: RequestHints
    lines: LineMemory
    _recs: OrderedDict[str, ConversationRecord]
    _hot: HotHistories
    _pending: dict[str, PendingCount]
    _later: QuietQueue[Callable[[], None]]
    _counting: dict[str, asyncio.Future[Any]]
    _waiting: dict[Callable[[], None], str | None]  # -> the conversation's tenant
    _replica: Replica | None
    _w: Writes
    _resynced: set[str]
    _gens: dict[str, int]
    _sweeper: asyncio.Task[None] | None

    def _history(self, rec: ConversationRecord) -> History:
        return History(rec.id, rec.namespace, rec.system_hash, rec.digests, rec.request_len, rec.last_seen)

    def _entry(self, rec: ConversationRecord | None, seq: int) -> TimelineEntry | None:
        if rec is None:
            return None
        for e in reversed(rec.timeline):
            if e.seq == seq:
                return e
            if e.seq < seq:
                break
        return None

    # implemented by the parts (see the module docstring)

    def settle_all(self) -> None:
        raise NotImplementedError

    def _forget_local(self, cid: str) -> None:
        raise NotImplementedError

    def _shed(self) -> None:
        raise NotImplementedError

    def _account_hot(self, cid: str, old: tuple[Message, ...] | None, new: tuple[Message, ...], same: int) -> None:
        raise NotImplementedError

    def _touch(self, cid: str) -> None:
        raise NotImplementedError

    def _commit_soon(self, cid: str) -> None:
        raise NotImplementedError
