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
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.accounting import TokenAccounting
from proxy.core.lineage import History, LineageIndex, Match, Probe, Relation, match
from proxy.core.markers import Markers, default_markers
from proxy.core.messages import Message, MessageFormatError, Snapshot
from proxy.core.prefix import common_prefix
from proxy.core.responses import Reply
from proxy.gate.background import BACKGROUND_EXIT_WAIT, background_busy, in_daemon_thread
from proxy.gate.budget import MemoryBudget, messages_bytes, record_bytes
from proxy.gate.hints import LineMemory, RequestHints
from proxy.gate.hot import Hot, HotHistories, tools_blob
from proxy.gate.identity import ExplicitId, explicit_id, new_conversation_id
from proxy.gate.ledger import PendingCount, count_request, no_counts
from proxy.gate.normalize import IncrementalNormalizer, Normalized
from proxy.gate.observation import TRACKED_KINDS, Observation
from proxy.gate.quiet import QuietQueue
from proxy.gate.replica_sync import ReplicaSync
from proxy.gate.replytap import TrackingTap
from proxy.gate.writes import DirectWrites, Replica, Writes
from proxy.server.hooks import Exchange
from proxy.state.memory import MemoryStore
from proxy.state.offload import BACKGROUND_NICE
from proxy.state.protocol import StateUnavailable
from proxy.state.records import COMPACTION_KINDS, ConversationRecord, GateEvent, TimelineEntry
from proxy.state.store import Store

__all__ = [
    "BACKGROUND_EXIT_WAIT",
    "TRACKED_KINDS",
    "Observation",
    "Tracker",
    "TrackerConfig",
    "background_busy",
]

log = logging.getLogger(__name__)

_SHORT_REQUEST = 3
#: Matching attempts of one request (each after waiting for a hydration or a commit).
MAX_MATCHES = 8
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
    conversation (all are stored); ``max_memory_bytes``: the bound on what the tracker
    keeps in memory (:mod:`proxy.gate.budget`; ``None``: only the bounds above)."""

    ttl_seconds: float = 7 * 24 * 3600.0
    max_conversations: int = 10_000
    hot_conversations: int = 512
    max_timeline: int = 1000
    max_events: int = 1000
    max_memory_bytes: int | None = None


class Tracker(ReplicaSync):
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
        #: the parsed items of a request are kept no longer than its snapshot is hot
        self.normalizer = IncrementalNormalizer(max_entries=self.config.hot_conversations)
        self._recs: OrderedDict[str, ConversationRecord] = OrderedDict()
        #: what is kept in memory, in bytes (estimated), and its bound
        self.budget = MemoryBudget(self.config.max_memory_bytes)
        self._hot = HotHistories(self.config.hot_conversations, on_drop=self.budget.drop_hot)
        self.hints = RequestHints(lambda: self.markers)
        self.lines = LineMemory()
        #: requests recorded with their accounting pending, per conversation (at most
        #: one each: recording the next request settles the previous one)
        self._pending: dict[str, PendingCount] = {}
        #: bookkeeping waiting for a quiet event loop (see :meth:`later`)
        self._later: QuietQueue[Callable[[], None]] = QuietQueue(lambda fn: fn())
        #: per conversation, the worker thread counting its first-seen history, and the
        #: bookkeeping waiting for it (see :meth:`later`)
        self._counting: dict[str, asyncio.Future[Any]] = {}
        self._waiting: dict[Callable[[], None], str | None] = {}  # -> the conversation's tenant
        self._started = False
        #: The tokenizer/markers preload started by :meth:`start` (awaited by the first
        #: requests instead of by the start-up, so the server listens at once).
        self._preloaded: asyncio.Future[Any] | None = None
        #: where changes go: straight to a sole store, or in transactions to a shared one
        self._replica: Replica | None = Replica(self.store) if self.store.shared else None
        self._w: Writes = self._replica if self._replica is not None else DirectWrites(self.store)
        #: conversations changed by another process since the normaliser remembered them
        self._resynced: set[str] = set()
        #: per conversation, how often its cached record was replaced (see version())
        self._gens: dict[str, int] = {}
        self._sweeper: asyncio.Task[None] | None = None

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
        self._preloaded = in_daemon_thread(self._preload)
        await self.store.open()
        if self._replica is not None:  # a shared store: namespaces are synced on demand
            self._start_replica()
            return
        recs = await self.store.load(self.config.max_timeline)
        recs.sort(key=lambda r: r.last_seen)
        for rec in recs:
            if rec.timeline and not (rec.compactions or rec.side_requests or rec.last_relation):
                rec.count_from_timeline()  # stored before the counters existed
            self._recs[rec.id] = rec
            self.index.upsert(self._history(rec))
            self.budget.set_record(rec.id, record_bytes(rec))
        self._evict(self.clock())  # and the memory bound (the most recently seen are kept)

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
        await self._stop_replica()
        await self.store.close()

    async def flush(self) -> None:
        self.settle_all()
        if self._replica is not None:
            with contextlib.suppress(StateUnavailable):
                await self._replica.flush()
        await self.store.flush()

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

    # ------------------------------------------------------------------ queries

    def get(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation, its replies recorded and its accounting settled."""
        self._drain()
        self._settle(conversation_id)
        return self._recs.get(conversation_id)

    def conversations(self) -> list[ConversationRecord]:
        """All conversations this process holds, most recently seen first, their replies
        recorded and their accounting settled (with a shared store: this process's cache;
        :meth:`recent` reads the store)."""
        self.settle_all()
        return list(reversed(self._recs.values()))

    async def read(self, conversation_id: str) -> ConversationRecord | None:
        """A conversation with its timeline and events, as the store holds it (a sole
        store's: this process's live state)."""
        if self._replica is None:
            return self.get(conversation_id)
        await self.flush_writes()
        return await self.store.read_conversation(conversation_id, self.config.max_timeline)

    async def recent(self, *, tenant: str | None = None, limit: int = 200) -> tuple[int, list[ConversationRecord]]:
        """How many conversations there are (of ``tenant``) and the ``limit`` most
        recently seen — every process's, with a shared store."""
        if self._replica is None:
            recs = [r for r in self.conversations() if tenant is None or r.tenant == tenant]
            return len(recs), recs[:limit]
        await self.flush_writes()
        return await self.store.recent_conversations(tenant=tenant, limit=limit)

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
        self._w.event(rec, ev)
        self._w.conversation(rec)
        self.budget.set_record(conversation_id, record_bytes(rec))
        return ev

    def log_event(self, conversation_id: str | None, tenant: str, entry: dict[str, Any]) -> None:
        """Add ``entry`` to a shared store's event log (``GET /gate/events``), with the
        conversation's other changes when one is being committed."""
        self._w.log(conversation_id, tenant, entry)

    def after_commit(self, conversation_id: str | None, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the conversation's pending changes are committed (at once
        when none are pending, and always with a sole store)."""
        self._w.after_commit(conversation_id, fn)

    def version(self, conversation_id: str) -> object:
        """Changes when the cached record was replaced or committed anew (with a sole
        store: never): what a cache built from the record is validated against."""
        if self._replica is None:
            return None
        rec = self._recs.get(conversation_id)
        return None if rec is None else (self._gens.get(conversation_id, 0), rec.etag)

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
        self._w.conversation(rec)

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
            rec.compactions += (transition in COMPACTION_KINDS) - (entry.transition in COMPACTION_KINDS)
            entry.transition = transition
            self._w.timeline(rec, entry)

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
        self._drain(ex.tenant)  # the previous reply is part of what this request extends
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
        if lines:  # line matching sees every recorded request's lines (of this tenant)
            self._settle_tenant(ex.tenant)
        if self._replica is not None:
            await self._sync(ex.tenant, namespace, lines=bool(lines))  # what the other processes changed
        reused_from = norm.reused_from if norm.reused_from not in self._resynced else None
        probe = Probe(
            namespace,
            norm.system_hash,
            norm.digests,
            agent is not None,
            lines,
            explicit is not None,
            self.hints.continuation_agent(snap) is not None or self.hints.continued_by_item(body) is not None,
            reused_from,
            norm.reused,
        )

        hydrations = 0
        for _attempt in range(MAX_MATCHES):
            m = match(self.index, probe)
            cid = m.conversation_id
            if cid is not None and self._replica is not None and await self._wait_turn(ex.tenant, namespace, cid, lines=bool(lines)):
                continue  # another request of the conversation was being committed
            if cid is not None and cid in self._recs and cid not in self._hot:
                await self._hydrate(cid)  # suspension point: match again afterwards
                hydrations += 1
                if hydrations < 3:
                    continue
            break
        if m.conversation_id is not None and self._replica is not None and self._replica.busy(m.conversation_id):
            raise StateUnavailable("the conversation stayed busy", "busy")
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
            if self._replica is not None:
                self._replica.begin(rec)
            self._settle(rec.id)  # the previous request's counts are this one's base
        if rec is None:
            cid = new_conversation_id(explicit, self._recs if self._replica is None else self._taken())
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
            if self._replica is not None:
                self._replica.begin(rec, create=True)
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
        self._w.messages(rec, new_msgs)
        if norm.system_hash and (norm.system_hash != rec.system_hash or not self._hot.has_blob(norm.system_hash)):
            self._put_blob(rec, norm.system_hash, snap.system)
        if norm.tools_hash and (norm.tools_hash != rec.tools_hash or not self._hot.has_blob(norm.tools_hash)):
            self._put_blob(rec, norm.tools_hash, tools_blob(snap.tools))

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
        rec.compactions += relation in COMPACTION_KINDS
        rec.side_requests += relation == "side_request"
        rec.last_relation = relation
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
            self._hot.set(cid, Hot(snap, base_cum, info.tokenizer))
            same = 0
            if previous is not None:
                same = common_prefix(previous.digests, snap.digests, m.prefix_len if relation == "extend" else 0)
            self._account_hot(cid, previous.messages if previous is not None else None, snap.messages, same)
            self.index.upsert(self._history(rec), m.prefix_len if relation == "extend" else 0)
            self.normalizer.remember(namespace, cid, api, body, norm)
            self._resynced.discard(cid)
        elif rec.model is None:
            rec.model = model
        self._touch(cid)
        pending = PendingCount(
            entry, model, snap, norm.system_hash, norm.tools_hash, base_cum, info.tokenizer, new_msgs
        )
        if self.accounting.needs_precount(new_msgs):
            # long texts are counted in a worker thread (tiktoken releases the GIL), not on
            # the event loop; a settle that comes first estimates them (and says so)
            in_daemon_thread(self.accounting.precount, model, new_msgs, nice=BACKGROUND_NICE)
        if defer:
            self._pending[cid] = pending
            if self._replica is not None:  # committed with the request, counted later
                self._w.timeline(rec, entry)
                self._w.conversation(rec)
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

    def _count_first_sight(self, cid: str, model: str | None, msgs: tuple[Message, ...]) -> None:
        """Count a first-seen history's messages in a worker thread (tiktoken releases
        the GIL); the conversation's reply is recorded once it is done (:meth:`later`)."""
        fut = in_daemon_thread(self.accounting.count_messages, model, msgs, nice=BACKGROUND_NICE)
        self._counting[cid] = fut

        def done(f: asyncio.Future[Any]) -> None:
            if self._counting.get(cid) is f:
                del self._counting[cid]

        fut.add_done_callback(done)

    def _drain(self, tenant: str | None = None) -> None:
        """Run every waiting bookkeeping now (also what waits for a counting thread: the
        loop counts what the thread has not counted yet) — for a request of ``tenant``,
        what waits for another tenant's conversation goes on waiting."""
        if self._waiting:
            waiting = self._waiting
            self._waiting = {fn: t for fn, t in waiting.items() if tenant is not None and t is not None and t != tenant}
            for fn in waiting:
                if fn not in self._waiting:
                    self._later.push(fn)
        self._later.drain()

    def record_reply(self, obs: Observation, reply: Reply | None, status: str = "ok") -> None:
        """Record the assistant's reply to ``obs`` (``None``: no reply, e.g. an upstream
        error). Appended to the history only if ``obs`` is still the conversation's
        latest request and was not a side request; usage always goes to the timeline."""
        rec = self._recs.get(obs.conversation_id)
        if rec is None:
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
                if entry.reply_estimated:
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
        rec.digests = rec.digests[: rec.request_len] + tuple(x.digest for x in msgs)
        if hot is not None:
            base = hot.snapshot
            hot.snapshot = Snapshot(base.dialect, base.system, base.messages[: rec.request_len] + msgs, base.tools, base.model)
            del hot.cum[rec.request_len + 1 :]
            for x in msgs:
                hot.cum.append(hot.cum[-1] + self.accounting.count_message(obs.model, x))
        self.index.upsert(self._history(rec), rec.request_len)
        if hot is not None:
            self._account_hot(rec.id, base.messages, hot.snapshot.messages, rec.request_len)

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
        keeps them until their ``ttl_seconds``; an in-memory store forgets them). The
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

    def memory(self) -> dict[str, int | None]:
        """What the tracker keeps in memory (estimated bytes, :mod:`proxy.gate.budget`)."""
        return self.budget.report()

    def _forget_local(self, cid: str) -> None:
        """Drop everything this process keeps of ``cid`` but its record (see
        :meth:`_evict` and :meth:`ReplicaSync._drop`)."""
        self._pending.pop(cid, None)
        self.budget.drop(cid)
        ns = self.index.namespace_of(cid)
        self.index.remove(cid)
        self._hot.forget(cid)
        self._resynced.discard(cid)
        if ns is not None:
            self.normalizer.forget(ns, cid)

    def _unseen(self, rec: ConversationRecord, snap: Snapshot) -> tuple[Message, ...]:
        known = set(rec.digests)
        return tuple(x for x in snap.messages if x.digest not in known)

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

    def _put_blob(self, rec: ConversationRecord, key: str, text: str) -> None:
        self._hot.keep_blob(key, text)
        self._w.blob(rec, key, text)

    def _ensure_warm(self, model: str | None) -> None:
        if model and self.accounting.claim_warm(model):
            in_daemon_thread(self.accounting.warm, model)

    async def warm(self, models: list[str]) -> None:
        """Warm token accounting for ``models`` now (in a daemon thread), e.g. at startup."""
        for model in models:
            if self.accounting.claim_warm(model):
                await in_daemon_thread(self.accounting.warm, model)

    async def _hydrate(self, cid: str) -> None:
        """Load a cold conversation's history from the store (under its lock)."""
        msgs = await self._hot.hydrate(self.store, cid, self._recs.get)
        if msgs is not None:
            self.lines.remember(self.index, cid, msgs)
            self.budget.set_hot(cid, messages_bytes(msgs))
            self._touch(cid)
            if self.budget.over():
                self._shed()
