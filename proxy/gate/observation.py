"""What the tracker tells the policy layer about one request (:class:`Observation`)."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.lineage import Match, Relation
from proxy.core.messages import Snapshot
from proxy.gate.identity import ExplicitId

__all__ = ["TRACKED_KINDS", "Observation"]

#: API kinds whose requests carry a conversation history.
TRACKED_KINDS: frozenset[str] = frozenset({"chat", "messages", "responses"})


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
