"""The protocol of a *shared* store: several processes (replicas behind a balancer, the
workers of one ``serve --workers N``) keep their own cache of the state and validate it
against the store on every request.

Versions. Every committed change of a conversation gives its record a new random
``etag``. A :class:`Commit` names the etag it was computed from (``expect``) and is
applied only if the store still holds it (compare-and-set): two replicas changing one
conversation at once never lose an update — the second is refused (``conflict``) and
redoes its work on the fresh state. A commit that creates a conversation
(``expect=None``) is refused when the id exists (``exists``).

Namespaces. Conversations are matched by content within a namespace (the tenant hash,
optionally joined with an explicit session id), so a replica must know every
conversation of a namespace before it matches a request there. Each namespace has a
version counter, bumped by every commit of one of its conversations; each conversation
remembers the namespace version of its last change. :meth:`Store.sync` returns the
conversations changed since the caller's ``cursor`` (the namespace version it last
saw) with, for each, only what changed in its history: a history is a list of digests
and every commit is a *splice* (keep the first ``keep``, append some); the store keeps a
short log of the recent splices, so it can tell the caller that its cached
``digests[:keep]`` still hold and send the digests after them (and their messages, when
few). Per request that is O(what changed), never O(history).

Writes that need no compare-and-set — token counts settled after the fact, events a
response tap adds, timeline updates — are :class:`SideWrite`\\ s: applied to a
conversation that still exists, in order, never bumping its etag.

Everything written is redacted first (:mod:`proxy.state.records`): a shared store, like
any other, never holds a secret the gate's detectors find.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.messages import Message
from proxy.state.records import ConversationRecord, GateEvent

__all__ = [
    "Changed",
    "Commit",
    "Committed",
    "SideWrite",
    "StateUnavailable",
    "Stats",
    "Synced",
]


class StateUnavailable(Exception):
    """The store cannot be reached or refused the operation (Redis down, a locked or
    full SQLite file). The message never carries credentials; ``reason`` is a short
    machine-readable cause (``unreachable``, ``timeout``, ``error``)."""

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Stats:
    """The token counts of a conversation's latest request (settled after the fact: a
    side write, kept only when ``seq`` is not older than what the store holds)."""

    seq: int
    tokens: int
    window: int | None
    exact: bool

    def as_list(self) -> list[Any]:
        return [self.seq, self.tokens, self.window, self.exact]

    @classmethod
    def of(cls, value: Any) -> Stats | None:
        try:
            seq, tokens, window, exact = value
            return cls(int(seq), int(tokens), None if window is None else int(window), bool(exact))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Commit:
    """The changes of one conversation, applied atomically if the stored record still
    has etag ``expect`` (``None``: create it; refused if the id exists).

    ``meta`` is :meth:`ConversationRecord.meta_dict`; the history becomes its first
    ``keep`` digests followed by ``append``. ``timeline`` holds
    :meth:`TimelineEntry.as_dict` snapshots (upserted by ``seq``); ``events`` get their
    ``seq`` from the store; ``log`` entries go to the store-wide event log
    (``GET /gate/events``), each given the next id."""

    conversation_id: str
    tenant: str
    namespace: str
    expect: str | None
    etag: str
    meta: dict[str, Any]
    last_seen: float
    keep: int
    append: tuple[str, ...] = ()
    messages: tuple[Message, ...] = ()
    blobs: tuple[tuple[str, str], ...] = ()
    timeline: tuple[dict[str, Any], ...] = ()
    events: tuple[GateEvent, ...] = ()
    log: tuple[dict[str, Any], ...] = ()
    stats: Stats | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The outcome of a :class:`Commit`. ``ok`` false: ``reason`` is ``conflict`` (the
    record changed meanwhile) or ``exists`` (creating an id that is taken). On success
    ``ver_before``/``ver`` are the namespace's version before and after: when the
    caller's cursor was ``ver_before``, nothing else changed in the namespace since."""

    ok: bool
    reason: str = ""
    ver_before: int = 0
    ver: int = 0


@dataclass(frozen=True, slots=True)
class SideWrite:
    """Writes without compare-and-set (see the module docstring). ``conversation_id``
    ``None``: only ``log`` entries (events of no conversation)."""

    conversation_id: str | None
    tenant: str
    timeline: tuple[dict[str, Any], ...] = ()
    events: tuple[GateEvent, ...] = ()
    log: tuple[dict[str, Any], ...] = ()
    messages: tuple[Message, ...] = ()
    stats: Stats | None = None


@dataclass(frozen=True, slots=True)
class Changed:
    """One conversation changed since the caller's cursor: its record (``etag`` set,
    ``digests`` empty), ``keep`` — the caller's cached ``digests[:keep]`` still hold
    (0: the whole history is in ``tail``) — the digests after them, and the messages of
    the tail when the store sent them (``None`` when the tail was too long to send;
    parsed when read, see :class:`~proxy.state.records.StoredMessages`). ``ver`` is the
    namespace version of the change."""

    record: ConversationRecord
    keep: int
    tail: tuple[str, ...]
    messages: Mapping[str, Message] | None
    ver: int


@dataclass(frozen=True, slots=True)
class Synced:
    """The answer to :meth:`Store.sync`: the namespace version the caller has now seen
    (its next cursor) and what changed up to it (a large namespace is read in pages,
    all computed against the caller's cursor)."""

    cursor: int
    changed: tuple[Changed, ...]
