"""The normalised message model: every dialect becomes the same Snapshot."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.dialects import (
    from_anthropic,
    from_any,
    from_body,
    from_openai_chat,
    from_openai_responses,
    openai_chat_tail,
    openai_responses_tail,
)
from proxy.core.messages import MessageFormatError, Part, make_message, text_message

OPENAI_CHAT = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are a migration agent."},
        {"role": "user", "content": "Apply the pending migration."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"alembic upgrade head"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Running upgrade  -> 3f2a9c1d4e5b"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}],
}

ANTHROPIC = {
    "model": "claude-sonnet-4-5",
    "system": [{"type": "text", "text": "You are a migration agent."}],
    "messages": [
        {"role": "user", "content": "Apply the pending migration."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_1", "name": "bash", "input": {"command": "alembic upgrade head"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "Running upgrade  -> 3f2a9c1d4e5b"}],
        },
    ],
}

RESPONSES = {
    "model": "gpt-5",
    "instructions": "You are a migration agent.",
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Apply the pending migration."}]},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": '{"command":"alembic upgrade head"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Running upgrade  -> 3f2a9c1d4e5b"},
        {"type": "reasoning", "encrypted_content": "gAAAA...opaque"},
    ],
}


def test_openai_chat_roles_tools_and_binary() -> None:
    snap = from_openai_chat(OPENAI_CHAT)
    assert snap.dialect == "openai_chat"
    assert snap.system == "You are a migration agent."
    assert [m.role for m in snap.messages] == ["user", "assistant", "tool", "user"]
    call = snap.messages[1].tool_calls[0]
    assert (call.tool_name, call.tool_call_id) == ("bash", "call_1")
    assert json.loads(call.text) == {"command": "alembic upgrade head"}
    assert snap.messages[2].tool_results[0].text.endswith("3f2a9c1d4e5b")
    # The image is kept as a binary part with no text: never tokenised nor scanned.
    last = snap.messages[3]
    assert [p.kind for p in last.parts] == ["text", "binary"]
    assert last.text == "look"
    assert "AAAA" not in snap.visible_text()
    assert snap.tools[0].name == "bash"


def test_same_conversation_hashes_the_same_across_dialects() -> None:
    chat = from_openai_chat({"messages": OPENAI_CHAT["messages"][:4]})
    anth = from_anthropic(ANTHROPIC)
    resp = from_openai_responses({**RESPONSES, "input": RESPONSES["input"][:3]})
    assert chat.system == anth.system == resp.system
    assert chat.digests == anth.digests == resp.digests


def test_responses_opaque_items_carry_no_text() -> None:
    snap = from_openai_responses(RESPONSES)
    assert snap.messages[-1].parts[0].kind == "opaque"
    assert snap.messages[-1].text == ""
    assert "gAAAA" not in snap.visible_text()


def test_from_any_and_from_body_pick_the_dialect() -> None:
    assert from_any(OPENAI_CHAT).dialect == "openai_chat"
    assert from_any(ANTHROPIC).dialect == "anthropic"
    assert from_any(RESPONSES).dialect == "openai_responses"
    assert from_any(ANTHROPIC["messages"]).dialect == "anthropic"
    assert from_any(OPENAI_CHAT["messages"]).dialect == "plain"
    assert from_body("messages", ANTHROPIC).dialect == "anthropic"
    with pytest.raises(MessageFormatError):
        from_body("embeddings", {"input": "x"})


@pytest.mark.parametrize(
    "bad",
    [
        {"messages": "nope"},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [42]},
        {"model": "x"},
        "text",
        {"system": "s", "messages": [{"role": "system", "content": "x"}]},
    ],
)
def test_bad_bodies_raise_a_clear_error(bad: object) -> None:
    with pytest.raises(MessageFormatError):
        from_any(bad)


_text = st.text(max_size=40)
_msg = st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant"]), _text)


@given(st.lists(_msg, max_size=12), st.lists(_msg, min_size=1, max_size=4))
def test_digests_of_a_prefix_are_stable_when_appending(prefix: list[dict[str, str]], extra: list[dict[str, str]]) -> None:
    before = from_openai_chat({"messages": prefix})
    after = from_openai_chat({"messages": prefix + extra})
    assert after.digests[: len(before.digests)] == before.digests
    assert len(after.messages) == len(prefix) + len(extra)


@given(_text, _text)
def test_digest_distinguishes_role_and_content(a: str, b: str) -> None:
    ua = from_openai_chat({"messages": [{"role": "user", "content": a}]}).messages
    ab = from_openai_chat({"messages": [{"role": "assistant", "content": a}]}).messages
    ub = from_openai_chat({"messages": [{"role": "user", "content": b}]}).messages
    if a:
        assert ua[0].digest != ab[0].digest
    assert (ua[0].digest == ub[0].digest) == (a == b)


@pytest.mark.parametrize("long", [False, True])
def test_a_lone_surrogate_in_any_field_gets_a_digest(long: bool) -> None:
    """JSON may escape half a surrogate pair (``"\\ud800"``) in a name or a tool call's
    fields as well as in a text; every field is hashed as its text is (surrogatepass),
    on the short path and on the long one."""
    text = "x" * (70_000 if long else 3)
    body = json.loads(
        '{"messages": [{"role": "assistant", "name": "a\\ud800", "content": "TEXT",'
        ' "tool_calls": [{"id": "c\\udfff", "type": "function",'
        ' "function": {"name": "f\\ud800", "arguments": "{}"}}]}]}'.replace("TEXT", text)
    )
    first = from_openai_chat(body).messages[0]
    again = from_openai_chat(json.loads(json.dumps(body))).messages[0]
    assert first.name == "a\ud800"
    assert first.digest == again.digest
    other = dict(body["messages"][0], name="a\udfff")
    assert from_openai_chat({"messages": [other]}).messages[0].digest != first.digest


def test_digests_are_stable_values() -> None:
    """Digests are persisted (state stores, lineage): their values must never change."""
    m = make_message(
        "assistant",
        (
            Part("text", "héllo"),
            Part("tool_call", '{"a":1}', tool_name="f", tool_call_id="c1"),
            Part("binary", payload_digest="abc"),
            Part("tool_result", "x", is_error=True),
        ),
        name="bob",
    )
    assert m.digest == "2b995bc33b5982600ff3c0839537ffde"
    assert text_message("user", "hello").digest == "5042293f747025f26187fe5446f2cf65"



def _digest_field_by_field(role: str, parts: tuple[Part, ...], name: str | None) -> str:
    """The digest as first defined: every field encoded by itself, the bytes joined."""
    import hashlib

    chunks = [role.encode(), b"\x00", (name or "").encode("utf-8", "surrogatepass")]
    for p in parts:
        chunks += (b"\x01", p.kind.encode())
        for f in (p.text, p.tool_name, p.tool_call_id, p.payload_digest):
            chunks += (b"\x00", (f or "").encode("utf-8", "surrogatepass"))
        chunks.append(b"\x01" if p.is_error else b"\x00")
    return hashlib.blake2b(b"".join(chunks), digest_size=16).hexdigest()


_any_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)  # lone surrogates too


@given(
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.lists(
        st.builds(Part, st.sampled_from(["text", "tool_call", "tool_result", "binary"]), _any_text,
                  st.none() | _any_text, st.none() | _any_text, st.booleans(), st.none() | _any_text),
        max_size=4,
    ),
    st.none() | _any_text,
)
def test_digest_is_the_field_by_field_encoding(role: str, parts: list[Part], name: str | None) -> None:
    m = make_message(role, parts, name)  # type: ignore[arg-type]
    assert m.digest == _digest_field_by_field(role, tuple(parts), name)


_chat_items = st.lists(
    st.one_of(
        st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant", "system", "developer"]),
                  st.text(max_size=8)),
        st.builds(lambda t: {"role": "tool", "tool_call_id": "c1", "content": t}, st.text(max_size=8)),
        st.builds(lambda a: {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": a}}]}, st.text(max_size=8)),
    ),
    max_size=6,
)
_responses_items = st.lists(
    st.one_of(
        st.text(max_size=8),
        st.builds(lambda r, t: {"type": "message", "role": r, "content": t},
                  st.sampled_from(["user", "assistant", "system", "developer"]), st.text(max_size=8)),
        st.builds(lambda a: {"type": "function_call", "call_id": "c1", "name": "f", "arguments": a}, st.text(max_size=8)),
        st.builds(lambda t: {"type": "function_call_output", "call_id": "c1", "output": t}, st.text(max_size=8)),
        st.just({"type": "reasoning", "encrypted_content": "xyz"}),
    ),
    max_size=6,
)


@given(_chat_items)
def test_chat_tail_is_what_a_history_after_a_user_message_gives(items: list[dict[str, object]]) -> None:
    full = from_openai_chat({"messages": [{"role": "user", "content": "."}, *items]}).messages[1:]
    tail = openai_chat_tail(items)
    assert tail == full and [m.digest for m in tail] == [m.digest for m in full]


@given(_responses_items)
def test_responses_tail_is_what_a_history_after_a_message_gives(items: list[object]) -> None:
    full = from_openai_responses({"input": [{"type": "message", "role": "user", "content": "."}, *items]}).messages[1:]
    tail = openai_responses_tail(items)
    assert tail == full and [m.digest for m in tail] == [m.digest for m in full]


def test_snapshot_digests_are_computed_once_and_match_the_messages() -> None:
    snap = from_body("chat", {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    first = snap.digests
    assert first == tuple(m.digest for m in snap.messages) and len(set(first)) == 2
    assert snap.digests is first  # cached on the snapshot
    assert snap == dataclasses.replace(snap)  # the cache takes no part in equality
