"""The conversation tracker: identity, lineage, history, replies, timeline.

:class:`Tracker` is the stateful layer over the pure core. For each proxied request of a
conversational API (OpenAI chat, Responses, Anthropic messages) :meth:`Tracker.observe`
normalises the body (incrementally), resolves the conversation (explicit id, else
lineage by message hashes, scoped by tenant), records the request in the conversation's
history and timeline, and returns an :class:`Observation` — including the previous
snapshot of the conversation, which the gate diffs to see what a compaction lost.
:meth:`Tracker.record_reply` records the assistant's reply; the tap and the
interceptor that feed it live in :mod:`proxy.gate.tracking`.

The class is assembled from parts over shared structures (:mod:`proxy.gate.tracker_parts`):
replies and deferred accounting (:mod:`proxy.gate.bookkeeping`), what stays in memory
(:mod:`proxy.gate.residency`), the cache of a shared store (:mod:`proxy.gate.replica_sync`);
this module holds the lifecycle, the queries, the policy layer's hooks and ``observe``,
whose synchronous step — recording the matched request — is
:func:`proxy.gate.admission.record_request`.

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
from typing import Any

from proxy.accounting import TokenAccounting
from proxy.core.lineage import commonplace, match
from proxy.core.lineage_index import LineageIndex, Probe
from proxy.core.markers import Markers, default_markers
from proxy.core.messages import MessageFormatError, Snapshot
from proxy.gate.admission import record_request
from proxy.gate.background import BACKGROUND_EXIT_WAIT, background_busy, in_daemon_thread
from proxy.gate.bookkeeping import Bookkeeping
from proxy.gate.budget import MemoryBudget, record_bytes
from proxy.gate.hints import LineMemory, RequestHints
from proxy.gate.hot import HotHistories
from proxy.gate.identity import explicit_id
from proxy.gate.ledger import PendingCount
from proxy.gate.normalize import IncrementalNormalizer
from proxy.gate.observation import TRACKED_KINDS, Observation
from proxy.gate.quiet import QuietQueue
from proxy.gate.replica_sync import ReplicaSync
from proxy.gate.replytap import TrackingTap
from proxy.gate.residency import Residency
from proxy.gate.tracker_parts import TrackerConfig
from proxy.gate.writes import DirectWrites, Replica, Writes
from proxy.server.hooks import Exchange
from proxy.state.memory import MemoryStore
from proxy.state.protocol import StateUnavailable
from proxy.state.records import COMPACTION_KINDS, ConversationRecord, GateEvent
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


class Tracker(Bookkeeping, Residency, ReplicaSync):
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
            commonplace(snap.messages),
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
        return record_request(self, ex, body, api, namespace, explicit, norm, m, agent, model, defer_accounting)

    def tap(self, obs: Observation) -> TrackingTap:
        """The response tap that records the reply to ``obs``."""
        return TrackingTap(self, obs)

    # ------------------------------------------------------------------ internals

    def _ensure_warm(self, model: str | None) -> None:
        if model and self.accounting.claim_warm(model):
            in_daemon_thread(self.accounting.warm, model)

    async def warm(self, models: list[str]) -> None:
        """Warm token accounting for ``models`` now (in a daemon thread), e.g. at startup."""
        for model in models:
            if self.accounting.claim_warm(model):
                await in_daemon_thread(self.accounting.warm, model)

