"""Whether a text restates another: the marker-free test for a summary.

:func:`.transition.classify` asks it of the new messages that stand where old ones were
lost (and of a message rewritten in place that grew a lot), when no agent's marker and no
opaque summary already told. It knows nothing of messages or their positions: it compares
the content words of two texts (a summary reuses the vocabulary of what it summarizes; a
new task mostly does not), so it is kept apart from the structural classification.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .markers import NO_MARKERS, Markers, fold

__all__ = ["content_words", "looks_like_summary"]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{3,}")
_STOP = frozenset(
    ["this", "that", "with", "from", "have", "been", "were", "will", "would", "should", "could", "there", "their", "they", "them", "then", "than", "what", "when", "where", "which", "while", "your", "yours", "into", "onto", "over", "under", "about", "after", "before", "again", "also", "just", "only", "some", "such", "very", "more", "most", "other", "each", "both", "here", "does", "done", "make", "made", "like", "need", "please", "thanks", "thank", "okay", "sure", "let's", "want", "know"]
)


def content_words(text: str) -> set[str]:
    if text.isascii():  # lower-casing first finds the same words (one C call, not one per word)
        return set(_WORD.findall(text.lower())) - _STOP
    return {w.lower() for w in _WORD.findall(text)} - _STOP


def looks_like_summary(
    candidate: str, lost_text: str, markers: Markers = NO_MARKERS, lost_words: Callable[[], set[str]] | None = None
) -> bool:
    """Generic, marker-free test: does *candidate* restate the lost text?

    A summary reuses the vocabulary of what it summarizes (task nouns, file names, tools,
    identifiers); a new task mostly does not. Saying "summary" / "so far" lowers the bar.
    ``lost_words``: the content words of ``lost_text``, when the caller has them (one
    classification asks about several candidates against the same lost text).
    """
    words = content_words(candidate)
    if len(words) < 3:
        return False
    shared = len(words & (lost_words() if lost_words is not None else content_words(lost_text)))
    frac = shared / len(words)
    if frac >= 0.5 or (shared >= 8 and frac >= 0.15):
        return True
    if shared < 3:
        return False
    folded = fold(candidate)  # saying "summary" / "so far" lowers the bar
    return any(w in folded for w in markers.summarize_words) or any(
        w in folded for w in ("summary", "summarize", "summarise", "previous", "continued", "so far")
    )
