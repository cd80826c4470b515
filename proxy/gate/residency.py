"""What the tracker keeps in memory: eviction and the memory bound.

Conversations idle beyond ``ttl_seconds`` or beyond ``max_conversations`` leave memory
(:meth:`Residency._evict`); over ``max_memory_bytes`` hot histories go first, then the
least recently used conversations (:meth:`Residency._shed`); a cold history is read
back from the store when a request needs it (:meth:`Residency._hydrate`). The account
itself is :class:`~proxy.gate.budget.MemoryBudget`. A mixin of
:class:`~proxy.gate.tracker.Tracker` (:mod:`proxy.gate.tracker_parts`).
"""

from __future__ import annotations

from proxy.core.messages import Message
from proxy.gate.budget import messages_bytes, record_bytes
from proxy.gate.tracker_parts import TrackerParts
from proxy.state.memory import MemoryStore

__all__ = ["Residency"]


class Residency(TrackerParts):
    """See the module docstring."""

    def _account_hot(self, cid: str, old: tuple[Message, ...] | None, new: tuple[Message, ...], same: int) -> None:
        """The memory account of ``cid``'s hot history, now ``new`` (was ``old``, the
        first ``same`` messages alike): O(the messages that differ)."""
        if cid not in self._hot:
            return
        if old is None:
            self.budget.set_hot(cid, messages_bytes(new))
            return
        n = self.budget.hot_of(cid) - messages_bytes(old[same:]) + messages_bytes(new[same:])
        self.budget.set_hot(cid, n)

    def _touch(self, cid: str) -> None:
        self._recs.move_to_end(cid)
        self._hot.touch(cid)
        rec = self._recs.get(cid)
        if rec is not None:
            self.budget.set_record(cid, record_bytes(rec))

    def _evict(self, now: float) -> None:
        dead: list[str] = []
        ttl = self.config.ttl_seconds
        while self._recs:
            cid, rec = next(iter(self._recs.items()))
            if len(self._recs) > self.config.max_conversations or now - rec.last_seen > ttl:
                if self._replica is not None and self._replica.busy(cid):
                    break  # being committed: not now
                self._recs.popitem(last=False)
                dead.append(cid)
            else:
                break
        if dead:
            for cid in dead:
                self._forget_local(cid)
                self._gens.pop(cid, None)
            self._w.forget(dead)
        if self.budget.over():
            self._shed()

    def _shed(self) -> None:
        """Bring what is kept in memory under ``max_memory_bytes``: drop the least
        recently used hot histories (and the parsed requests the normaliser keeps for
        them; re-read from the store when a request needs them), then, when none is left,
        stop tracking the least recently used conversations in memory (a sole store
        keeps them until their ``ttl_seconds``, and is told to drop what it keeps of
        them in memory; an in-memory store forgets them). The
        most recently used conversation is always kept."""
        budget = self.budget
        while budget.over():
            cid = self._hot.oldest()
            if cid is None:
                break
            self._hot.forget(cid)
            ns = self.index.namespace_of(cid)
            if ns is not None:
                self.normalizer.forget(ns, cid)
        dead: list[str] = []
        while budget.over() and len(self._recs) > 1:
            cid = next(iter(self._recs))
            if self._replica is not None and self._replica.busy(cid):
                break  # being committed: not now
            self._recs.popitem(last=False)
            self._forget_local(cid)
            self._gens.pop(cid, None)
            dead.append(cid)
        if dead and isinstance(self.store, MemoryStore):
            self._w.forget(dead)
        elif dead:
            self.store.release(dead)  # what the store kept of them in memory goes too

    def memory(self) -> dict[str, int | None]:
        """What the tracker keeps in memory (estimated bytes, :mod:`proxy.gate.budget`)."""
        return self.budget.report()

    def _forget_local(self, cid: str) -> None:
        """Drop everything this process keeps of ``cid`` but its record (see
        :meth:`_evict` and :meth:`~proxy.gate.replica_sync.ReplicaSync._drop`)."""
        self._pending.pop(cid, None)
        self.budget.drop(cid)
        ns = self.index.namespace_of(cid)
        if self._replica is not None:
            self._replica.forget_mine(cid, ns)
        self.index.remove(cid)
        self._hot.forget(cid)
        self._resynced.discard(cid)
        if ns is not None:
            self.normalizer.forget(ns, cid)

    async def _hydrate(self, cid: str) -> None:
        """Load a cold conversation's history from the store (under its lock)."""
        msgs = await self._hot.hydrate(self.store, cid, self._recs.get)
        if msgs is not None:
            self.lines.remember(self.index, cid, msgs)
            self.budget.set_hot(cid, messages_bytes(msgs))
            self._touch(cid)
            if self.budget.over():
                self._shed()
