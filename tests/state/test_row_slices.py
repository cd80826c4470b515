"""A stored message row encoded a slice at a time (issue 16: one ``json.dumps`` of a
10 MB text holds the GIL for tens of milliseconds) is byte for byte the row
``json.dumps`` writes of the whole, and loads back to the same message."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.messages import Message, Part, make_message
from proxy.state import records
from proxy.state.records import message_from_json, message_to_json, stored_text

TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=120)
SECRETISH = st.sampled_from(["", " token ghp_" + "a1B2" * 9 + " here", " key sk-" + "Zq9" * 16, "\ud800", "é\n\"\\"])


def _whole(m: Message) -> str:
    """The row as it was written before: one ``json.dumps`` of the whole."""
    texts = [stored_text(p.text) if p.text else p.text for p in m.parts]
    redacted = any(t is not p.text for t, p in zip(texts, m.parts, strict=True))
    row: list[object] = [m.role, m.name, [[p.kind, t, p.tool_name, p.tool_call_id, p.is_error, p.payload_digest]
                                          for p, t in zip(m.parts, texts, strict=True)]]
    if redacted:
        row.append(m.digest)
    out = json.dumps(row, separators=(",", ":"), ensure_ascii=False)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = json.dumps(row, separators=(",", ":"))
    return out


PART = st.builds(
    lambda kind, text, extra, tool, call, err: Part(kind, text + extra, tool, call, err, None),
    st.sampled_from(["text", "tool_call", "tool_result"]), TEXT, SECRETISH,
    st.none() | st.text(max_size=8), st.none() | st.text(max_size=8), st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(PART, min_size=1, max_size=3), name=st.none() | TEXT, slice_=st.integers(1, 12))
def test_a_row_encoded_slice_by_slice_is_the_whole_rows_json(parts: list[Part], name: str | None, slice_: int) -> None:
    m = make_message("user", parts, name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "JSON_SLICE", slice_)
        row = message_to_json(m)
    assert row == _whole(m)
    row.encode("utf-8")  # always writable
    back = message_from_json(row)
    assert back.digest == m.digest
    assert [p.text for p in back.parts] == [stored_text(p.text) if p.text else p.text for p in m.parts]
