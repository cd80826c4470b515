"""Conversation state: records, the store interface, in-memory and SQLite stores."""

from proxy.state.memory import MemoryStore
from proxy.state.records import ConversationRecord, GateEvent, TimelineEntry
from proxy.state.sqlite import SQLiteStore
from proxy.state.store import Store

__all__ = ["ConversationRecord", "GateEvent", "MemoryStore", "SQLiteStore", "Store", "TimelineEntry"]
