"""The tracker's bookkeeping after a request: replies and deferred token accounting.

A reply is recorded (:meth:`Bookkeeping.record_reply`) once the event loop is quiet
(:meth:`Bookkeeping.later`, :mod:`proxy.gate.quiet`), after a worker thread counting the
conversation's first-seen history when there is one; a request's token accounting left
pending by ``observe(defer_accounting=True)`` is settled (:meth:`Bookkeeping._settle`)
with its reply, before the conversation's next request, or when it is read
(:mod:`proxy.gate.ledger`). A mixin of :class:`~proxy.gate.tracker.Tracker`
(:mod:`proxy.gate.tracker_parts`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from proxy.core.messages import Message, Snapshot
from proxy.core.responses import Reply
from proxy.gate.background import in_daemon_thread, in_loop
from proxy.gate.budget import record_bytes
from proxy.gate.ledger import PendingCount, count_request
from proxy.gate.observation import Observation
from proxy.gate.tracker_parts import TrackerParts
from proxy.state.offload import BACKGROUND_NICE
from proxy.state.records import ConversationRecord

__all__ = ["Bookkeeping"]


class Bookkeeping(TrackerParts):
    """See the module docstring."""

    def settle_all(self) -> None:
        """Record every waiting reply and settle every pending accounting (readers,
        flush and shutdown call this)."""
        self._drain()
        for cid in list(self._pending):
            self._settle(cid)

    def _settle_tenant(self, tenant: str) -> None:
        """:meth:`settle_all` for what a request of ``tenant`` can match (no conversation
        crosses tenants): another tenant's 10 MB reply is not parsed for it."""
        self._drain(tenant)
        for cid in list(self._pending):
            rec = self._recs.get(cid)
            if rec is None or rec.tenant == tenant:
                self._settle(cid)

    def later(
        self, fn: Callable[[], None], conversation_id: str | None = None, after: asyncio.Future[Any] | None = None
    ) -> None:
        """Run ``fn`` — bookkeeping that updates this tracker, such as recording a reply
        — once the event loop is quiet (see :mod:`proxy.gate.quiet`): after the other
        requests of a burst, at the latest before the next request is observed or
        anything is read. While a worker thread still counts the first-seen history of
        ``conversation_id``, ``fn`` waits for it too (then it finds the counts made), and
        so for ``after`` (a large reply parsed off the loop); a drain does not wait —
        unless it is for another tenant's request (no conversation crosses tenants)."""
        fut = after if after is not None and not after.done() else None
        fut = fut or (self._counting.get(conversation_id) if conversation_id else None)
        if fut is None or fut.done():
            self._later.push(fn)
            return
        rec = self._recs.get(conversation_id) if conversation_id else None
        self._waiting[fn] = rec.tenant if rec is not None else None

        def ready(_: asyncio.Future[Any]) -> None:
            if fn in self._waiting:  # not run by an earlier drain
                del self._waiting[fn]
                self.later(fn, conversation_id)

        fut.add_done_callback(ready)

    def _count_ahead(self, cid: str, model: str | None, msgs: tuple[Message, ...], first_sight: bool) -> None:
        """Count in a worker thread (tiktoken releases the GIL) the long texts of
        ``msgs`` (:meth:`~proxy.accounting.TokenAccounting.precount`) and, for a
        first-seen history (``first_sight``), all of its messages; the conversation's
        reply is recorded once it is done (:meth:`later`) and finds the counts made."""

        def count() -> None:
            self.accounting.precount(model, msgs)
            if first_sight:
                self.accounting.count_messages(model, msgs)

        fut = in_daemon_thread(count, nice=BACKGROUND_NICE)
        self._counting[cid] = fut

        def done(f: asyncio.Future[Any]) -> None:
            if self._counting.get(cid) is f:
                del self._counting[cid]

        fut.add_done_callback(done)

    def _drain(self, tenant: str | None = None) -> None:
        """Run every waiting bookkeeping now (also what waits for a counting thread: the
        loop counts what the thread has not counted yet, and what such bookkeeping leaves
        waiting in turn) — for a request of ``tenant``, what waits for another tenant's
        conversation goes on waiting."""
        while True:
            run = [fn for fn, t in self._waiting.items() if tenant is None or t is None or t == tenant]
            for fn in run:
                del self._waiting[fn]
                self._later.push(fn)
            self._later.drain()
            if not any(tenant is None or t is None or t == tenant for t in self._waiting.values()):
                return

    def record_counted(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None:
        """:meth:`record_reply`, once a worker thread has counted the reply's long texts
        (:meth:`~proxy.accounting.TokenAccounting.precount`: tiktoken on a long text's
        estimate windows is milliseconds of the event loop) — at once when there are
        none, outside an event loop, or in a drain that comes first (which counts them
        on the loop)."""
        msgs = reply.messages if reply is not None else ()
        if not msgs or not self.accounting.needs_precount(obs.model, msgs) or not in_loop():
            self.record_reply(obs, reply, status)
            return
        fut = in_daemon_thread(self.accounting.precount, obs.model, msgs, nice=BACKGROUND_NICE)
        self.later(lambda: self.record_reply(obs, reply, status), obs.conversation_id, fut)

    def record_reply(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None:
        """Record the assistant's reply to ``obs`` (``None``: no reply, e.g. an upstream
        error). Appended to the history only if ``obs`` is still the conversation's
        latest request and was not a side request; usage always goes to the timeline."""
        rec = self._recs.get(obs.conversation_id)
        if rec is None:
            return
        ending = self._replica.committing(rec.id) if self._replica is not None else None
        if ending is not None:  # an early commit of the request (another came): record after it
            ending.add_done_callback(lambda _f: self.record_reply(obs, reply, status))
            return
        msgs = reply.messages if reply is not None else ()
        advances = bool(msgs) and (
            obs.relation == "side_request" or (rec.seq == obs.seq and reply is not None and reply.complete)
        )
        own_txn = advances and self._replica is not None and self._replica.busy(rec.id) is None
        if own_txn:
            assert self._replica is not None
            self._replica.begin(rec)
        pending = self._pending.get(rec.id)
        own = pending is not None and pending.entry.seq == obs.seq
        self._settle(rec.id, write=not own)  # this request's own entry is written below
        entry = self._entry(rec, obs.seq)
        if entry is not None:
            entry.status = status if reply is None or reply.complete or status != "ok" else "incomplete"
            if reply is not None:
                entry.usage = reply.usage.as_dict() if reply.usage else None
                entry.reply_messages = len(msgs)
                entry.reply_tokens = sum(self.accounting.count_message(obs.model, x) for x in msgs) if msgs else 0
                entry.reply_estimated = self.accounting.any_estimated(obs.model, msgs)
                if entry.reply_estimated and self.accounting.needs_precount(obs.model, msgs):
                    in_daemon_thread(self.accounting.precount, obs.model, msgs, nice=BACKGROUND_NICE)
                if obs.relation == "side_request":
                    entry.reply_digests = [x.digest for x in msgs]
            self._w.timeline(rec, entry)
        if msgs:
            self._w.messages(rec, msgs)
            self.lines.remember(self.index, rec.id, msgs)
            if obs.relation == "side_request":
                rec.side_digests = (rec.side_digests + tuple(x.digest for x in msgs))[-32:]
            elif advances:
                self._append_reply(rec, obs, msgs)
            # else: a later request already moved the conversation on, or cut short
        self._w.conversation(rec)
        self.budget.set_record(rec.id, record_bytes(rec))
        if self.budget.over():
            self._shed()
        if own_txn:
            self._commit_soon(rec.id)

    def _append_reply(self, rec: ConversationRecord, obs: Observation, msgs: tuple[Message, ...]) -> None:
        """Make the reply the end of the conversation's history."""
        hot = self._hot.get(rec.id)
        reply = tuple(x.digest for x in msgs)
        rec.digests = rec.digests[: rec.request_len] + reply
        if hot is not None:
            base = hot.snapshot
            hot.snapshot = Snapshot(
                base.dialect, base.system, base.messages[: rec.request_len] + msgs, base.tools, base.model
            ).with_digests(base.digests[: rec.request_len] + reply)  # the next request compares them
            del hot.cum[rec.request_len + 1 :]
            for x in msgs:
                hot.cum.append(hot.cum[-1] + self.accounting.count_message(obs.model, x))
        self.index.upsert(self._history(rec), rec.request_len)
        if hot is not None:
            self._account_hot(rec.id, base.messages, hot.snapshot.messages, rec.request_len)

    def _account(self, rec: ConversationRecord, p: PendingCount, write: bool = True) -> None:
        """Count request ``p`` of ``rec`` (:func:`~proxy.gate.ledger.count_request`); the
        conversation's latest request also updates the cumulative counts of its history."""
        cum, tokenizer = count_request(self.accounting, rec, p)
        entry = p.entry
        if entry.relation != "side_request" and rec.seq == entry.seq:
            hot = self._hot.get(rec.id)
            if hot is not None and hot.snapshot is p.snapshot:
                hot.cum, hot.tokenizer = cum, tokenizer
        self.lines.remember(self.index, rec.id, p.new)
        if write:
            self._w.timeline(rec, entry)
            self._w.conversation(rec)

    def _settle(self, conversation_id: str, write: bool = True) -> None:
        p = self._pending.pop(conversation_id, None)
        rec = self._recs.get(conversation_id) if p is not None else None
        if p is not None and rec is not None:
            self._account(rec, p, write)
