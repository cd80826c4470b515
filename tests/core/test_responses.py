"""Reply reassembly: non-streamed bodies and SSE streams from the fake upstream's real wire
formats (OpenAI chat, Responses, Anthropic), tool calls included. The reassembled reply
must have the digests the client's next request will carry."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from proxy.core.dialects import from_anthropic, from_openai_chat, from_openai_responses
from proxy.core.responses import StreamAssembler, reply_from_json, usage_from
from tests.support.fake_upstream import FakeUpstream, Reply, ToolCall

TOOL = ToolCall("run_shell", {"cmd": "alembic downgrade 3f2a9c1b7d4e", "n": 2}, id="call_1")

REQUESTS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "chat": (
        "/v1/chat/completions",
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        {"authorization": "Bearer sk-x"},
    ),
    "responses": ("/v1/responses", {"model": "gpt-4o", "input": "hi"}, {"authorization": "Bearer sk-x"}),
    "messages": (
        "/v1/messages",
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        {"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"},
    ),
}


async def _call(fake: FakeUpstream, api: str, stream: bool) -> tuple[Any, list[bytes]]:
    path, body, headers = REQUESTS[api]
    body = dict(body, stream=stream)
    if stream and api == "chat":
        body["stream_options"] = {"include_usage": True}
    async with aiohttp.ClientSession() as s, s.post(fake.url + path, json=body, headers=headers) as r:
        raw = await r.read()
    if not stream:
        return json.loads(raw), []
    events = [e + b"\n\n" for e in raw.replace(b"\r\n", b"\n").split(b"\n\n") if e.strip()]
    return None, events


def _client_side(api: str, body: Any) -> tuple[str, ...]:
    """Digests of the reply as the client sends it back in its next request."""
    if api == "chat":
        msg = body["choices"][0]["message"]
        return from_openai_chat({"messages": [msg]}).digests
    if api == "messages":
        return from_anthropic({"messages": [{"role": "assistant", "content": body["content"]}]}).digests
    return from_openai_responses({"input": body["output"]}).digests


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("tools", [False, True])
async def test_non_streamed_and_streamed_replies_agree(fake_upstream: FakeUpstream, api: str, tools: bool) -> None:
    reply = Reply(text="Rolling back to 3f2a9c1b7d4e.", tool_calls=[TOOL] if tools else ())
    fake_upstream.script(reply, reply)
    body, _ = await _call(fake_upstream, api, stream=False)
    r1 = reply_from_json(api, body)
    assert r1 is not None and r1.complete
    assert tuple(m.digest for m in r1.messages) == _client_side(api, body)
    assert r1.usage is not None and r1.usage.output_tokens

    _, events = await _call(fake_upstream, api, stream=True)
    asm = StreamAssembler(api)
    for ev in events:
        asm.feed(ev)
    r2 = asm.result()
    assert r2 is not None and r2.complete
    assert [m.digest for m in r2.messages] == [m.digest for m in r1.messages]
    text = "\n".join(m.text for m in r2.messages)
    assert "3f2a9c1b7d4e" in text
    calls = [p for m in r2.messages for p in m.tool_calls]
    if tools:
        assert len(calls) == 1 and calls[0].tool_name == "run_shell"
        assert json.loads(calls[0].text) == {"cmd": "alembic downgrade 3f2a9c1b7d4e", "n": 2}
    else:
        assert not calls
    assert r2.usage is not None and r2.usage.output_tokens


def test_openai_chat_stream_with_parallel_tool_calls() -> None:
    chunks = [
        {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"id\":"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"i-0abc\"}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
    ]
    asm = StreamAssembler("chat")
    for c in chunks:
        asm.feed(b"data: " + json.dumps(c).encode() + b"\n\n")
    asm.feed(b"data: [DONE]\n\n")
    r = asm.result()
    assert r is not None and r.complete and r.stop_reason == "tool_calls"
    (msg,) = r.messages
    assert [(p.tool_call_id, p.tool_name, p.text) for p in msg.tool_calls] == [
        ("call_a", "get", '{"id":"i-0abc"}'),
        ("call_b", "put", "{}"),
    ]
    assert r.usage is not None and (r.usage.input_tokens, r.usage.output_tokens) == (10, 5)
    expected = from_openai_chat({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get", "arguments": '{"id":"i-0abc"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "put", "arguments": "{}"}},
    ]}]}).digests
    assert (msg.digest,) == expected


def test_anthropic_stream_cut_short_is_partial_and_usage_merges() -> None:
    events = [
        ("message_start", {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 7, "cache_read_input_tokens": 3}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
    ]
    asm = StreamAssembler("messages")
    for name, data in events:
        asm.feed(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    asm.feed(b"event: ping\ndata: not json\n\n")  # malformed data is skipped
    r = asm.result()
    assert r is not None and not r.complete
    assert r.messages[0].text == "Hello"
    assert r.usage is not None and r.usage.input_tokens == 10 and r.usage.cached_input_tokens == 3


def test_error_bodies_have_no_reply() -> None:
    assert reply_from_json("chat", {"error": {"message": "bad"}}) is None
    assert reply_from_json("messages", {"type": "error", "error": {"type": "x", "message": "y"}}) is None
    assert reply_from_json("responses", "nope") is None
    assert StreamAssembler("chat").result() is None


def test_usage_normalisation() -> None:
    u = usage_from("messages", {"input_tokens": 5, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 1, "output_tokens": 3})
    assert u is not None and (u.input_tokens, u.output_tokens, u.cached_input_tokens) == (8, 3, 1)
    u = usage_from("chat", {"prompt_tokens": 4, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 2}})
    assert u is not None and (u.input_tokens, u.output_tokens, u.cached_input_tokens) == (4, 1, 2)
    u = usage_from("responses", {"input_tokens": 4, "output_tokens": 1})
    assert u is not None and u.input_tokens == 4
