"""The tracker as one replica of a shared store (:mod:`proxy.state.protocol`).

With a shared store what the tracker holds in memory — records, the lineage index, hot
snapshots — is a cache of the store, kept current and never trusted on its own:

- before a request is matched, :meth:`ReplicaSync._sync` applies what other processes
  changed in its namespace since this one last looked (only the changed tails of
  histories, with their messages when few);
- a request of a conversation whose previous change is still being committed here
  waits for that commit (:meth:`ReplicaSync._wait_turn`), so this process never builds
  on a change the store may refuse;
- a refused commit (another replica changed the conversation first) or one whose
  outcome is unknown (the store went away) drops the conversation from the cache; it
  is read again in full at the next sync (:meth:`ReplicaSync._drop`), and the request
  is decided again on that state;
- when the store comes back after an outage everything cached is dropped
  (:meth:`ReplicaSync._reset_cache`): other replicas may have moved on meanwhile.

This module is a mixin of :class:`~proxy.gate.tracker.Tracker`: it works on the
tracker's own structures, declared in :mod:`proxy.gate.tracker_parts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Container, ItemsView, Iterator, Mapping
from typing import TYPE_CHECKING

from proxy.core.messages import Message, Snapshot
from proxy.gate.budget import record_bytes
from proxy.gate.hints import MAX_LINES
from proxy.gate.observation import Observation
from proxy.gate.tracker_parts import TrackerParts
from proxy.state.protocol import Changed, StateUnavailable
from proxy.state.records import ConversationRecord

if TYPE_CHECKING:
    pass

__all__ = ["SWEEP_SECONDS", "ReplicaSync"]

log = logging.getLogger("proxy.gate.tracker")

#: How often a replica sweeps expired conversations out of the shared store.
SWEEP_SECONDS = 60.0


class _Taken(Container[str]):
    """Ids a new conversation must not take: this process's and those the store said
    were taken elsewhere."""

    def __init__(self, a: Container[str], b: Container[str]) -> None:
        self.a, self.b = a, b

    def __contains__(self, x: object) -> bool:
        return x in self.a or x in self.b


class _Held(Mapping[str, str]):
    """What a sync may leave out, as the store's ``known`` (see
    :meth:`~proxy.state.store.Store.sync`): iterated, this replica's own commits of the
    namespace since its cursor (what a store is told up front: bounded, see
    :data:`~proxy.gate.writes.MAX_MINE`); looked up, the etag the cache holds for any
    conversation, read when the store's answer is made or read — an answer the cache
    holds already (an own commit acknowledged meanwhile, another process's change a
    sync before this one brought) is a no-op to adopt (:meth:`ReplicaSync._adopt`)."""

    def __init__(self, mine: Mapping[str, str], recs: Mapping[str, ConversationRecord]) -> None:
        self.mine, self.recs = mine, recs

    def __getitem__(self, cid: str) -> str:
        rec = self.recs.get(cid)
        if rec is None or not rec.etag:
            raise KeyError(cid)
        return rec.etag

    def __iter__(self) -> Iterator[str]:
        return iter(self.mine)

    def __len__(self) -> int:
        return len(self.mine)

    def items(self) -> ItemsView[str, str]:
        return self.mine.items()


class ReplicaSync(TrackerParts):
    """See the module docstring."""

    def _replaced(self, cid: str) -> None:
        self._gens[cid] = self._gens.get(cid, 0) + 1

    @property
    def shared(self) -> bool:
        """Whether the store is shared with other processes."""
        return self._replica is not None

    # -- lifecycle

    def _start_replica(self) -> None:
        recovered = getattr(self.store, "recovered", None)
        if isinstance(recovered, list):
            recovered.append(self._reset_cache)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _stop_replica(self) -> None:
        task, self._sweeper = self._sweeper, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        rep = self._replica
        if rep is not None:
            for cid in list(rep.txns):
                with contextlib.suppress(Exception):
                    await self.commit(cid)
            with contextlib.suppress(StateUnavailable):
                await rep.flush()

    async def _sweep_forever(self) -> None:
        config = getattr(self, "config", None)
        ttl = float(getattr(config, "ttl_seconds", 7 * 24 * 3600.0))
        most = int(getattr(config, "max_conversations", 10_000))
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await self.store.sweep(self.clock(), ttl, most)
            except StateUnavailable:
                pass
            except Exception:
                log.exception("state: sweep failed")

    def _reset_cache(self) -> None:
        """Forget everything cached (the store came back; others may have moved on)."""
        rep = self._replica
        if rep is None:
            return
        for cid in [c for c in self._recs if rep.busy(c) is None]:
            self._recs.pop(cid, None)
            self._forget_local(cid)
        rep.cursors.clear()
        rep.mine.clear()
        rep.mine_ver.clear()
        rep.seen.clear()
        rep.reload.clear()
        rep.unlined.clear()
        rep.unlined_count = 0

    # -- sync

    async def _sync(self, tenant: str, namespace: str, *, lines: bool = False) -> None:
        """Apply what other processes changed in ``namespace``. ``lines``: the request
        is matched by its text lines too: index the lines of every synced message first
        (else that waits, see :meth:`_remember_synced_lines`)."""
        rep = self._replica
        assert rep is not None
        reload = rep.reload.pop(namespace, set())
        try:
            synced = await self.store.sync(
                tenant, namespace, rep.cursors.get(namespace, 0), reload=reload, known=_Held(rep.mine.get(namespace, {}), self._recs)
            )
        except BaseException:
            if reload:
                rep.reload.setdefault(namespace, set()).update(reload)
            raise
        rep.synced_mine(namespace, synced.cursor)
        wanted: list[tuple[ConversationRecord, tuple[str, ...]]] = []
        for ch in synced.changed:
            side = self._adopt(ch)
            if side:
                wanted.append((ch.record, side))
        rep.cursors[namespace] = max(rep.cursors.get(namespace, 0), synced.cursor)
        for rec, digests in wanted:  # replies to side requests (summaries): their lines
            msgs = await self.store.conversation_messages(rec, digests)
            if self._recs.get(rec.id) is rec:
                self.lines.remember(self.index, rec.id, tuple(msgs[d] for d in digests if d in msgs))
        if lines:
            self._remember_synced_lines()

    def _remember_synced_lines(self) -> None:
        """Index the text lines of the messages synced so far (only a short request,
        matched by its lines, needs them: until one comes they wait, unparsed, as many
        as :class:`~proxy.gate.hints.LineMemory` keeps)."""
        rep = self._replica
        assert rep is not None
        while rep.unlined:
            cid, msgs, tail = rep.unlined.popleft()
            if cid in self._recs:
                self.lines.remember(self.index, cid, tuple(msgs[d] for d in tail))
        rep.unlined_count = 0

    def _adopt(self, ch: Changed) -> tuple[str, ...]:
        """Make the cache hold the stored state ``ch`` describes; returns the digests of
        side-request replies new to this process (their text lines are matched, as this
        process's own are, see :class:`~proxy.gate.hints.LineMemory`)."""
        rep = self._replica
        assert rep is not None
        new = ch.record
        cid = new.id
        if ch.ver and ch.ver < rep.seen.get(cid, 0):
            return ()  # an older answer than what is cached
        old = self._recs.get(cid)
        if old is not None and old.etag == new.etag:
            # what is cached (often this process's own commit, sent back because other
            # commits came between): nothing to read, even while a change is in progress
            rep.seen[cid] = max(ch.ver, rep.seen.get(cid, 0))
            return ()
        if rep.busy(cid) is not None:  # being committed here: read it again afterwards
            rep.reload.setdefault(new.namespace, set()).add(cid)
            return ()
        if ch.keep and (old is None or ch.keep > len(old.digests)):
            rep.reload.setdefault(new.namespace, set()).add(cid)
            return ()
        known = set(old.side_digests) if old is not None else set()
        side = tuple(d for d in new.side_digests if d not in known)
        new.digests = (old.digests[: ch.keep] if old is not None else ()) + ch.tail
        if old is not None:
            new.timeline, new.events = old.timeline, old.events
            if old.namespace != new.namespace:
                self._forget_local(cid)
                old = None
        self._recs[cid] = new
        self._recs.move_to_end(cid)
        self.budget.set_record(cid, record_bytes(new))
        self._replaced(cid)
        self.index.upsert(self._history(new), ch.keep if old is not None else 0)
        self._refresh_hot(old, new, ch)
        rep.seen[cid] = ch.ver
        self._resynced.add(cid)
        return side

    def _refresh_hot(self, old: ConversationRecord | None, new: ConversationRecord, ch: Changed) -> None:
        """Extend the hot snapshot by the changed tail when its messages came along (and
        its memory account by what changed), else let the conversation go cold (hydrated
        when a request needs it)."""
        cid = new.id
        hot = self._hot.get(cid)
        msgs = ch.messages
        if msgs is not None and ch.tail:
            self._replica_unlined(cid, msgs, ch.tail)
        if hot is None:
            return
        same_frame = old is not None and (old.system_hash, old.tools_hash, old.dialect) == (
            new.system_hash,
            new.tools_hash,
            new.dialect,
        )
        base = hot.snapshot
        if msgs is None or not same_frame or ch.keep > len(base.messages):
            self._hot.forget(cid)
            return
        tail = tuple(msgs[d] for d in ch.tail)
        hot.snapshot = Snapshot(base.dialect, base.system, base.messages[: ch.keep] + tail, base.tools, new.model)
        del hot.cum[ch.keep + 1 :]
        self._account_hot(cid, base.messages, hot.snapshot.messages, ch.keep)

    def _replica_unlined(self, cid: str, msgs: Mapping[str, Message], tail: tuple[str, ...]) -> None:
        """Keep the synced ``tail`` of ``cid`` for :meth:`_remember_synced_lines` (the
        oldest dropped beyond what the line memory keeps)."""
        rep = self._replica
        assert rep is not None
        rep.unlined.append((cid, msgs, tail))
        rep.unlined_count += len(tail)
        while rep.unlined_count > MAX_LINES and len(rep.unlined) > 1:
            rep.unlined_count -= len(rep.unlined.popleft()[2])

    def _drop(self, cid: str) -> None:
        """Forget ``cid`` (a refused or unknown commit); read it again at the next sync."""
        rec = self._recs.pop(cid, None)
        self._forget_local(cid)
        self._replaced(cid)
        rep = self._replica
        if rep is not None:
            rep.seen.pop(cid, None)
            rep.forget_mine(cid, rec.namespace if rec is not None else None)
            if rec is not None and rec.etag:
                rep.reload.setdefault(rec.namespace, set()).add(cid)

    async def _wait_turn(self, tenant: str, namespace: str, cid: str, *, lines: bool = False) -> bool:
        """Wait for the commit of ``cid`` in progress here, if any; ``True`` when there
        was one (then the cache was synced again: match again). ``lines``: as for
        :meth:`_sync`."""
        rep = self._replica
        assert rep is not None
        busy = rep.busy(cid)
        if busy is None:
            return False
        if rep.deferred(cid):  # an earlier request still upstream: commit what it changed now
            await self.commit(cid)
        else:
            with contextlib.suppress(Exception):
                await asyncio.shield(busy)
        await self._sync(tenant, namespace, lines=lines)
        return True

    def _taken(self) -> Container[str]:
        rep = self._replica
        assert rep is not None
        return _Taken(self._recs, rep.taken)

    # -- commits

    async def commit(self, conversation_id: str) -> bool:
        """Commit what this request (or reply) changed in the conversation; ``False``
        when the store refused it (another replica changed the conversation first: the
        conversation is dropped from the cache and the caller decides again). Raises
        :class:`~proxy.state.protocol.StateUnavailable` when the store is unreachable
        (the conversation is dropped too). Always ``True`` with a sole store."""
        rep = self._replica
        if rep is None:
            return True
        try:
            res = await rep.commit(conversation_id)
        except BaseException:
            self._drop(conversation_id)
            raise
        if not res.ok:
            self._drop(conversation_id)
        return res.ok

    def defer_commit(self, conversation_id: str) -> bool:
        """Leave what this request changed to be committed with its reply
        (:meth:`~proxy.gate.writes.Replica.defer`: a plain continuation, nothing decided
        that another replica could act on); ``False`` when it must be committed now
        (:meth:`commit`). The commit then happens in :meth:`acknowledge`, or earlier
        when another request of the conversation reaches this process first
        (:meth:`_wait_turn`), or in :meth:`flush_writes`. Always ``False`` with a sole
        store."""
        rep = self._replica
        return rep is not None and rep.defer(conversation_id)

    async def _commit_deferred(self, cid: str) -> None:
        """Commit ``cid``'s deferred transaction, if one is open (a refusal or an
        unreachable store is logged: the reply it carried is read again as history)."""
        rep = self._replica
        if rep is not None and rep.deferred(cid):
            await self._commit_logged(cid, "a request and its reply")

    async def _commit_logged(self, cid: str, what: str) -> None:
        """:meth:`commit` where nobody waits for the outcome: a failure is logged."""
        try:
            await self.commit(cid)
        except StateUnavailable as exc:
            log.warning("state: not recorded: %s (%s)", what, exc.reason)
        except Exception:
            log.exception("state: committing %s failed", what)

    def abandon(self, conversation_id: str) -> None:
        """Give up what the current request changed in the conversation (never
        committed; the conversation is read again from the store)."""
        rep = self._replica
        if rep is not None and rep.busy(conversation_id) is not None:
            rep.abort(conversation_id)
            self._drop(conversation_id)

    def _commit_soon(self, cid: str) -> None:
        """Commit a reply's changes in the background (awaited by :meth:`acknowledge`)."""

        asyncio.get_running_loop().create_task(self._commit_logged(cid, "a reply"))

    async def flush_writes(self) -> None:
        """Wait until this process's writes so far reached a shared store (replies
        recorded, side writes sent); raises
        :class:`~proxy.state.protocol.StateUnavailable` when they could not be."""
        rep = self._replica
        if rep is None:
            return
        self.settle_all()
        for cid in [c for c, t in rep.txns.items() if t.deferred]:
            await self._commit_deferred(cid)
        for fut in [t.done for t in rep.txns.values()]:
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)
        await rep.flush()

    async def acknowledge(self, obs: Observation) -> None:
        """Return once everything recorded for ``obs`` so far — its reply, the events
        of its response — is committed to a shared store (at once with a sole store):
        the server awaits this before the response ends, so what a client was answered
        is what every replica sees next."""
        rep = self._replica
        if rep is None:
            return
        self._later.drain()  # records the reply (and opens its commit, or joins the request's)
        await self._commit_deferred(obs.conversation_id)
        for _ in range(3):  # the reply's commit (after an early commit of its request: a second)
            busy = rep.busy(obs.conversation_id)
            if busy is None:
                break
            if rep.deferred(obs.conversation_id):
                # a later request's, left for its own reply — but this reply was recorded
                # into it when it came while its request was committed early: commit now
                await self._commit_deferred(obs.conversation_id)
                continue
            with contextlib.suppress(Exception):
                await asyncio.shield(busy)
            await asyncio.sleep(0)  # a reply recorded after that commit opens its own
        with contextlib.suppress(StateUnavailable):
            await rep.flush()
