"""The official anthropic SDK gets the same objects through the proxy as directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from tests.support import ProxyStack
from tests.support.fake_upstream import Call, Reply, ToolCall

MODEL = "claude-fake-1"
TOOLS: list[Any] = [
    {
        "name": "run_shell",
        "description": "Run a shell command",
        "input_schema": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
        },
    }
]
MESSAGES: list[Any] = [{"role": "user", "content": "Complete multipart upload for the file"}]


def tool_responder(call: Call) -> Reply:
    if isinstance(call.json, dict) and call.json.get("tools"):
        return Reply(
            text="Completing the upload.",
            tool_calls=[
                ToolCall(
                    "run_shell", {"cmd": "aws s3api complete-multipart-upload --upload-id 2~abcDEF"}
                )
            ],
        )
    return Reply(text=f"echo: {call.last_user_text()}")


@pytest.fixture
def tool_stack(stack: ProxyStack) -> ProxyStack:
    stack.fake.responder = tool_responder
    return stack


def clients(stack: ProxyStack) -> tuple[anthropic.Anthropic, anthropic.Anthropic]:
    direct = anthropic.Anthropic(
        api_key="sk-ant-test", base_url=stack.fake.anthropic_base_url, max_retries=0
    )
    proxied = anthropic.Anthropic(api_key="sk-ant-test", base_url=stack.url, max_retries=0)
    return direct, proxied


def same(stack: ProxyStack, fn: Callable[[anthropic.Anthropic], Any]) -> Any:
    direct, proxied = clients(stack)
    expected = fn(direct)
    got = fn(proxied)
    assert got == expected
    return got


def test_messages_create(stack: ProxyStack) -> None:
    got = same(
        stack,
        lambda c: c.messages.create(
            model=MODEL, max_tokens=256, system="be terse", messages=MESSAGES
        ).model_dump(),
    )
    assert got["content"][0]["text"] == "echo: Complete multipart upload for the file"
    assert got["stop_reason"] == "end_turn"


def test_messages_tool_use(tool_stack: ProxyStack) -> None:
    got = same(
        tool_stack,
        lambda c: c.messages.create(
            model=MODEL, max_tokens=256, messages=MESSAGES, tools=TOOLS
        ).model_dump(),
    )
    assert got["stop_reason"] == "tool_use"
    assert got["content"][1]["input"]["cmd"].endswith("2~abcDEF")


def test_raw_stream_events_identical(tool_stack: ProxyStack) -> None:
    events = same(
        tool_stack,
        lambda c: [
            e.model_dump()
            for e in c.messages.create(
                model=MODEL, max_tokens=256, messages=MESSAGES, tools=TOOLS, stream=True
            )
        ],
    )
    types = [e["type"] for e in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert "message_delta" in types and "content_block_stop" in types
    deltas = {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"}
    assert deltas == {"text_delta", "input_json_delta"}


def test_stream_helper_and_final_message(tool_stack: ProxyStack) -> None:
    def run(c: anthropic.Anthropic) -> Any:
        with c.messages.stream(model=MODEL, max_tokens=256, messages=MESSAGES, tools=TOOLS) as s:
            events = [e.model_dump() for e in s]
            return events, s.get_final_message().model_dump()

    events, final = same(tool_stack, run)
    assert final["content"][1]["name"] == "run_shell"
    assert any(e["type"] == "text" for e in events)


def test_count_tokens_and_models(stack: ProxyStack) -> None:
    got = same(
        stack, lambda c: c.messages.count_tokens(model=MODEL, messages=MESSAGES).model_dump()
    )
    assert got["input_tokens"] > 0
    models = same(stack, lambda c: [m.model_dump() for m in c.models.list()])
    assert models and models[0]["type"] == "model"


def test_anthropic_requests_reach_anthropic_upstream(stack: ProxyStack) -> None:
    _, proxied = clients(stack)
    proxied.messages.create(model=MODEL, max_tokens=16, messages=MESSAGES)
    proxied.models.list()
    paths = [(r.method, r.path, r.headers.get("anthropic-version")) for r in stack.fake.requests]
    assert paths[0][:2] == ("POST", "/v1/messages")
    assert paths[1][:2] == ("GET", "/v1/models")
    assert all(version for _, _, version in paths)


async def test_async_client_matches_direct(tool_stack: ProxyStack) -> None:
    direct = anthropic.AsyncAnthropic(
        api_key="k", base_url=tool_stack.fake.anthropic_base_url, max_retries=0
    )
    proxied = anthropic.AsyncAnthropic(api_key="k", base_url=tool_stack.url, max_retries=0)

    async def plain(c: anthropic.AsyncAnthropic) -> Any:
        r = await c.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, tools=TOOLS)
        return r.model_dump()

    async def streamed(c: anthropic.AsyncAnthropic) -> Any:
        s = await c.messages.create(
            model=MODEL, max_tokens=64, messages=MESSAGES, tools=TOOLS, stream=True
        )
        return [e.model_dump() async for e in s]

    async def helper(c: anthropic.AsyncAnthropic) -> Any:
        async with c.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as s:
            texts = [t async for t in s.text_stream]
            return texts, (await s.get_final_message()).model_dump()

    for fn in (plain, streamed, helper):
        assert await fn(proxied) == await fn(direct)
    await direct.close()
    await proxied.close()
