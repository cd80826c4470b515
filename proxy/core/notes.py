"""Whether a message holds the gate's own note (``GATE_NOTE``), with the answer for a
long text found ahead of time, a bounded slice at a time (pure, no I/O; issue 16).

The analysis of a transition that lost messages asks, of each lost message, whether the
gate's note is in it (:func:`proxy.core.analysis._unneeded`): a substring search over the
whole text, one C call. For a lost 10 MB reply that is ~2 ms of the event loop in one
piece, every other tenant's requests waiting behind it. :func:`note_search` does the same
search one slice of :data:`NOTE_SLICE` characters at a time, yielding between slices; a
caller that may not hold its thread for a whole text (the gate, before the decision:
:func:`proxy.gate.prescan.prescan_lost`) drives it between other work and puts the answer
in the scan cache under :func:`note_key`; :func:`holds_note` then reads it there instead
of searching. The answer depends on the message's content only, which its digest names.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable

from .identifiers.extract import DEFAULT_CACHE, ScanCache
from .identifiers.steps import GATE_NOTE
from .messages import TEXTUAL_KINDS, Message

__all__ = ["NOTE_SLICE", "holds_note", "note_key", "note_search"]

#: Characters searched per slice by :func:`note_search` (~50 µs of a core).
NOTE_SLICE = 1 << 18


def note_key(m: Message) -> Hashable | None:
    """The scan-cache key of ``m``'s answer (``None``: ``m`` has no digest to name it)."""
    return ("gate-note", m.digest) if m.digest else None


def _texts(m: Message) -> list[str]:
    return [p.text for p in m.parts if p.kind in TEXTUAL_KINDS and p.text]


def holds_note(m: Message, cache: ScanCache = DEFAULT_CACHE) -> bool:
    """Whether the gate's note is in ``m``'s text (the answer cached under
    :func:`note_key`, when there is one; else one search of each of its texts).

    The same as ``GATE_NOTE in m.text``: the note has no newline, so it is in the texts
    joined by newlines exactly when it is in one of them."""
    key = note_key(m)
    if key is not None:
        known = cache.get(key)
        if isinstance(known, bool):
            return known
    return any(GATE_NOTE in t for t in _texts(m))


def note_search(m: Message, slice_chars: int = NOTE_SLICE) -> Generator[None, None, bool]:
    """:func:`holds_note`'s answer found a slice at a time: yields after each slice of
    ``slice_chars`` characters searched and returns the answer (consecutive slices
    overlap by the note's length less one, so a note across their border is found)."""
    w = len(GATE_NOTE)
    for t in _texts(m):
        n = len(t)
        for start in range(0, n, slice_chars):
            if t.find(GATE_NOTE, start, min(n, start + slice_chars + w - 1)) >= 0:
                return True
            yield
    return False
