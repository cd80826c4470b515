"""In-memory store: nothing survives the process. Useful for tests and ``state: memory``."""

from __future__ import annotations

from collections.abc import Iterable

from proxy.core.messages import Message
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry
from proxy.state.store import Store

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keeps serialised copies (and the immutable digest tuples), so later mutations of
    a record by the tracker never alias the stored state."""

    def __init__(self) -> None:
        self.conversations: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.messages: dict[str, Message] = {}
        self.blobs: dict[str, str] = {}
        self.timeline: dict[str, dict[int, str]] = {}
        self.events: dict[str, dict[int, str]] = {}
        self._deleted = 0

    async def load(self, max_timeline: int = 1000) -> list[ConversationRecord]:
        out = []
        for cid, (meta, digests) in self.conversations.items():
            rec = ConversationRecord.from_row(meta, "")
            rec.digests = digests
            tl = self.timeline.get(cid, {})
            rec.timeline = [TimelineEntry.from_json(tl[s]) for s in sorted(tl)[-max_timeline:]]
            ev = self.events.get(cid, {})
            rec.events = [GateEvent.from_json(ev[s]) for s in sorted(ev)]
            out.append(rec)
        return out

    async def load_messages(self, digests: Iterable[str]) -> dict[str, Message]:
        return {d: self.messages[d] for d in digests if d in self.messages}

    async def load_blobs(self, keys: Iterable[str]) -> dict[str, str]:
        return {k: self.blobs[k] for k in keys if k in self.blobs}

    def save_conversation(self, rec: ConversationRecord) -> None:
        self.conversations[rec.id] = (rec.meta_json(), rec.digests)

    def put_messages(self, msgs: Iterable[Message]) -> None:
        for m in msgs:
            self.messages.setdefault(m.digest, m)

    def put_blob(self, key: str, text: str) -> None:
        self.blobs.setdefault(key, text)

    def put_timeline(self, conversation_id: str, entry: TimelineEntry) -> None:
        self.timeline.setdefault(conversation_id, {})[entry.seq] = entry.to_json()

    def put_event(self, conversation_id: str, event: GateEvent) -> None:
        self.events.setdefault(conversation_id, {})[event.seq] = event.to_json()

    def delete(self, conversation_ids: Iterable[str]) -> None:
        for cid in conversation_ids:
            self.conversations.pop(cid, None)
            self.timeline.pop(cid, None)
            self.events.pop(cid, None)
            self._deleted += 1
        if self._deleted >= 64:
            self.collect_garbage()

    def collect_garbage(self) -> None:
        """Drop messages no stored conversation refers to."""
        self._deleted = 0
        live: set[str] = set()
        for meta, digests in self.conversations.values():
            live.update(digests)
            rec = ConversationRecord.from_row(meta, "")
            live.update(rec.side_digests)
        for tl in self.timeline.values():
            for text in tl.values():
                live.update(TimelineEntry.from_json(text).reply_digests)
        for d in [d for d in self.messages if d not in live]:
            del self.messages[d]
