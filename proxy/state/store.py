"""The state store interface: everything the gate remembers lives behind it.

Conversation records and histories (message digests; message texts stored once by
digest), text blobs (system prompts, tool lists), token timelines, the gate's own state
of each conversation (sticky repairs, armed tripwires, what a compaction lost — in
``ConversationRecord.gate_state``), events, and spilled regions (:mod:`proxy.state.spill`).

Two kinds of store:

- A *sole* store (``shared`` false: memory, SQLite for one process) is written only by
  this process. The tracker keeps the live state in memory and writes through to it;
  the store makes it durable and lets cold conversations be re-hydrated. Write methods
  never block the caller (they enqueue; implementations batch them off the event loop).
  Reads are coroutines and always see every write enqueued before them.
- A *shared* store (``shared`` true: Redis, SQLite for ``serve --workers N``) is written
  by several processes. What a process keeps in memory is only a cache, validated on
  every request (:meth:`sync`) and changed only through versioned compare-and-set
  commits (:meth:`commit`); reads for the API come from the store. The protocol is
  described in :mod:`proxy.state.protocol`.

Secrets never reach a store: every writer serialises through :mod:`proxy.state.records`,
which redacts them (:mod:`proxy.core.redaction`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any

from proxy.core.messages import Message
from proxy.state.protocol import Commit, Committed, SideWrite, Synced
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry

__all__ = ["SharedStore", "Store"]


class Store(ABC):
    """Durable conversation state: records, messages by digest, text blobs by hash,
    timeline entries and events."""

    #: Written by other processes too: caches must be validated (see the module docstring).
    shared: bool = False
    #: What the store is, for the banner and logs (never a credential).
    describe: str = "store"

    async def open(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Prepare the store (create schema, start workers)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Flush pending writes and release resources."""

    async def flush(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Wait until every write enqueued so far is durable."""

    async def room(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Wait while the store's backlog of pending writes is over its bound (awaited
        before a large request body is taken in: backpressure on the large tenant)."""

    @abstractmethod
    async def load(self, max_timeline: int = 1000) -> list[ConversationRecord]:
        """Every stored conversation with its last ``max_timeline`` timeline entries and
        its events (message contents are loaded separately)."""

    @abstractmethod
    async def load_messages(self, digests: Iterable[str]) -> dict[str, Message]:
        """Messages by digest (missing digests are absent from the result)."""

    @abstractmethod
    async def load_blobs(self, keys: Iterable[str]) -> dict[str, str]:
        """Text blobs (system prompts, tool definitions) by key."""

    @abstractmethod
    def save_conversation(self, rec: ConversationRecord) -> None:
        """Upsert the record's metadata and history digests (not timeline/events)."""

    @abstractmethod
    def put_messages(self, msgs: Iterable[Message]) -> None:
        """Store messages by digest (idempotent)."""

    @abstractmethod
    def put_blob(self, key: str, text: str) -> None:
        """Store a text blob by key (idempotent)."""

    @abstractmethod
    def put_timeline(self, conversation_id: str, entry: TimelineEntry) -> None:
        """Upsert a timeline entry (by its ``seq``)."""

    @abstractmethod
    def put_event(self, conversation_id: str, event: GateEvent) -> None:
        """Upsert an event (by its ``seq``)."""

    @abstractmethod
    def delete(self, conversation_ids: Iterable[str]) -> None:
        """Delete conversations with their timeline and events; messages and blobs no
        longer referenced may be garbage-collected later."""

    def release(self, conversation_ids: Iterable[str]) -> None:  # noqa: B027 - optional hook, a no-op by default
        """This process no longer keeps these conversations in memory (they stay stored,
        see :meth:`proxy.gate.residency.Residency._shed`): drop whatever the store keeps
        of them in memory, so that memory stays bounded by what the tracker holds."""

    # -- shared stores (see proxy.state.protocol); a sole store never gets these calls

    async def sync(
        self,
        tenant: str,
        namespace: str,
        cursor: int,
        *,
        reload: Iterable[str] = (),
        bodies: int = 256,
        known: Mapping[str, str] | None = None,
    ) -> Synced:
        """The conversations of ``namespace`` changed since namespace version
        ``cursor``, plus the ``reload`` ones in full; tails of at most ``bodies``
        digests come with their messages. ``known``: conversation id → the etag the
        caller holds (its own commits since ``cursor``): left out while the store still
        holds that etag (the caller's cache is that state); read as the answer is made
        or read, so the caller's commits acknowledged meanwhile count too."""
        raise NotImplementedError

    async def commit(self, change: Commit) -> Committed:
        """Apply ``change`` if the record still has etag ``change.expect``."""
        raise NotImplementedError

    async def side(self, writes: Iterable[SideWrite]) -> None:
        """Apply writes that need no compare-and-set, in order."""
        raise NotImplementedError

    async def read_conversation(self, conversation_id: str, max_timeline: int = 1000) -> ConversationRecord | None:
        """One conversation with its history digests, last timeline entries and events."""
        raise NotImplementedError

    async def recent_conversations(self, *, tenant: str | None = None, limit: int = 200) -> tuple[int, list[ConversationRecord]]:
        """How many conversations there are (of ``tenant``), and the ``limit`` most
        recently seen (records only: no digests, timeline or events)."""
        raise NotImplementedError

    async def conversation_messages(self, rec: ConversationRecord, digests: Iterable[str]) -> dict[str, Message]:
        """Messages of conversation ``rec`` by digest (default: :meth:`load_messages`)."""
        return await self.load_messages(digests)

    async def conversation_blobs(self, rec: ConversationRecord, keys: Iterable[str]) -> dict[str, str]:
        """Text blobs of conversation ``rec`` (default: :meth:`load_blobs`)."""
        return await self.load_blobs(keys)

    async def log(
        self,
        *,
        since: int = 0,
        limit: int = 100,
        conversation: str | None = None,
        action: str | None = None,
        kind: str | None = None,
    ) -> list[dict[str, Any]]:
        """The store-wide event log, oldest first, filtered like ``GET /gate/events``."""
        raise NotImplementedError

    async def sweep(self, now: float, ttl_seconds: float, max_conversations: int) -> int:
        """Forget conversations idle longer than the TTL or beyond the maximum (oldest
        first); returns how many. Safe to run from every process."""
        return 0

    async def ping(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Raise :class:`~proxy.state.protocol.StateUnavailable` unless reachable."""


class SharedStore(Store):
    """Base of the shared stores: the sole-store write API is not theirs (they are
    written with :meth:`commit` and :meth:`side`), and nothing is loaded at start
    (conversations are synced per namespace, on demand)."""

    shared = True

    async def load(self, max_timeline: int = 1000) -> list[ConversationRecord]:
        return []

    def save_conversation(self, rec: ConversationRecord) -> None:
        raise NotImplementedError("a shared store is written with commit()")

    def put_messages(self, msgs: Iterable[Message]) -> None:
        raise NotImplementedError("a shared store is written with commit()")

    def put_blob(self, key: str, text: str) -> None:
        raise NotImplementedError("a shared store is written with commit()")

    def put_timeline(self, conversation_id: str, entry: TimelineEntry) -> None:
        raise NotImplementedError("a shared store is written with side()")

    def put_event(self, conversation_id: str, event: GateEvent) -> None:
        raise NotImplementedError("a shared store is written with side()")

    def delete(self, conversation_ids: Iterable[str]) -> None:
        """Nothing: conversations expire (TTL) and are forgotten by :meth:`sweep` —
        another process may still be using one this process evicts from its cache."""
