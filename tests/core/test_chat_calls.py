"""Tool calls reassembled from a chat stream's pieces (one reader for the reply's
reassembly, the tripwire and the recall rounds)."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.chat_calls import ChatToolCalls

names = st.from_regex(r"[a-z][a-z_]{0,15}", fullmatch=True)


def _cuts(text: str, points: list[int]) -> list[str]:
    at = sorted({0, len(text), *(p % (len(text) + 1) for p in points)})
    return [text[a:b] for a, b in pairwise(at)] or [""]


@given(
    calls=st.lists(st.tuples(names, st.text(max_size=60)), min_size=1, max_size=4),
    points=st.lists(st.integers(min_value=0, max_value=80), max_size=6),
    repeat_name=st.booleans(),
)
def test_pieces_in_any_cut_reassemble_each_call(calls: list[tuple[str, str]], points: list[int],
                                                 repeat_name: bool) -> None:
    acc = ChatToolCalls()
    for i, (name, args) in enumerate(calls):
        for k, piece in enumerate(_cuts(args, points)):
            fn: dict[str, str] = {"arguments": piece}
            if k == 0 or repeat_name:  # some servers repeat the whole name in every piece
                fn["name"] = name
            tc: dict[str, object] = {"index": i, "function": fn}
            if k == 0:
                tc["id"] = f"call_{i}"
            assert acc.add({"tool_calls": [tc]})
    got = [(c.id, c.name, c.args) for c in acc.calls()]
    assert got == [(f"call_{i}", n, a) for i, (n, a) in enumerate(calls)]
    assert acc.as_message_field()[0]["function"] == {"name": calls[0][0], "arguments": calls[0][1]}


def test_a_name_split_across_pieces_is_joined_and_malformed_pieces_are_skipped() -> None:
    acc = ChatToolCalls()
    acc.add({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "run_", "arguments": "{"}}]})
    acc.add({"tool_calls": [{"index": 0, "function": {"name": "shell", "arguments": "}"}}]})
    assert not acc.add({"tool_calls": ["junk", None]})
    assert not acc.add({"tool_calls": "junk"})
    acc.add({"tool_calls": [{"index": "x", "function": {"name": 3, "arguments": None}}]})  # read as index 0
    assert [(c.id, c.name, c.args) for c in acc.calls()] == [("c", "run_shell", "{}")]
    assert ChatToolCalls().as_message_field() == [] and not ChatToolCalls()
