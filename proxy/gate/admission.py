"""Recording a matched request: the synchronous step of ``Tracker.observe``.

Once ``observe`` has resolved which conversation a request belongs to (the match, after
any sync, wait or hydration: its suspension points), :func:`record_request` applies it
to the tracker's state in one go, with no ``await``: it opens the record (the matched
one, its previous request's counts settled, or a new one; its transaction begun on a
shared store), writes the new messages and blobs, appends the timeline entry with its
counters, makes the request the conversation's current history (record, hot snapshot,
memory account, lineage index, normaliser) and counts its tokens now or leaves them
pending (:mod:`proxy.gate.ledger`). That is what makes concurrent requests of one
conversation serialised by construction (see :mod:`proxy.gate.tracker`).

These are functions of the tracker ``t`` (:class:`~proxy.gate.tracker.Tracker`) over
its structures, declared in :mod:`proxy.gate.tracker_parts`, called once per request
from ``observe``: separate from the tracker's lifecycle, queries and hooks, and from
the parts that record replies (:mod:`proxy.gate.bookkeeping`), keep memory bounded
(:mod:`proxy.gate.residency`) and cache a shared store (:mod:`proxy.gate.replica_sync`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.accounting import ModelInfo
from proxy.core.lineage import Match, Relation
from proxy.core.messages import Message, Snapshot
from proxy.core.prefix import common_prefix
from proxy.gate.hot import Hot, tools_blob
from proxy.gate.identity import ExplicitId, new_conversation_id
from proxy.gate.ledger import PendingCount, no_counts
from proxy.gate.normalize import Normalized
from proxy.gate.observation import Observation
from proxy.server.hooks import Exchange
from proxy.state.records import COMPACTION_KINDS, ConversationRecord, TimelineEntry

if TYPE_CHECKING:
    from proxy.gate.tracker import Tracker

__all__ = ["FIRST_SIGHT_MESSAGES", "record_request"]

#: New messages from which a request's token counting starts at once in a worker thread
#: (a long history seen for the first time): its reply is recorded once the thread is
#: done, so the event loop does not count them (unless someone needs them sooner).
FIRST_SIGHT_MESSAGES = 200


def record_request(
    t: Tracker,
    ex: Exchange,
    body: dict[str, Any],
    api: str,
    namespace: str,
    explicit: ExplicitId | None,
    norm: Normalized,
    m: Match,
    agent: str | None,
    model: str | None,
    defer: bool,
) -> Observation:
    """Record the request. Synchronous: atomic with respect to other requests.
    ``defer``: leave its token accounting pending (see :mod:`proxy.gate.ledger`)."""
    now = t.clock()
    snap = norm.snapshot
    rec, relation = _open(t, ex, namespace, explicit, m, now)
    cid = rec.id
    hot = t._hot.get(cid)
    previous = hot.snapshot if hot is not None else None
    info = t.accounting.model_info(model)
    if relation == "side_request":
        defer = False  # rare, and it does not advance the conversation

    # tokens: reuse the cumulative counts of the shared prefix
    base_cum = no_counts()
    if hot is not None and hot.tokenizer == info.tokenizer and relation in ("extend", "side_request"):
        p = min(m.prefix_len, len(hot.cum) - 1)
        base_cum = hot.cum[: p + 1]

    new_from = m.prefix_len if relation == "extend" else 0
    new_msgs = snap.messages[new_from:] if relation == "extend" else _unseen(rec, snap)
    _store_new(t, rec, norm, new_msgs)
    entry = _new_entry(t, ex, rec, relation, snap, m, len(new_msgs), info, model, now)
    if relation != "side_request":
        _advance(t, rec, namespace, api, body, norm, m, relation, previous, Hot(snap, base_cum, info.tokenizer), info)
        rec.model = model or rec.model
    elif rec.model is None:
        rec.model = model
    t._touch(cid)
    pending = PendingCount(
        entry, model, snap, norm.system_hash, norm.tools_hash, base_cum, info.tokenizer, new_msgs
    )
    _count(t, rec, pending, defer)
    t._evict(now)
    return Observation(
        conversation_id=cid,
        tenant=ex.tenant,
        api=api,
        relation=relation,
        match=m,
        previous=previous,
        current=snap,
        seq=entry.seq,
        is_summarization_request=agent is not None,
        summarization_agent=agent or None,
        explicit=explicit,
        parent_id=rec.parent_id,
        new_messages=entry.new_messages,
        tokens=None if defer else entry.tokens,
        window=info.window,
        share=None if defer else entry.share,
        exact=info.exact,
        stream=ex.stream,
        model=model,
        request_id=ex.request_id,
    )


def _open(
    t: Tracker, ex: Exchange, namespace: str, explicit: ExplicitId | None, m: Match, now: float
) -> tuple[ConversationRecord, Relation]:
    """The record the request changes — the matched one (its previous request's
    counts settled: they are this one's base) or a new one — with its transaction
    opened on a shared store, and the request's relation to it."""
    cid = m.conversation_id
    rec = t._recs.get(cid) if cid is not None else None
    if rec is not None:
        if t._replica is not None:
            t._replica.begin(rec)
        t._settle(rec.id)
        return rec, m.relation
    cid = new_conversation_id(explicit, t._recs if t._replica is None else t._taken())
    rec = ConversationRecord(
        id=cid,
        tenant=ex.tenant,
        namespace=namespace,
        created=now,
        last_seen=now,
        explicit_id=explicit.value if explicit else None,
        explicit_source=explicit.source if explicit else None,
        parent_id=m.parent_id,
    )
    t._recs[cid] = rec
    if t._replica is not None:
        t._replica.begin(rec, create=True)
    return rec, m.relation if m.relation in ("new", "fork") else "new"


def _store_new(t: Tracker, rec: ConversationRecord, norm: Normalized, new_msgs: tuple[Message, ...]) -> None:
    """Write the request's new messages, and its system prompt and tools when new."""
    snap = norm.snapshot
    t._w.messages(rec, new_msgs)
    if norm.system_hash and (norm.system_hash != rec.system_hash or not t._hot.has_blob(norm.system_hash)):
        _put_blob(t, rec, norm.system_hash, snap.system)
    if norm.tools_hash and (norm.tools_hash != rec.tools_hash or not t._hot.has_blob(norm.tools_hash)):
        _put_blob(t, rec, norm.tools_hash, tools_blob(snap.tools))


def _new_entry(
    t: Tracker,
    ex: Exchange,
    rec: ConversationRecord,
    relation: Relation,
    snap: Snapshot,
    m: Match,
    new: int,
    info: ModelInfo,
    model: str | None,
    now: float,
) -> TimelineEntry:
    """The request's timeline entry (``new``: how many of its messages are new),
    appended to the record with its counters."""
    rec.seq += 1
    entry = TimelineEntry(
        seq=rec.seq,
        at=now,
        relation=relation,
        transition=relation,
        messages=len(snap.messages),
        new_messages=new if relation != "side_request" else max(0, len(snap.messages) - m.prefix_len),
        dropped=m.dropped,
        tokens=0,
        window=info.window,
        share=None,
        exact=info.exact,
        model=model,
        stream=ex.stream,
        request_id=ex.request_id,
    )
    rec.timeline.append(entry)
    rec.compactions += relation in COMPACTION_KINDS
    rec.side_requests += relation == "side_request"
    rec.last_relation = relation
    if len(rec.timeline) > t.config.max_timeline:
        del rec.timeline[: len(rec.timeline) - t.config.max_timeline]
    rec.last_seen = now
    return entry


def _advance(
    t: Tracker,
    rec: ConversationRecord,
    namespace: str,
    api: str,
    body: dict[str, Any],
    norm: Normalized,
    m: Match,
    relation: Relation,
    previous: Snapshot | None,
    hot: Hot,
    info: ModelInfo,
) -> None:
    """Make the request the conversation's current history (not for side requests):
    the record, its hot snapshot ``hot`` and memory account, the lineage index, the
    normaliser's memory of the body."""
    cid, snap = rec.id, norm.snapshot
    rec.dialect = snap.dialect
    rec.system_hash = norm.system_hash
    rec.tools_hash = norm.tools_hash
    rec.digests = norm.digests
    rec.request_len = len(norm.digests)
    rec.window = info.window
    rec.exact = info.exact
    t._hot.set(cid, hot)
    kept = m.prefix_len if relation == "extend" else 0
    same = common_prefix(previous.digests, snap.digests, kept) if previous is not None else 0
    t._account_hot(cid, previous.messages if previous is not None else None, snap.messages, same)
    t.index.upsert(t._history(rec), kept)
    t.normalizer.remember(namespace, cid, api, body, norm)
    t._resynced.discard(cid)


def _count(t: Tracker, rec: ConversationRecord, pending: PendingCount, defer: bool) -> None:
    """Count the request's tokens now, or leave them pending (``defer``; a long
    first-seen history starts counting in a worker thread)."""
    new_msgs = pending.new
    first_sight = defer and len(new_msgs) >= FIRST_SIGHT_MESSAGES
    if first_sight or t.accounting.needs_precount(pending.model, new_msgs):
        # long texts (and a long first-seen history) are counted in a worker thread
        # (tiktoken releases the GIL), not on the event loop; the reply's record, which
        # settles the count, waits for it; a settle that comes first counts on the loop
        t._count_ahead(rec.id, pending.model, new_msgs, first_sight)
    if not defer:
        t._account(rec, pending)
        return
    t._pending[rec.id] = pending
    if t._replica is not None:  # committed with the request, counted later
        t._w.timeline(rec, pending.entry)
        t._w.conversation(rec)


def _unseen(rec: ConversationRecord, snap: Snapshot) -> tuple[Message, ...]:
    known = set(rec.digests)
    return tuple(x for x in snap.messages if x.digest not in known)


def _put_blob(t: Tracker, rec: ConversationRecord, key: str, text: str) -> None:
    t._hot.keep_blob(key, text)
    t._w.blob(rec, key, text)
