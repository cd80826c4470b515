"""How the tracker's changes reach the store.

The tracker changes a conversation in memory and says what it changed through one of
two writers with the same methods:

- :class:`DirectWrites` (a sole store: memory, SQLite for one process) hands every change
  to the store's write-behind methods at once, as the tracker always did.
- :class:`Replica` (a shared store: Redis, SQLite for ``--workers N``; see
  :mod:`proxy.state.protocol`) gathers the changes of a conversation in a transaction,
  opened when a request (or a reply) starts changing it and committed with a
  compare-and-set (:meth:`Replica.commit`) before the request goes on — or, for a
  plain continuation that decided nothing (:meth:`Replica.defer`), with its reply before
  the response ends; what needs no
  compare-and-set outside a transaction (token counts settled later, events a response
  tap adds) becomes a side write, sent in the background and awaited by
  :meth:`Replica.flush`. It also keeps what this process knows of each namespace
  (``cursors``: the namespace version it has seen; ``seen``: per conversation, the
  version of the state cached) and which conversations must be read again in full.

What a decision records (events, metrics, log lines) after it is committed goes through
:meth:`after_commit`: a refused commit is redone from fresh state, and what the refused
attempt decided must not be counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core.messages import Message
from proxy.core.prefix import common_prefix
from proxy.state.protocol import Commit, Committed, SideWrite, StateUnavailable, Stats
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry
from proxy.state.store import Store

__all__ = ["DirectWrites", "Replica", "Txn", "Writes"]

log = logging.getLogger("proxy.gate.tracker")

#: Ids this process learnt are taken elsewhere (bounded).
MAX_TAKEN = 4096
#: Own commits remembered per namespace until its next sync (bounded).
MAX_MINE = 1024


class Writes(Protocol):
    """What the tracker tells its writer (see the module docstring)."""

    def conversation(self, rec: ConversationRecord) -> None: ...

    def messages(self, rec: ConversationRecord, msgs: Iterable[Message]) -> None: ...

    def blob(self, rec: ConversationRecord, key: str, text: str) -> None: ...

    def timeline(self, rec: ConversationRecord, entry: TimelineEntry) -> None: ...

    def event(self, rec: ConversationRecord, ev: GateEvent) -> None: ...

    def log(self, cid: str | None, tenant: str, entry: dict[str, Any]) -> None: ...

    def after_commit(self, cid: str | None, fn: Callable[[], None]) -> None: ...

    def forget(self, ids: list[str]) -> None: ...


class DirectWrites:
    """Every change straight to a sole store's write-behind methods."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def conversation(self, rec: ConversationRecord) -> None:
        self.store.save_conversation(rec)

    def messages(self, rec: ConversationRecord, msgs: Iterable[Message]) -> None:
        self.store.put_messages(msgs)

    def blob(self, rec: ConversationRecord, key: str, text: str) -> None:
        self.store.put_blob(key, text)

    def timeline(self, rec: ConversationRecord, entry: TimelineEntry) -> None:
        self.store.put_timeline(rec.id, entry)

    def event(self, rec: ConversationRecord, ev: GateEvent) -> None:
        self.store.put_event(rec.id, ev)

    def log(self, cid: str | None, tenant: str, entry: dict[str, Any]) -> None:
        """Nothing: a sole store's event log is the gate's in-memory one."""

    def after_commit(self, cid: str | None, fn: Callable[[], None]) -> None:
        fn()

    def forget(self, ids: list[str]) -> None:
        self.store.delete(ids)


@dataclass
class Txn:
    """The uncommitted changes of one conversation. ``expect``: the etag they were made
    from (``None``: the conversation is new); ``base``: its history as committed."""

    rec: ConversationRecord
    expect: str | None
    base: tuple[str, ...]
    done: asyncio.Future[None]
    messages: dict[str, Message] = field(default_factory=dict)
    blobs: dict[str, str] = field(default_factory=dict)
    timeline: dict[int, TimelineEntry] = field(default_factory=dict)
    events: list[GateEvent] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    after: list[Callable[[], None]] = field(default_factory=list)
    stats: bool = False
    #: the gate's state of the conversation when the transaction opened (a decision that
    #: changes it stores a new dict: :meth:`~proxy.gate.tracker.Tracker.save_gate_state`)
    gate: object = None
    #: left open past the request's decision, to be committed with its reply
    #: (:meth:`Replica.defer`)
    deferred: bool = False
    #: its commit is under way (what is written into it now would be lost)
    committing: bool = False


@dataclass
class _Side:
    tenant: str
    timeline: dict[int, TimelineEntry] = field(default_factory=dict)
    events: list[GateEvent] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)
    messages: dict[str, Message] = field(default_factory=dict)
    stats: Stats | None = None


def stats_of(rec: ConversationRecord) -> Stats:
    return Stats(rec.seq, rec.tokens, rec.window, rec.exact)


class Replica:
    """This process's view of a shared store (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cursors: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.txns: dict[str, Txn] = {}
        #: per namespace, conversations to read again in full at its next sync
        self.reload: dict[str, set[str]] = {}
        self.taken: OrderedDict[str, None] = OrderedDict()
        #: per namespace, this process's commits its cursor could not move past (other
        #: commits came between): conversation id → etag, which the store leaves out of
        #: a sync while it still holds it (read by the store as the sync runs), and the
        #: namespace version of each (forgotten once a sync's cursor reached it)
        self.mine: dict[str, dict[str, str]] = {}
        self.mine_ver: dict[str, dict[str, int]] = {}
        #: synced tails whose text lines are not indexed yet (conversation id, the
        #: messages as the store sent them, the tail's digests), and their message count
        self.unlined: deque[tuple[str, Mapping[str, Message], tuple[str, ...]]] = deque()
        self.unlined_count = 0
        self._side: dict[str | None, _Side] = {}
        self._side_task: asyncio.Task[None] | None = None
        self._side_error: BaseException | None = None

    # -- transactions

    def begin(self, rec: ConversationRecord, *, create: bool = False) -> Txn:
        """Open the transaction of ``rec`` (none may be open for it)."""
        assert rec.id not in self.txns, f"a transaction of {rec.id} is already open"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        txn = Txn(rec, None if create else rec.etag, rec.digests, done, gate=rec.gate_state)
        self.txns[rec.id] = txn
        return txn

    def defer(self, cid: str) -> bool:
        """Leave ``cid``'s open transaction to be committed with the reply (one commit
        per request instead of two) when what it holds decides nothing another replica
        could act on: the conversation existed, its history only grew, and the
        decision recorded no event, log entry, blob or after-commit work and left the
        gate's state of the conversation as it was. A request not yet committed was
        not answered, so a replica killed meanwhile loses nothing it acknowledged; a
        concurrent change elsewhere makes the later commit refused, as a reply's can
        be. ``False`` (nothing changed) when the transaction must be committed now."""
        txn = self.txns.get(cid)
        if txn is None or txn.expect is None or txn.events or txn.log or txn.blobs or txn.after:
            return False
        rec = txn.rec
        if rec.gate_state is not txn.gate or len(rec.digests) < len(txn.base):
            return False
        if rec.digests[: len(txn.base)] != txn.base:
            return False
        txn.deferred = True
        return True

    def committing(self, cid: str) -> asyncio.Future[None] | None:
        """The end of ``cid``'s commit under way, if one is."""
        txn = self.txns.get(cid)
        return txn.done if txn is not None and txn.committing else None

    def deferred(self, cid: str) -> bool:
        """Whether ``cid``'s open transaction waits to be committed with its reply."""
        txn = self.txns.get(cid)
        return txn is not None and txn.deferred

    def busy(self, cid: str) -> asyncio.Future[None] | None:
        """The end of ``cid``'s open transaction, if one is open."""
        txn = self.txns.get(cid)
        return txn.done if txn is not None else None

    def abort(self, cid: str) -> None:
        txn = self.txns.pop(cid, None)
        if txn is not None and not txn.done.done():
            txn.done.set_result(None)

    def _build(self, txn: Txn) -> Commit:
        rec = txn.rec
        keep = common_prefix(txn.base, rec.digests)
        return Commit(
            conversation_id=rec.id,
            tenant=rec.tenant,
            namespace=rec.namespace,
            expect=txn.expect,
            etag=secrets.token_hex(8),
            meta=rec.meta_dict(),
            last_seen=rec.last_seen,
            keep=keep,
            append=rec.digests[keep:],
            messages=tuple(txn.messages.values()),
            blobs=tuple(txn.blobs.items()),
            timeline=tuple(e.as_dict() for e in txn.timeline.values()),
            events=tuple(txn.events),
            log=tuple(txn.log),
            stats=stats_of(rec) if txn.stats else None,
        )

    async def commit(self, cid: str) -> Committed:
        """Commit ``cid``'s transaction (success when none is open). On success the
        record takes the new etag and the decisions' ``after_commit`` work runs; either
        way the transaction is closed. Raises
        :class:`~proxy.state.protocol.StateUnavailable` when the store cannot be reached
        (nothing of the transaction is kept)."""
        txn = self.txns.get(cid)
        if txn is None:
            return Committed(True)
        txn.deferred = False
        txn.committing = True  # a reply recorded now waits for the end (Tracker.record_reply)
        change = self._build(txn)
        try:
            res = await self.store.commit(change)
        finally:
            self.abort(cid)
        if res.ok:
            rec = txn.rec
            rec.etag = change.etag
            self.seen[cid] = res.ver
            if self.cursors.get(rec.namespace, 0) == res.ver_before:
                self.cursors[rec.namespace] = res.ver
            else:
                self._remember_mine(rec.namespace, cid, change.etag, res.ver)
            for fn in txn.after:
                try:
                    fn()
                except Exception:
                    log.exception("recording a committed decision failed")
        elif res.reason == "exists":
            self.taken[cid] = None
            while len(self.taken) > MAX_TAKEN:
                self.taken.popitem(last=False)
        return res

    def _remember_mine(self, ns: str, cid: str, etag: str, ver: int) -> None:
        mine, vers = self.mine.setdefault(ns, {}), self.mine_ver.setdefault(ns, {})
        mine.pop(cid, None)
        vers.pop(cid, None)
        mine[cid], vers[cid] = etag, ver
        while len(mine) > MAX_MINE:
            old = next(iter(mine))
            del mine[old], vers[old]

    def synced_mine(self, ns: str, cursor: int) -> None:
        """A sync of ``ns`` reached ``cursor``: own commits up to it need no skipping."""
        vers = self.mine_ver.get(ns)
        if not vers:
            return
        mine = self.mine[ns]
        for cid in [c for c, v in vers.items() if v <= cursor]:
            del mine[cid], vers[cid]

    def forget_mine(self, cid: str, ns: str | None) -> None:
        """``cid`` left the cache: its own commits must be synced again."""
        for n in (ns,) if ns is not None else tuple(self.mine):
            if n in self.mine and cid in self.mine[n]:
                del self.mine[n][cid], self.mine_ver[n][cid]

    # -- writes

    def _side_of(self, cid: str | None, tenant: str) -> _Side:
        s = self._side.get(cid)
        if s is None:
            s = self._side[cid] = _Side(tenant)
        if self._side_task is None:
            with contextlib.suppress(RuntimeError):  # no running loop: flushed later
                self._side_task = asyncio.get_running_loop().create_task(self._flush_side())
        return s

    def conversation(self, rec: ConversationRecord) -> None:
        txn = self.txns.get(rec.id)
        if txn is not None:
            txn.stats = True
        else:  # outside a transaction only the token counts change (settled late)
            self._side_of(rec.id, rec.tenant).stats = stats_of(rec)

    def messages(self, rec: ConversationRecord, msgs: Iterable[Message]) -> None:
        txn = self.txns.get(rec.id)
        target = txn.messages if txn is not None else self._side_of(rec.id, rec.tenant).messages
        for m in msgs:
            target[m.digest] = m

    def blob(self, rec: ConversationRecord, key: str, text: str) -> None:
        txn = self.txns.get(rec.id)
        if txn is not None:
            txn.blobs[key] = text

    def timeline(self, rec: ConversationRecord, entry: TimelineEntry) -> None:
        txn = self.txns.get(rec.id)
        target = txn.timeline if txn is not None else self._side_of(rec.id, rec.tenant).timeline
        target[entry.seq] = entry

    def event(self, rec: ConversationRecord, ev: GateEvent) -> None:
        txn = self.txns.get(rec.id)
        (txn.events if txn is not None else self._side_of(rec.id, rec.tenant).events).append(ev)

    def log(self, cid: str | None, tenant: str, entry: dict[str, Any]) -> None:
        txn = self.txns.get(cid) if cid is not None else None
        (txn.log if txn is not None else self._side_of(cid, tenant).log).append(entry)

    def after_commit(self, cid: str | None, fn: Callable[[], None]) -> None:
        txn = self.txns.get(cid) if cid is not None else None
        if txn is not None:
            txn.after.append(fn)
        else:
            fn()

    def forget(self, ids: list[str]) -> None:
        """Nothing: another process may still use a conversation this one evicts."""

    # -- side writes

    async def _flush_side(self) -> None:
        try:
            while self._side:
                batch, self._side = self._side, {}
                writes = [
                    SideWrite(
                        cid,
                        s.tenant,
                        tuple(e.as_dict() for e in s.timeline.values()),
                        tuple(s.events),
                        tuple(s.log),
                        tuple(s.messages.values()),
                        s.stats,
                    )
                    for cid, s in batch.items()
                ]
                try:
                    await self.store.side(writes)
                except StateUnavailable as exc:
                    self._side_error = exc
                    log.warning("state: side writes lost (%s)", exc.reason)
        finally:
            self._side_task = None

    async def flush(self) -> None:
        """Wait until every side write made so far is sent (and raise
        :class:`~proxy.state.protocol.StateUnavailable` if some could not be)."""
        while self._side_task is not None or self._side:
            task = self._side_task
            if task is None:
                self._side_task = task = asyncio.get_running_loop().create_task(self._flush_side())
            await asyncio.shield(task)
        err, self._side_error = self._side_error, None
        if err is not None:
            raise err
