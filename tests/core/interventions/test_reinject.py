from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.dialects import from_body
from proxy.core.interventions import Binding, reinject
from proxy.core.interventions.placement import raw_index
from proxy.core.interventions.reinject import NOTE_OPEN

from . import conversations as conv
from .validity import check_anthropic, check_chat, check_responses

REV = Binding("3f9a1c2b7d4e", "migration_revision", "tool result of bash `alembic upgrade head`", priority=100)
SHA = Binding("9fceb02d0ae598e95dc970b74767f19372d61af8", "git_sha", "tool result of git rev-parse HEAD")
SECRET = Binding("sk-live-abcdef1234567890", "api_key", "user message", sensitive=True)

TURNS = [
    ("user", "migrate the db"),
    ("calls", [("c1", "bash", {"cmd": "alembic upgrade head"}, "Running upgrade -> 3f9a1c2b7d4e")]),
    ("assistant", "done"),
    ("user", "now deploy"),
    ("calls", [("c2", "bash", {"cmd": "ls"}, "a b"), ("c3", "bash", {"cmd": "pwd"}, "/srv")]),
]


def _text(body: dict) -> str:
    return json.dumps(body, ensure_ascii=False)


def test_chat_note_goes_after_summary_and_past_tool_results() -> None:
    body = conv.chat([("user", "Here is a summary of the conversation to date: ..."), *TURNS[1:]])
    # anchor = the assistant tool call message (raw index 2): note must skip its tool result
    res = reinject("openai_chat", body, [REV], anchor=2)
    msgs = res.body["messages"]
    check_chat(msgs)
    assert msgs[res.placement.index]["role"] == "user"
    assert NOTE_OPEN in msgs[res.placement.index]["content"]
    assert msgs[res.placement.index - 1]["role"] == "tool"
    assert body["messages"] is not msgs  # input not mutated
    assert all(NOTE_OPEN not in str(m.get("content")) for m in body["messages"])


def test_chat_note_right_after_summary_user_message() -> None:
    body = conv.chat([("user", "Here is a summary of the conversation to date: ..."), ("user", "next?")])
    res = reinject("openai_chat", body, [REV], anchor=raw_index("openai_chat", body, 0))
    assert res.placement.index == 2
    assert REV.value in res.body["messages"][2]["content"]
    assert res.body["messages"][3]["content"] == "next?"


def test_chat_role_is_configurable() -> None:
    body = conv.chat([("user", "summary")])
    res = reinject("openai_chat", body, [REV], anchor=1, role="system")
    assert res.body["messages"][2]["role"] == "system"


def test_responses_note_skips_call_groups_and_reasoning() -> None:
    body = conv.responses(TURNS)
    # anchor on the reasoning item that precedes the first call group
    res = reinject("openai_responses", body, [REV], anchor=1)
    items = res.body["input"]
    check_responses(items)
    note = items[res.placement.index]
    assert note["type"] == "message" and note["content"][0]["type"] == "input_text"
    assert items[res.placement.index - 1]["type"] == "function_call_output"


def test_responses_string_input_becomes_list() -> None:
    res = reinject("openai_responses", {"model": "m", "input": "hello"}, [REV], anchor=None)
    assert res.body["input"][0]["content"][0]["text"] == "hello"
    assert REV.value in res.body["input"][1]["content"][0]["text"]


def test_anthropic_merges_into_summary_user_message() -> None:
    body = conv.anthropic([("user", "This session is being continued from a previous conversation..."), ("assistant", "ok"), ("user", "go")])
    res = reinject("anthropic", body, [REV], anchor=0)
    msgs = res.body["messages"]
    check_anthropic(msgs)
    assert len(msgs) == 3 and res.placement.merged
    assert msgs[0]["content"][-1]["type"] == "text" and REV.value in msgs[0]["content"][-1]["text"]


def test_anthropic_assistant_summary_merges_into_next_user_after_tool_results() -> None:
    body = conv.anthropic(TURNS)
    # message 1 is the assistant tool_use; the next user message starts with tool_result
    res = reinject("anthropic", body, [REV], anchor=1)
    msgs = res.body["messages"]
    check_anthropic(msgs)
    blocks = msgs[2]["content"]
    assert blocks[0]["type"] == "tool_result" and blocks[1]["type"] == "text"
    assert REV.value in blocks[1]["text"]


def test_anthropic_string_content_is_converted() -> None:
    body = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "summary"}]}
    res = reinject("anthropic", body, [REV], anchor=0)
    assert res.body["messages"][0]["content"][0] == {"type": "text", "text": "summary"}
    assert body["messages"][0]["content"] == "summary"


def test_sensitive_values_never_in_clear() -> None:
    body = conv.chat([("user", "summary")])
    res = reinject("openai_chat", body, [REV, SECRET], anchor=1)
    assert SECRET.value not in _text(res.body)
    assert "redacted api_key" in res.text


def test_budget_keeps_highest_priority_and_counts_the_rest() -> None:
    many = [Binding(f"{i:012x}", "uuid", "x" * 50, priority=1) for i in range(1, 40)]
    res = reinject("openai_chat", conv.chat([("user", "s")]), [*many, REV], anchor=1, budget_tokens=120)
    assert res.kept[0] == REV
    assert res.omitted and len(res.kept) + len(res.omitted) == 40
    assert "did not fit the re-injection budget" in res.text


def test_note_is_seen_by_the_normaliser() -> None:
    body = conv.chat([("user", "summary"), *TURNS[1:]])
    res = reinject("openai_chat", body, [REV, SHA], anchor=1)
    snap = from_body("chat", res.body)
    assert REV.value in snap.visible_text() and SHA.value in snap.visible_text()


# --------------------------------------------------------------------------- hypothesis

_ids = st.integers(min_value=0, max_value=10**6)
_text_st = st.text(alphabet="abcdefgh ", min_size=1, max_size=12)


@st.composite
def turn_lists(draw: st.DrawFn) -> list[tuple[str, object]]:
    n = draw(st.integers(min_value=1, max_value=10))
    turns: list[tuple[str, object]] = []
    counter = 0
    for _ in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "calls"]))
        if kind == "calls":
            k = draw(st.integers(min_value=1, max_value=3))
            calls = []
            for _ in range(k):
                counter += 1
                calls.append((f"call_{counter}", "bash", {"cmd": draw(_text_st)}, draw(_text_st)))
            turns.append(("calls", calls))
        else:
            turns.append((kind, draw(_text_st)))
    return turns


_binding = st.builds(
    Binding,
    value=st.text(alphabet="0123456789abcdef-_/:.ABCXYZ", min_size=6, max_size=40),
    kind=st.sampled_from(["git_sha", "uuid", "migration_revision", "upload_id", "path"]),
    source=st.text(alphabet="abc `-", max_size=30),
    regenerable=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(turns=turn_lists(), bindings=st.lists(_binding, min_size=1, max_size=6), data=st.data())
def test_reinject_keeps_every_dialect_valid_and_every_binding_verbatim(turns, bindings, data) -> None:
    for dialect, body, check, key in (
        ("openai_chat", conv.chat(turns), check_chat, "messages"),
        ("openai_responses", conv.responses(turns), check_responses, "input"),
        ("anthropic", conv.anthropic(turns), check_anthropic, "messages"),
    ):
        n = len(body[key])
        anchor = data.draw(st.one_of(st.none(), st.integers(min_value=0, max_value=n - 1)), label=f"anchor-{dialect}")
        before = json.dumps(body, sort_keys=True)
        res = reinject(dialect, body, bindings, anchor=anchor)
        check(res.body[key])
        assert json.dumps(body, sort_keys=True) == before, "input body mutated"
        dumped = json.dumps(res.body, ensure_ascii=False)
        for b in bindings:
            assert json.dumps(b.value, ensure_ascii=False)[1:-1] in dumped
        if dialect == "openai_responses":
            note_at = res.placement.index
            assert note_at == 0 or res.body[key][note_at - 1].get("type") != "reasoning"
        if dialect != "anthropic":
            assert len(res.body[key]) == n + 1
        else:
            assert len(res.body[key]) in (n, n + 1)
