"""The state store interface.

The tracker keeps the live state in memory and writes through to a store; the store makes
it durable and lets cold conversations be re-hydrated. Write methods never block the
caller (they enqueue; implementations batch them off the event loop). Reads are
coroutines and always see every write enqueued before them (read-your-writes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from proxy.core.messages import Message
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry

__all__ = ["Store"]


class Store(ABC):
    """Durable conversation state: records, messages by digest, text blobs by hash,
    timeline entries and events."""

    async def open(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Prepare the store (create schema, start workers)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Flush pending writes and release resources."""

    async def flush(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Wait until every write enqueued so far is durable."""

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
