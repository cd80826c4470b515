"""Whether a request *is* a summarization call: the gate's moment (DESIGN §4.1).

Separate from :mod:`.transition`, which compares a request with the history before it:
this looks at one request alone — its last user message and its system prompt — for an
agent's summarize instruction (``markers.py``) or the generic signs of one (a "summarize
the conversation so far" at the end of a long history, a transcript pasted as text).
Only those two texts are read, a long one on its first and last 64 KiB, and the answer is
remembered by what it depends on.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .markers import NO_MARKERS, Markers, fold, marker_view
from .messages import Message, Snapshot

__all__ = ["SummarizeRequest", "detect_summarize_request"]


@dataclass(frozen=True, slots=True)
class SummarizeRequest:
    """The request *is* a summarization call (the gate's moment, DESIGN §4.1)."""

    agent: str | None
    #: ``marker`` (an agent's instruction text), ``instruction`` (a generic "summarize the
    #: conversation so far"), or ``pasted_history`` (a transcript pasted into one message).
    reason: Literal["marker", "instruction", "pasted_history"]
    #: Index of the message carrying the instruction; ``None`` when it is the system prompt.
    message_index: int | None
    #: The history to summarize is pasted as text (in a message or the system prompt)
    #: rather than sent as messages.
    history_in_text: bool


def _last_user(snapshot: Snapshot) -> int | None:
    return snapshot.last_user()


def _transcript_lines(text: str, labels: Sequence[str]) -> int:
    if not labels:
        labels = ("user", "assistant", "human", "ai", "tool", "system")
    pat = re.compile(r"^\s*[\[\*<]?(" + "|".join(re.escape(w) for w in labels) + r")[\]\*>]?\s*[:>]", re.IGNORECASE | re.MULTILINE)
    return len(pat.findall(text))


#: :func:`detect_summarize_request`'s answers by what they depend on — the markers, the
#: last user message (its index and content digest), the system prompt (its length and
#: hash: no text is kept alive) and the history's length up to four — as ``key ->
#: (markers, answer)``: a conversation's next request usually has the same last user
#: message (in a tool loop it is far back) and system prompt, so its answer is looked
#: up, not re-read (bounded, oldest out first).
_SUMMARIZE_ASKED: dict[tuple[int, int, str, int, int, int], tuple[Markers, SummarizeRequest | None]] = {}
_MAX_SUMMARIZE_ASKED = 4096


def detect_summarize_request(snapshot: Snapshot, markers: Markers = NO_MARKERS) -> SummarizeRequest | None:
    """Whether this request asks a model to summarize a conversation.

    Checks the last user message (and the system prompt) for an agent's marker; then the
    generic heuristics: a summarize instruction about "the conversation so far" at the end
    of a long history, or a transcript pasted as text into the request next to a
    summarize word. Only the last user message and the system prompt are read, a long
    one on its first and last 64 KiB (:func:`~proxy.core.markers.marker_view`). The answer
    is remembered by what it depends on (see :data:`_SUMMARIZE_ASKED`).
    """
    i = _last_user(snapshot)
    last = snapshot.messages[i] if i is not None else None
    if i is None or last is None or not last.digest:
        return _detect_summarize_request(snapshot, markers, i, last)
    system = snapshot.system
    key = (id(markers), i, last.digest, len(system), hash(system), min(len(snapshot.messages), 4))
    known = _SUMMARIZE_ASKED.get(key)
    if known is not None and known[0] is markers:
        return known[1]
    found = _detect_summarize_request(snapshot, markers, i, last)
    if len(_SUMMARIZE_ASKED) >= _MAX_SUMMARIZE_ASKED:
        with contextlib.suppress(RuntimeError):  # another thread changed it meanwhile
            _SUMMARIZE_ASKED.pop(next(iter(_SUMMARIZE_ASKED), key), None)
    _SUMMARIZE_ASKED[key] = (markers, found)
    return found


def _detect_summarize_request(
    snapshot: Snapshot, markers: Markers, i: int | None, last: Message | None
) -> SummarizeRequest | None:
    # a long text is read on its first and last 64 KiB (marker_view): bounded work
    last_text = marker_view(last.text) if last is not None else ""
    sys_text = marker_view(snapshot.system) if snapshot.system else ""
    folded_last = fold(last_text)
    folded_sys = fold(sys_text) if sys_text else ""
    in_text = False
    if markers.agents:
        a = markers.summarize_request_agent(folded_last, "user") if folded_last else None
        if a:
            pasted = _transcript_lines(last_text, markers.transcript_labels) >= 4
            sys_hist = _transcript_lines(sys_text, markers.transcript_labels) >= 4
            return SummarizeRequest(a, "marker", i, pasted or sys_hist)
        a = markers.summarize_request_agent(folded_sys, "system") if folded_sys else None
        if a:
            pasted = _transcript_lines(last_text, markers.transcript_labels) >= 4
            return SummarizeRequest(a, "marker", None, pasted or len(snapshot.messages) <= 2)
    words = markers.summarize_words or ("summarize", "summarise", "summary")
    if not folded_last or not any(w in folded_last for w in words):
        return None
    if markers.presents_summary(folded_last, "user"):
        return None  # a compacted history that starts from a summary, not a request for one
    assert last is not None
    if _transcript_lines(last_text, markers.transcript_labels) >= 4:
        return SummarizeRequest(None, "pasted_history", i, True)
    if _transcript_lines(sys_text, markers.transcript_labels) >= 4:
        in_text = True
        return SummarizeRequest(None, "pasted_history", i, in_text)
    scope = markers.summarize_scope_words or ("conversation", "so far", "history")
    if len(snapshot.messages) >= 4 and len(folded_last) < 4000 and any(w in folded_last for w in scope):
        return SummarizeRequest(None, "instruction", i, False)
    return None
