"""The conversation tracker: identity, lineage, history, replies, timeline.

:class:`Tracker` is the stateful layer over the pure core. For each proxied request of a
conversational API (OpenAI chat, Responses, Anthropic messages) :meth:`Tracker.observe`
normalises the body (incrementally), resolves the conversation (explicit id, else
lineage by message hashes, scoped by tenant), records the request in the conversation's
history and timeline, and returns an :class:`Observation` — including the previous
snapshot of the conversation, which the gate diffs to see what a compaction lost.
:meth:`Tracker.record_reply` records the assistant's reply; the tap and the
interceptor that feed it live in :mod:`proxy.gate.tracking`.

Concurrency: every mutation of a conversation happens synchronously within one
event-loop step (no ``await`` between reading and writing its state), so concurrent
requests on one conversation are serialised by construction. The only suspension point
— loading a cold conversation from the store — runs under a per-conversation
``asyncio.Lock`` and is followed by a fresh match. A reply updates the history only if
no later request of the conversation was recorded meanwhile.

Cost: per request the Python-level work grows with the *new* messages (normalised,
hashed, tokenised and scanned once, cached by digest); the history itself is only
touched by C-level comparisons. Store writes are enqueued and batched off the loop. The
interceptors observe with the token accounting deferred (:mod:`proxy.gate.ledger`):
it is settled after the response, before the conversation's next request, or when the
conversation is read, so tokenising is never on a request's critical path. Replies fed
by the tap are recorded once the event loop is quiet (:mod:`proxy.gate.quiet`): after
the rest of a burst of requests, and always before the next request is observed or
anything is read.

Secrets: only the tenant hash is kept; no header value is stored (explicit session ids
become conversation ids).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import logging
import secrets
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.accounting import TokenAccounting
from proxy.core.lineage import (
    History,
    LineageIndex,
    Match,
    Probe,
    Relation,
    match,
)
from proxy.core.markers import Markers, default_markers
from proxy.core.messages import Message, MessageFormatError, Snapshot, ToolDef
from proxy.core.redaction import has_secret
from proxy.core.responses import Reply
from proxy.gate.hints import LineMemory, RequestHints
from proxy.gate.identity import ExplicitId, explicit_id
from proxy.gate.ledger import PendingCount, cumulative, no_counts, share_of
from proxy.gate.normalize import IncrementalNormalizer, Normalized
from proxy.gate.quiet import QuietQueue
from proxy.gate.tracking import TrackingTap
from proxy.server.hooks import Exchange
from proxy.state.memory import MemoryStore
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry
from proxy.state.store import Store

__all__ = ["TRACKED_KINDS", "Observation", "Tracker", "TrackerConfig"]

log = logging.getLogger(__name__)

#: API kinds whose requests carry a conversation history.
TRACKED_KINDS: frozenset[str] = frozenset({"chat", "messages", "responses"})

_SHORT_REQUEST = 3
#: New messages from which a request's token counting starts at once in a worker thread
#: (a long history seen for the first time): its reply is recorded once the thread is
#: done, so the event loop does not count them (unless someone needs them sooner).
FIRST_SIGHT_MESSAGES = 200


@dataclass(frozen=True)
class TrackerConfig:
    """Bounds of the tracker. ``ttl_seconds``: conversations idle longer are evicted;
    ``max_conversations``: beyond it the least recently used are evicted;
    ``hot_conversations``: how many full snapshots stay in memory (others are re-read
    from the store when needed); ``max_timeline``: timeline entries kept in memory per
    conversation (all are stored)."""

    ttl_seconds: float = 7 * 24 * 3600.0
    max_conversations: int = 10_000
    hot_conversations: int = 512
    max_timeline: int = 1000
    max_events: int = 1000


@dataclass(frozen=True)
class Observation:
    """What the tracker knows about one request, for the policy layer.

    ``previous`` is the conversation's history before this request (its last request's
    messages followed by the recorded reply), ``None`` for a new conversation or when it
    could not be loaded. ``current`` is this request. ``relation`` comes from lineage
    (``extend``, ``compacted``, ``side_request``, ``fork``, ``new``); a side request does
    not advance the conversation. ``seq`` identifies this request's timeline entry.
    ``tokens`` and ``share`` are ``None`` when the request was observed with its
    accounting deferred (they land in the timeline entry once settled).
    """

    conversation_id: str
    tenant: str
    api: str
    relation: Relation
    match: Match
    previous: Snapshot | None
    current: Snapshot
    seq: int
    is_summarization_request: bool
    summarization_agent: str | None
    explicit: ExplicitId | None
    parent_id: str | None
    new_messages: int
    tokens: int | None
    window: int | None
    share: float | None
    exact: bool
    stream: bool
    model: str | None
    request_id: str = ""


@dataclass
class _Hot:
    """In-memory state of a conversation: its current history as a snapshot and the
    cumulative token counts of its messages (``cum[i]`` = tokens of the first ``i``)."""

    snapshot: Snapshot
    cum: array[int] = field(default_factory=no_counts)
    tokenizer: str = ""


def _tools_blob(tools: tuple[ToolDef, ...]) -> str:
    return json.dumps([[t.name, t.description, t.schema] for t in tools], separators=(",", ":"))


def _tools_from_blob(text: str) -> tuple[ToolDef, ...]:
    try:
        return tuple(ToolDef(n, d, s) for n, d, s in json.loads(text))
    except (ValueError, TypeError):
        return ()


class Tracker:
    """Tracks conversations over a :class:`~proxy.state.store.Store`.

    Call :meth:`start` once (opens the store, loads the conversations) and
    :meth:`close` at shutdown (flushes).
    """

    def __init__(
        self,
        store: Store | None = None,
        config: TrackerConfig | None = None,
        *,
        accounting: TokenAccounting | None = None,
        markers: Markers | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store: Store = store if store is not None else MemoryStore()
        self.config = config or TrackerConfig()
        self.accounting = accounting or TokenAccounting()
        self._markers = markers
        self.clock = clock
        self.index = LineageIndex()
        self.normalizer = IncrementalNormalizer()
        self._recs: OrderedDict[str, ConversationRecord] = OrderedDict()
        self._hot: OrderedDict[str, _Hot] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.hints = RequestHints(lambda: self.markers)
        self.lines = LineMemory()
        self._blob_cache: OrderedDict[str, str] = OrderedDict()
        #: requests recorded with their accounting pending, per conversation (at most
        #: one each: recording the next request settles the previous one)
        self._pending: dict[str, PendingCount] = {}
        #: bookkeeping waiting for a quiet event loop (see :meth:`later`)
        self._later: QuietQueue[Callable[[], None]] = QuietQueue(lambda fn: fn())
        #: per conversation, the worker thread counting its first-seen history, and the
        #: bookkeeping waiting for it (see :meth:`later`)
        self._counting: dict[str, asyncio.Future[Any]] = {}
        self._waiting: list[Callable[[], None]] = []
        self._started = False
        #: The tokenizer/markers preload started by :meth:`start` (awaited by the first
        #: requests instead of by the start-up, so the server listens at once).
        self._preloaded: asyncio.Future[Any] | None = None

    @property
    def markers(self) -> Markers:
        if self._markers is None:
            self._markers = default_markers()
        return self._markers

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the store and load every stored conversation into the index (history
        digests only; message contents are loaded lazily). Loads the tokenizers (so the
        first request does not). litellm is not imported here: model windows come from
        its model map read as data, and only a model that needs one of litellm's own
        tokenizers imports it (:meth:`TokenAccounting.warm`, in a daemon thread)."""
        if self._started:
            return
        self._started = True
        self._preloaded = _in_daemon_thread(self._preload)
        await self.store.open()
        recs = await self.store.load(self.config.max_timeline)
        recs.sort(key=lambda r: r.last_seen)
        for rec in recs:
            self._recs[rec.id] = rec
            self.index.upsert(self._history(rec))
        self._evict(self.clock())

    async def ready(self) -> None:
        """Wait for the start-up preload (tokenizers, markers) unless it is done: a request
        arriving in the first second waits for it rather than loading the same files on
        the event loop. Never raises (a failed preload loads lazily instead)."""
        fut = self._preloaded
        if fut is not None and not fut.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)

    def _preload(self) -> None:
        """What the first request would otherwise load: tokenizers, agent markers."""
        self.accounting.preload()
        _ = self.markers

    async def close(self) -> None:
        self.settle_all()
        await self.store.close()

    async def flush(self) -> None:
        self.settle_all()
        await self.store.flush()

    def settle_all(self) -> None:
        """Record every waiting reply and settle every pending accounting (readers,
        flush and shutdown call this)."""
        self._drain()
        for cid in list(self._pending):
            self._settle(cid)

    # ------------------------------------------------------------------ queries

    def get(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation, its replies recorded and its accounting settled."""
        self._drain()
        self._settle(conversation_id)
        return self._recs.get(conversation_id)

    def conversations(self) -> list[ConversationRecord]:
        """All live conversations, most recently seen first, their replies recorded and
        their accounting settled."""
        self.settle_all()
        return list(reversed(self._recs.values()))

    async def history(self, conversation_id: str) -> Snapshot | None:
        """The conversation's current history (loaded from the store if cold)."""
        self._drain()
        hot = self._hot.get(conversation_id)
        if hot is not None:
            return hot.snapshot
        await self._hydrate(conversation_id)
        hot = self._hot.get(conversation_id)
        return hot.snapshot if hot else None

    # ------------------------------------------------------------------ policy hooks

    def add_event(
        self,
        conversation_id: str,
        kind: str,
        *,
        action: str = "none",
        message: str = "",
        details: Mapping[str, Any] | None = None,
        request_seq: int | None = None,
    ) -> GateEvent | None:
        """Append an event to a conversation (the policy layer's record of what it saw
        and did). ``details`` must be JSON-serialisable and free of secrets."""
        rec = self._recs.get(conversation_id)
        if rec is None:
            return None
        rec.event_seq += 1
        ev = GateEvent(rec.event_seq, self.clock(), kind, action, request_seq, message, dict(details or {}))
        rec.events.append(ev)
        if len(rec.events) > self.config.max_events:
            del rec.events[: len(rec.events) - self.config.max_events]
        self.store.put_event(rec.id, ev)
        self.store.save_conversation(rec)
        return ev

    def gate_state(self, conversation_id: str) -> dict[str, Any] | None:
        """The gate's stored state of a conversation (see :mod:`proxy.gate.convstate`)."""
        rec = self._recs.get(conversation_id)
        return rec.gate_state if rec is not None else None

    def save_gate_state(self, conversation_id: str, state: dict[str, Any] | None) -> None:
        """Store the gate's state of a conversation with its record (written through)."""
        rec = self._recs.get(conversation_id)
        if rec is None:
            return
        rec.gate_state = state
        self.store.save_conversation(rec)

    def seen_span(self, conversation_id: str, first_index: int) -> tuple[float | None, float | None]:
        """When the messages from ``first_index`` of the conversation's previous history
        were on the wire: the earliest of its latest run of requests that held that
        message, and its last request before the current one (``None`` when unknown)."""
        rec = self._recs.get(conversation_id)
        if rec is None or len(rec.timeline) < 2:
            return None, None
        earlier = rec.timeline[:-1]  # the last entry is the request being judged
        since: float | None = None
        for e in reversed(earlier):
            if e.messages + e.reply_messages <= first_index:
                break
            since = e.at
        return since, earlier[-1].at

    def set_transition(self, conversation_id: str, seq: int, transition: str) -> None:
        """Refine the transition kind of one timeline entry (e.g. ``summarize``,
        ``truncate``, ``mask``) once the policy layer classified it."""
        rec = self._recs.get(conversation_id)
        entry = self._entry(rec, seq) if rec else None
        if rec is not None and entry is not None:
            entry.transition = transition
            self.store.put_timeline(rec.id, entry)

    # ------------------------------------------------------------------ observe

    @staticmethod
    def tracks(ex: Exchange) -> bool:
        """Could ``ex`` carry a conversation (an API kind with a history, a JSON body)?"""
        return ex.kind in TRACKED_KINDS and ex.method == "POST" and isinstance(ex.json, dict)

    async def observe(self, ex: Exchange, *, defer_accounting: bool = False) -> Observation | None:
        """Track one request; ``None`` when it carries no conversation (other API
        kinds, non-JSON or malformed bodies).

        ``defer_accounting``: count the request's tokens later (when its reply is
        recorded, before the conversation's next request, or when the conversation is
        read), so that what is needed to forward the request is ready sooner; the
        observation's ``tokens`` and ``share`` are then ``None``. Side requests are
        always counted at once."""
        if not self.tracks(ex):
            return None
        await self.ready()
        self._drain()  # the previous reply is part of what this request extends
        assert isinstance(ex.json, dict)
        body: dict[str, Any] = ex.json
        api = ex.kind
        explicit = explicit_id(ex.headers, body)
        namespace = ex.tenant if explicit is None else f"{ex.tenant}|{explicit.value}"
        try:
            norm = self.normalizer.normalize(namespace, api, body)
        except (MessageFormatError, AttributeError, TypeError, KeyError):
            return None
        snap = norm.snapshot
        model = ex.model or snap.model
        self._ensure_warm(model)
        agent = self.hints.summarization_agent(snap) or self.hints.request_agent(ex.headers, body)
        lines = self.lines.probe(snap) if len(snap.messages) <= _SHORT_REQUEST else frozenset()
        if lines:
            self.settle_all()  # line matching sees every recorded request's lines
        probe = Probe(
            namespace,
            norm.system_hash,
            norm.digests,
            agent is not None,
            lines,
            explicit is not None,
            self.hints.continuation_agent(snap) is not None or self.hints.continued_by_item(body) is not None,
            norm.reused_from,
            norm.reused,
        )

        for _attempt in range(3):
            m = match(self.index, probe)
            cid = m.conversation_id
            if cid is not None and cid in self._recs and cid not in self._hot:
                await self._hydrate(cid)  # suspension point: match again afterwards
                continue
            break
        return self._apply(ex, body, api, namespace, explicit, norm, m, agent, model, defer_accounting)

    def _apply(
        self,
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
        now = self.clock()
        snap = norm.snapshot
        cid = m.conversation_id
        rec = self._recs.get(cid) if cid is not None else None
        if rec is not None:
            self._settle(rec.id)  # the previous request's counts are this one's base
        if rec is None:
            cid = self._new_id(explicit, ex.tenant)
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
            self._recs[cid] = rec
            relation: Relation = m.relation if m.relation in ("new", "fork") else "new"
        else:
            relation = m.relation
        assert cid is not None
        hot = self._hot.get(cid)
        previous = hot.snapshot if hot is not None else None
        info = self.accounting.model_info(model)
        if relation == "side_request":
            defer = False  # rare, and it does not advance the conversation

        # tokens: reuse the cumulative counts of the shared prefix
        base_cum = no_counts()
        if hot is not None and hot.tokenizer == info.tokenizer and relation in ("extend", "side_request"):
            p = min(m.prefix_len, len(hot.cum) - 1)
            base_cum = hot.cum[: p + 1]

        new_from = m.prefix_len if relation == "extend" else 0
        new_msgs = snap.messages[new_from:] if relation == "extend" else self._unseen(rec, snap)
        self.store.put_messages(new_msgs)
        if norm.system_hash and norm.system_hash not in self._blob_cache:
            self._put_blob(norm.system_hash, snap.system)
        if norm.tools_hash and norm.tools_hash not in self._blob_cache:
            self._put_blob(norm.tools_hash, _tools_blob(snap.tools))

        rec.seq += 1
        entry = TimelineEntry(
            seq=rec.seq,
            at=now,
            relation=relation,
            transition=relation,
            messages=len(snap.messages),
            new_messages=len(new_msgs) if relation != "side_request" else max(0, len(snap.messages) - m.prefix_len),
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
        if len(rec.timeline) > self.config.max_timeline:
            del rec.timeline[: len(rec.timeline) - self.config.max_timeline]
        rec.last_seen = now
        if relation != "side_request":
            rec.model = model or rec.model
            rec.dialect = snap.dialect
            rec.system_hash = norm.system_hash
            rec.tools_hash = norm.tools_hash
            rec.digests = norm.digests
            rec.request_len = len(norm.digests)
            rec.window = info.window
            rec.exact = info.exact
            self._hot[cid] = _Hot(snap, base_cum, info.tokenizer)
            self.index.upsert(self._history(rec), m.prefix_len if relation == "extend" else 0)
            self.normalizer.remember(namespace, cid, api, body, norm)
        elif rec.model is None:
            rec.model = model
        self._touch(cid)
        pending = PendingCount(
            entry, model, snap, norm.system_hash, norm.tools_hash, base_cum, info.tokenizer, new_msgs
        )
        if self.accounting.needs_precount(new_msgs):
            # long texts are counted in a worker thread (tiktoken releases the GIL), not on
            # the event loop; a settle that comes first estimates them (and says so)
            _in_daemon_thread(self.accounting.precount, model, new_msgs)
        if defer:
            self._pending[cid] = pending
            if len(new_msgs) >= FIRST_SIGHT_MESSAGES:
                self._count_first_sight(cid, model, new_msgs)
        else:
            self._account(rec, pending)
        self._evict(now)
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

    # ------------------------------------------------------------------ replies

    def later(self, fn: Callable[[], None], conversation_id: str | None = None) -> None:
        """Run ``fn`` — bookkeeping that updates this tracker, such as recording a reply
        — once the event loop is quiet (see :mod:`proxy.gate.quiet`): after the other
        requests of a burst, at the latest before the next request is observed or
        anything is read. While a worker thread still counts the first-seen history of
        ``conversation_id``, ``fn`` waits for it too (then it finds the counts made)."""
        fut = self._counting.get(conversation_id) if conversation_id else None
        if fut is None or fut.done():
            self._later.push(fn)
            return
        self._waiting.append(fn)

        def ready(_: asyncio.Future[Any]) -> None:
            if fn in self._waiting:  # not run by an earlier drain
                self._waiting.remove(fn)
                self._later.push(fn)

        fut.add_done_callback(ready)

    def _count_first_sight(self, cid: str, model: str | None, msgs: tuple[Message, ...]) -> None:
        """Count a first-seen history's messages in a worker thread (tiktoken releases
        the GIL); the conversation's reply is recorded once it is done (:meth:`later`)."""
        fut = _in_daemon_thread(self.accounting.count_messages, model, msgs)
        self._counting[cid] = fut

        def done(f: asyncio.Future[Any]) -> None:
            if self._counting.get(cid) is f:
                del self._counting[cid]

        fut.add_done_callback(done)

    def _drain(self) -> None:
        """Run every waiting bookkeeping now (also what waits for a counting thread: the
        loop counts what the thread has not counted yet)."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for fn in waiting:
                self._later.push(fn)
        self._later.drain()

    def record_reply(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None:
        """Record the assistant's reply to ``obs`` (``None``: no reply, e.g. an upstream
        error). Appended to the history only if ``obs`` is still the conversation's
        latest request and was not a side request; usage always goes to the timeline."""
        rec = self._recs.get(obs.conversation_id)
        if rec is None:
            return
        pending = self._pending.get(rec.id)
        own = pending is not None and pending.entry.seq == obs.seq
        self._settle(rec.id, write=not own)  # this request's own entry is written below
        entry = self._entry(rec, obs.seq)
        msgs = reply.messages if reply is not None else ()
        if entry is not None:
            entry.status = status if reply is None or reply.complete or status != "ok" else "incomplete"
            if reply is not None:
                entry.usage = reply.usage.as_dict() if reply.usage else None
                entry.reply_messages = len(msgs)
                entry.reply_tokens = sum(self.accounting.count_message(obs.model, x) for x in msgs) if msgs else 0
                entry.reply_estimated = self.accounting.any_estimated(obs.model, msgs)
                if entry.reply_estimated:
                    _in_daemon_thread(self.accounting.precount, obs.model, msgs)
                if obs.relation == "side_request":
                    entry.reply_digests = [x.digest for x in msgs]
            self.store.put_timeline(rec.id, entry)
        if msgs:
            self.store.put_messages(msgs)
            self.lines.remember(self.index, rec.id, msgs)
            if obs.relation == "side_request":
                rec.side_digests = (rec.side_digests + tuple(x.digest for x in msgs))[-32:]
            elif rec.seq == obs.seq and reply is not None and reply.complete:
                self._append_reply(rec, obs, msgs)
            # else: a later request already moved the conversation on, or cut short
        self.store.save_conversation(rec)

    def _append_reply(self, rec: ConversationRecord, obs: Observation, msgs: tuple[Message, ...]) -> None:
        """Make the reply the end of the conversation's history."""
        hot = self._hot.get(rec.id)
        rec.digests = rec.digests[: rec.request_len] + tuple(x.digest for x in msgs)
        if hot is not None:
            base = hot.snapshot
            hot.snapshot = Snapshot(base.dialect, base.system, base.messages[: rec.request_len] + msgs, base.tools, base.model)
            del hot.cum[rec.request_len + 1 :]
            for x in msgs:
                hot.cum.append(hot.cum[-1] + self.accounting.count_message(obs.model, x))
        self.index.upsert(self._history(rec), rec.request_len)

    def tap(self, obs: Observation) -> TrackingTap:
        return TrackingTap(self, obs)

    # ------------------------------------------------------------------ internals

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

    def _new_id(self, explicit: ExplicitId | None, tenant: str) -> str:
        if explicit is None:
            while True:
                cid = "cv_" + secrets.token_hex(8)
                if cid not in self._recs:
                    return cid
        base = explicit.value
        if has_secret(base):
            # a session header carrying something secret-shaped: the conversation id is
            # shown in headers, logs and the dashboard, so it is derived, not the value
            base = "sid_" + hashlib.sha256(base.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        if base not in self._recs:
            return base
        k = 2
        while f"{base}.{k}" in self._recs:
            k += 1
        return f"{base}.{k}"

    def _touch(self, cid: str) -> None:
        self._recs.move_to_end(cid)
        if cid in self._hot:
            self._hot.move_to_end(cid)
        while len(self._hot) > self.config.hot_conversations:
            self._hot.popitem(last=False)

    def _evict(self, now: float) -> None:
        dead: list[str] = []
        ttl = self.config.ttl_seconds
        while self._recs:
            cid, rec = next(iter(self._recs.items()))
            if len(self._recs) > self.config.max_conversations or now - rec.last_seen > ttl:
                self._recs.popitem(last=False)
                dead.append(cid)
            else:
                break
        if not dead:
            return
        for cid in dead:
            self._pending.pop(cid, None)
            ns = self.index.namespace_of(cid)
            self.index.remove(cid)
            self._hot.pop(cid, None)
            lock = self._locks.get(cid)
            if lock is not None and not lock.locked():
                del self._locks[cid]
            if ns is not None:
                self.normalizer.forget(ns, cid)
        self.store.delete(dead)

    def _unseen(self, rec: ConversationRecord, snap: Snapshot) -> tuple[Message, ...]:
        known = set(rec.digests)
        return tuple(x for x in snap.messages if x.digest not in known)

    def _account(self, rec: ConversationRecord, p: PendingCount, write: bool = True) -> None:
        """Count request ``p`` of ``rec``: its timeline entry, and for the conversation's
        latest request the conversation's tokens and cumulative counts."""
        info = self.accounting.model_info(p.model)
        base = p.base if p.tokenizer == info.tokenizer else no_counts()
        cum = cumulative(self.accounting, p.model, p.snapshot.messages, base)
        tokens = cum[-1] + self.accounting.framing_tokens(p.model, p.snapshot, p.system_hash, p.tools_hash)
        entry = p.entry
        entry.tokens, entry.window, entry.exact = tokens, info.window, info.exact
        entry.estimated = self.accounting.any_estimated(p.model, p.snapshot.messages)
        entry.share = share_of(tokens, info.window)
        if entry.relation != "side_request" and rec.seq == entry.seq:
            rec.tokens, rec.window, rec.exact = tokens, info.window, info.exact
            hot = self._hot.get(rec.id)
            if hot is not None and hot.snapshot is p.snapshot:
                hot.cum, hot.tokenizer = cum, info.tokenizer
        self.lines.remember(self.index, rec.id, p.new)
        if write:
            self.store.put_timeline(rec.id, entry)
            self.store.save_conversation(rec)

    def _settle(self, conversation_id: str, write: bool = True) -> None:
        p = self._pending.pop(conversation_id, None)
        rec = self._recs.get(conversation_id) if p is not None else None
        if p is not None and rec is not None:
            self._account(rec, p, write)

    def _put_blob(self, key: str, text: str) -> None:
        self._blob_cache[key] = text
        while len(self._blob_cache) > 256:
            self._blob_cache.popitem(last=False)
        self.store.put_blob(key, text)

    def _ensure_warm(self, model: str | None) -> None:
        if model and self.accounting.claim_warm(model):
            _in_daemon_thread(self.accounting.warm, model)

    async def warm(self, models: list[str]) -> None:
        """Warm token accounting for ``models`` now (in a daemon thread), e.g. at startup."""
        for model in models:
            if self.accounting.claim_warm(model):
                await _in_daemon_thread(self.accounting.warm, model)

    async def _hydrate(self, cid: str) -> None:
        """Load a cold conversation's history from the store (under its lock)."""
        lock = self._locks.setdefault(cid, asyncio.Lock())
        async with lock:
            rec = self._recs.get(cid)
            if rec is None or cid in self._hot:
                return
            digests = rec.digests
            msgs = await self.store.load_messages(digests)
            keys = [k for k in (rec.system_hash, rec.tools_hash) if k and k not in self._blob_cache]
            blobs = await self.store.load_blobs(keys) if keys else {}
            for k, v in blobs.items():
                self._blob_cache[k] = v
            rec = self._recs.get(cid)
            if rec is None or cid in self._hot or rec.digests != digests:
                return
            if any(d not in msgs for d in digests):
                log.warning("state: conversation %s has missing messages; history not restored", cid)
                snapshot_msgs: tuple[Message, ...] = ()
            else:
                snapshot_msgs = tuple(msgs[d] for d in digests)
            system = self._blob_cache.get(rec.system_hash, "") if rec.system_hash else ""
            tools = _tools_from_blob(self._blob_cache.get(rec.tools_hash, "[]")) if rec.tools_hash else ()
            snap = Snapshot(rec.dialect, system, snapshot_msgs, tools, rec.model)  # type: ignore[arg-type]
            self._hot[cid] = _Hot(snap, no_counts(), "")
            self.lines.remember(self.index, cid, snapshot_msgs)
            self._touch(cid)


#: Background loads still running (see :func:`_finish_background`).
_BACKGROUND: set[threading.Thread] = set()
#: Longest wait for them at interpreter exit (seconds).
BACKGROUND_EXIT_WAIT = 30.0


def _finish_background() -> None:
    """At interpreter exit, before finalisation: let background loads that are still
    running finish (bounded). A daemon thread still importing extension modules while
    the interpreter is torn down can abort the whole process (SIGABRT) on its way out;
    this only delays an exit that comes within seconds of start-up."""
    deadline = time.monotonic() + BACKGROUND_EXIT_WAIT
    for t in list(_BACKGROUND):
        t.join(max(0.0, deadline - time.monotonic()))


atexit.register(_finish_background)


def background_busy() -> bool:
    """Whether a background load (tokenizers, litellm) is still running: a process that
    wants to exit at once (``serve`` after its shutdown) leaves with ``os._exit`` rather
    than wait for it in :func:`_finish_background`."""
    return any(t.is_alive() for t in list(_BACKGROUND))


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """Run blocking ``fn(*args)`` in a new daemon thread; the returned future (of the
    running loop) gets its result. Unlike the loop's default executor, the thread does
    not hold up the server's shutdown (importing litellm takes seconds); the process's
    exit waits for it (:func:`_finish_background`). Never awaiting the future is fine;
    a result arriving after the loop closed is dropped."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def deliver(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (False, exc)
        finally:
            _BACKGROUND.discard(thread)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(deliver, *outcome)

    fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "not retrieved"
    thread = threading.Thread(target=run, name=f"cg-{getattr(fn, '__name__', 'warm')}", daemon=True)
    _BACKGROUND.add(thread)
    thread.start()
    return fut
