"""A stored message row encoded a slice at a time (issue 16: one ``json.dumps`` of a
10 MB text holds the GIL for tens of milliseconds), its long texts redacted and encoded
in the store's worker process, is byte for byte the row ``json.dumps`` writes of the
whole (each string raw, or ASCII-escaped where it has a lone surrogate), and loads back
to the same message."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.messages import Message, Part, make_message
from proxy.state import records
from proxy.state.records import message_from_json, message_to_json, stored_text

T = TypeVar("T")
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=120)
SECRETISH = st.sampled_from(["", " token ghp_" + "a1B2" * 9 + " here", " key sk-" + "Zq9" * 16, "\ud800", "é\n\"\\"])


def _literal(v: object) -> str:
    """One JSON value: a string raw if it encodes as UTF-8, else ASCII-escaped."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(v)
    return json.dumps(v, ensure_ascii=False)


def _whole(m: Message) -> str:
    """The row, each value encoded whole by ``json.dumps``."""
    texts = [stored_text(p.text) if p.text else p.text for p in m.parts]
    redacted = any(t is not p.text for t, p in zip(texts, m.parts, strict=True))
    parts = ",".join("[" + ",".join(map(_literal, (p.kind, t, p.tool_name, p.tool_call_id, p.is_error, p.payload_digest)))
                     + "]" for p, t in zip(m.parts, texts, strict=True))
    tail = "," + _literal(m.digest) if redacted else ""
    return f"[{_literal(m.role)},{_literal(m.name)},[{parts}]{tail}]"


PART = st.builds(
    lambda kind, text, extra, tool, call, err: Part(kind, text + extra, tool, call, err, None),
    st.sampled_from(["text", "tool_call", "tool_result"]), TEXT, SECRETISH,
    st.none() | st.text(max_size=8), st.none() | st.text(max_size=8), st.booleans(),
)


def _here(fn: Callable[..., T], *args: Any, out: int = 0) -> T:
    return fn(*args)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(PART, min_size=1, max_size=3), name=st.none() | TEXT, slice_=st.integers(1, 12),
       offload_over=st.sampled_from([0, 40, 1 << 30]))
def test_a_row_encoded_slice_by_slice_is_the_whole_rows_json(parts: list[Part], name: str | None, slice_: int,
                                                              offload_over: int) -> None:
    m = make_message("user", parts, name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "JSON_SLICE", slice_)
        # texts over ``offload_over`` take the store worker's path (run here: the same function)
        mp.setattr(records, "OFFLOAD_CHARS", offload_over)
        mp.setattr(records, "in_store_worker", _here)
        row = message_to_json(m)
    whole = _whole(m)
    if any(len(p.text) > offload_over for p in m.parts):
        assert row == whole.encode("utf-8")  # the worker's literal comes back as UTF-8 bytes
    else:
        assert row == whole
        row.encode("utf-8")  # always writable
    back = message_from_json(row)
    assert back.digest == m.digest
    assert [p.text for p in back.parts] == [stored_text(p.text) if p.text else p.text for p in m.parts]


def test_a_long_texts_row_is_redacted_and_encoded_in_the_store_worker() -> None:
    from proxy.state import offload

    secret = "ghp_" + "a1B2" * 9
    text = "é " * (offload.OFFLOAD_CHARS // 2) + secret + " \ud800 tail"
    m = make_message("tool", [Part("tool_result", text, "read", "call_1", False, None)], None)
    row = message_to_json(m)
    assert offload._STORE._pool is not None  # it went to the worker process
    assert isinstance(row, bytearray) and row == _whole(m).encode("utf-8")
    assert secret.encode() not in row
    back = message_from_json(row)
    assert back.digest == m.digest and back.parts[0].text == stored_text(text)
