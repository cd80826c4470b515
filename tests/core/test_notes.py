"""Whether a message holds the gate's note, found a slice at a time or read from the scan
cache (:mod:`proxy.core.notes`): the same answer as one search of its whole text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import notes
from proxy.core.identifiers.extract import ScanCache
from proxy.core.identifiers.steps import GATE_NOTE
from proxy.core.messages import Message, Part, make_message


def _drive(search: object) -> tuple[bool, int]:
    """The search's answer and how many times it yielded."""
    yields = 0
    while True:
        try:
            next(search)  # type: ignore[call-overload]
        except StopIteration as end:
            return bool(end.value), yields
        yields += 1


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.tuples(st.integers(0, 120), st.one_of(st.none(), st.integers(0, 120))), min_size=1, max_size=3),
    slice_chars=st.integers(1, 40),
    cut=st.integers(0, len(GATE_NOTE)),
)
def test_a_search_in_slices_answers_as_one_search(texts: list[tuple[int, int | None]], slice_chars: int,
                                                   cut: int) -> None:
    # filler with the note (or a part of it: ``cut`` characters) at any place, across
    # slice borders and part borders alike
    parts = []
    for n, at in texts:
        text = "x" * n
        if at is not None:
            at = min(at, n)
            text = text[:at] + GATE_NOTE[:cut] + text[at:]
        parts.append(Part("text", text))
    parts.append(Part("binary", "", payload_digest="d"))  # not searched: no text
    m = make_message("assistant", parts)
    got, yields = _drive(notes.note_search(m, slice_chars))
    assert got == (GATE_NOTE in m.text) == notes.holds_note(m, ScanCache())
    assert yields <= sum(-(-len(p.text) // slice_chars) for p in parts)


def test_a_long_text_is_searched_in_bounded_slices() -> None:
    m = make_message("tool", [Part("tool_result", "y" * (5 * notes.NOTE_SLICE) + GATE_NOTE, tool_call_id="c")])
    got, yields = _drive(notes.note_search(m))
    assert got is True and yields == 5  # five slices without it, found in the sixth


def test_the_cached_answer_is_read_instead_of_searching() -> None:
    m = make_message("assistant", [Part("text", f"[{GATE_NOTE}: identifiers preserved]")])
    cache = ScanCache()
    assert notes.holds_note(m, cache) is True  # searched: nothing cached
    key = notes.note_key(m)
    assert key is not None
    cache.put(key, False)  # an answer put there (by whoever searched): read, not searched again
    assert notes.holds_note(m, cache) is False
    assert notes.note_key(Message("user", (Part("text", "a"),))) is None  # no digest: no key
