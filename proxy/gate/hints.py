"""What a request's own text says about it, cached by message digest.

:class:`RequestHints` recognises a summarization side request (an agent's summarize
prompt, or a generic instruction to summarize the conversation) and a conversation
continued after a compaction (an agent's continuation marker in its first messages).
:class:`LineMemory` keeps the text-line fingerprints of messages, which lineage uses to
attach a history pasted as text into one message to the conversation it came from.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from proxy.core.lineage import line_fingerprints
from proxy.core.lineage_index import LineageIndex
from proxy.core.markers import Markers, fold, marker_view
from proxy.core.messages import Message, Snapshot
from proxy.gate.normalize import text_hash

__all__ = ["MAX_LINES", "LineMemory", "RequestHints"]

_SUMMARY_WORDS = r"(?:summari[sz]e|summary|summarization|condense|compact(?:ion)?)"
_HISTORY_WORDS = r"(?:conversation|history|transcript|chat|messages|discussion|session|context|dialogue)"
_GENERIC_SUMMARY = re.compile(
    rf"\b{_SUMMARY_WORDS}\b.{{0,120}}\b{_HISTORY_WORDS}\b|\b{_HISTORY_WORDS}\b.{{0,120}}\b{_SUMMARY_WORDS}\b", re.S
)
_MAX_HINTS = 4096
#: The last message's head and tail read for a marker (:func:`marker_view`).
_HINT_WINDOW = 10_000
#: Responses item types that are never an agent's marker (skipped quickly).
_COMMON_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
#: Messages whose line fingerprints :class:`LineMemory` keeps.
MAX_LINES = 50_000


class RequestHints:
    """Agent markers found in requests; ``markers`` gives the current marker set."""

    def __init__(self, markers: Callable[[], Markers]) -> None:
        self._markers = markers
        self._cache: OrderedDict[str, str | None] = OrderedDict()
        self._headers_of: Markers | None = None
        self._headers: tuple[tuple[str, str], ...] = ()

    def _remember(self, key: str, found: str | None) -> None:
        self._cache[key] = found
        if len(self._cache) > _MAX_HINTS:
            self._cache.popitem(last=False)

    def summarization_agent(self, snap: Snapshot) -> str | None:
        """Name of the agent whose summarization marker the request carries, ``"generic"``
        for a generic summarize instruction about the conversation, else ``None``.
        Only the last message and the system prompt are scanned (cached by digest)."""
        if not snap.messages:
            return None
        last = snap.messages[-1]
        if last.digest in self._cache:
            found = self._cache[last.digest]
        else:
            found = None
            if last.role in ("user", "system"):
                text = last.text
                folded = fold(marker_view(text, _HINT_WINDOW, " "))
                markers = self._markers()
                found = markers.summarize_request_agent(folded, last.role)
                if found is None and not markers.presents_summary(folded, last.role):
                    head = folded if len(folded) <= 4000 else folded[:1500] + " " + folded[-1500:]
                    if _GENERIC_SUMMARY.search(head):
                        found = "generic"
            self._remember(last.digest, found)
        if found is None and snap.system:
            key = "sys:" + text_hash(snap.system[:2000])
            if key in self._cache:
                found = self._cache[key]
            else:
                found = self._markers().summarize_request_agent(fold(snap.system[:20_000]), "system")
                self._remember(key, found)
        return found

    def request_agent(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """Agent whose summarization marker the request carries outside its messages: the
        type of a Responses request's last input item (``compaction_trigger``: a
        server-side compaction), or a header value (Codex's turn metadata)."""
        markers = self._markers()
        raw = body.get("input")
        last = raw[-1] if isinstance(raw, list) and raw else None
        if isinstance(last, Mapping) and isinstance(last.get("type"), str):
            found = markers.item_agent("summarize_request", last["type"])
            if found is not None:
                return found
        pairs = self._header_markers(markers)
        if pairs:
            for value in headers.values():
                if len(value) <= 8192:
                    folded = fold(value)
                    for text, name in pairs:
                        if text in folded:
                            return name
        return None

    def _header_markers(self, markers: Markers) -> tuple[tuple[str, str], ...]:
        """``(folded marker, agent)`` of every summarization-request marker a header value
        can carry (``in: [header]`` or anywhere), agents in order — the first that matches
        is :meth:`Markers.summarize_request_agent`'s answer — when any marker is about a
        header; else empty. Computed once per marker set."""
        if self._headers_of is not markers:
            self._headers_of = markers
            self._headers = tuple(
                (m.folded, a.name)
                for a in markers.agents
                for m in a.summarize_request
                if not m.where or "header" in m.where
            ) if markers.matches_headers() else ()
        return self._headers

    def continued_by_item(self, body: Mapping[str, Any]) -> str | None:
        """Agent whose post-compaction marker is an input item of a Responses request (the
        encrypted ``compaction`` item a server-side compaction left in the history)."""
        markers = self._markers()
        types = markers.item_types("continuation")
        raw = body.get("input")
        if not types or not isinstance(raw, list):
            return None
        for item in raw:
            t = item.get("type") if isinstance(item, Mapping) else None
            if isinstance(t, str) and t not in _COMMON_ITEMS and fold(t) in types:
                return markers.item_agent("continuation", t)
        return None

    def continuation_agent(self, snap: Snapshot) -> str | None:
        """Agent whose post-compaction marker one of the first three messages carries."""
        for x in snap.messages[:3]:
            key = "cont:" + x.digest
            if key in self._cache:
                found = self._cache[key]
            else:
                text = x.text
                found = self._markers().continuation_agent(fold(text[:4000]), x.role) if text else None
                self._remember(key, found)
            if found is not None:
                return found
        return None


class LineMemory:
    """Text-line fingerprints per message digest (bounded, least recently added dropped)."""

    def __init__(self) -> None:
        #: tuples, not the frozensets line_fingerprints gives (a quarter of the memory)
        self._lines: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def of(self, msg: Message) -> tuple[int, ...]:
        fps = self._lines.get(msg.digest)
        if fps is None:
            fps = tuple(line_fingerprints(msg.text, max_lines=64)) if msg.parts else ()
            self._lines[msg.digest] = fps
            if len(self._lines) > MAX_LINES:
                self._lines.popitem(last=False)
        return fps

    def remember(self, index: LineageIndex, conversation_id: str, msgs: tuple[Message, ...]) -> None:
        """Index the lines of ``msgs`` as seen in ``conversation_id`` (in one call: the
        index takes a new conversation's first lines without searching them)."""
        fps = [fp for x in msgs for fp in self.of(x)]
        if fps:
            index.add_lines(conversation_id, fps)

    @staticmethod
    def probe(snap: Snapshot) -> frozenset[int]:
        """Lines of a short request (a history may be pasted into a message or, as Goose
        does, into the system prompt); long texts are not sampled here."""
        out: set[int] = set(line_fingerprints(snap.system))
        for x in snap.messages:
            out.update(line_fingerprints(x.text))
        return frozenset(out)
