"""The official openai SDK gets the same objects through the proxy as directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.support import ProxyStack
from tests.support.fake_upstream import Call, Reply, ToolCall

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        },
    }
]
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are a careful ops agent."},
    {"role": "user", "content": "Roll back migration to the previous revision please"},
]


def tool_responder(call: Call) -> Reply:
    """Answer with a tool call whenever tools are offered, text otherwise."""
    if isinstance(call.json, dict) and call.json.get("tools"):
        return Reply(
            text=None,
            tool_calls=[ToolCall("run_shell", {"cmd": "alembic downgrade 3f2a9c1b7d4e"})],
        )
    return Reply(text=f"echo: {call.last_user_text()}")


def clients(stack: ProxyStack) -> tuple[openai.OpenAI, openai.OpenAI]:
    direct = openai.OpenAI(
        api_key="sk-test-direct", base_url=stack.fake.openai_base_url, max_retries=0
    )
    proxied = openai.OpenAI(api_key="sk-test-direct", base_url=stack.openai_base_url, max_retries=0)
    return direct, proxied


def same(stack: ProxyStack, fn: Callable[[openai.OpenAI], Any]) -> Any:
    direct, proxied = clients(stack)
    expected = fn(direct)
    got = fn(proxied)
    assert got == expected
    return got


def dump_all(items: Any) -> list[dict[str, Any]]:
    return [item.model_dump() for item in items]


@pytest.fixture
def tool_stack(stack: ProxyStack) -> ProxyStack:
    stack.fake.responder = tool_responder
    return stack


def test_chat_completion(stack: ProxyStack) -> None:
    got = same(
        stack,
        lambda c: c.chat.completions.create(model="gpt-4o", messages=MESSAGES).model_dump(),
    )
    assert got["choices"][0]["message"]["content"].startswith("echo: Roll back")
    assert got["usage"]["total_tokens"] > 0


def test_chat_completion_tool_calls(tool_stack: ProxyStack) -> None:
    got = same(
        tool_stack,
        lambda c: c.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, tools=TOOLS
        ).model_dump(),
    )
    call = got["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "run_shell"
    assert "3f2a9c1b7d4e" in call["function"]["arguments"]
    assert got["choices"][0]["finish_reason"] == "tool_calls"


def test_chat_stream_with_usage(stack: ProxyStack) -> None:
    chunks = same(
        stack,
        lambda c: dump_all(
            c.chat.completions.create(
                model="gpt-4o",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
        ),
    )
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks if c["choices"])
    assert text.startswith("echo: Roll back")


def test_chat_stream_tool_calls(tool_stack: ProxyStack) -> None:
    chunks = same(
        tool_stack,
        lambda c: dump_all(
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS, stream=True)
        ),
    )
    args = "".join(
        tc["function"]["arguments"] or ""
        for c in chunks
        for tc in (c["choices"][0]["delta"].get("tool_calls") or [])
    )
    assert args == '{"cmd":"alembic downgrade 3f2a9c1b7d4e"}'


def test_chat_stream_helper_final_completion(tool_stack: ProxyStack) -> None:
    def run(c: openai.OpenAI) -> Any:
        with c.chat.completions.stream(model="gpt-4o", messages=MESSAGES, tools=TOOLS) as s:
            events = [e.type for e in s]
            return events, s.get_final_completion().model_dump()

    events, final = same(tool_stack, run)
    assert "tool_calls.function.arguments.done" in events
    assert final["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "run_shell"


def test_legacy_completions(stack: ProxyStack) -> None:
    same(
        stack,
        lambda c: c.completions.create(
            model="gpt-3.5-turbo-instruct", prompt="Say hi"
        ).model_dump(),
    )
    chunks = same(
        stack,
        lambda c: dump_all(
            c.completions.create(
                model="gpt-3.5-turbo-instruct", prompt="Say hi to all", stream=True
            )
        ),
    )
    assert "".join(c["choices"][0]["text"] for c in chunks) == "echo: Say hi to all"


def test_responses_api(tool_stack: ProxyStack) -> None:
    got = same(
        tool_stack, lambda c: c.responses.create(model="gpt-4o", input="Hello there").model_dump()
    )
    assert got["output"][0]["content"][0]["text"] == "echo: Hello there"
    tools = [
        {
            "type": "function",
            "name": "run_shell",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ]
    got = same(
        tool_stack,
        lambda c: c.responses.create(model="gpt-4o", input="roll back", tools=tools).model_dump(),
    )
    assert got["output"][0]["type"] == "function_call"


def test_responses_stream(tool_stack: ProxyStack) -> None:
    events = same(
        tool_stack,
        lambda c: dump_all(
            c.responses.create(model="gpt-4o", input="stream me please", stream=True)
        ),
    )
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_embeddings_and_models(stack: ProxyStack) -> None:
    got = same(
        stack,
        lambda c: c.embeddings.create(
            model="text-embedding-3-small", input=["a b", "c"]
        ).model_dump(),
    )
    assert len(got["data"]) == 2
    same(
        stack,
        lambda c: c.embeddings.create(
            model="text-embedding-3-small", input="a", encoding_format="float"
        ).model_dump(),
    )
    models = same(stack, lambda c: [m.model_dump() for m in c.models.list()])
    assert {"gpt-4o"} <= {m["id"] for m in models}
    same(stack, lambda c: c.models.retrieve("gpt-4o").model_dump())


def test_proxy_headers_on_sdk_response(stack: ProxyStack) -> None:
    _, proxied = clients(stack)
    raw = proxied.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.headers["x-compaction-gate-action"] == "none"
    assert raw.headers["x-compaction-gate-conversation"] == "unknown"
    assert float(raw.headers["x-compaction-gate-overhead-ms"]) >= 0
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.headers["x-ratelimit-remaining-requests"] == "9999"


async def test_async_client_matches_direct(tool_stack: ProxyStack) -> None:
    direct = openai.AsyncOpenAI(
        api_key="sk-a", base_url=tool_stack.fake.openai_base_url, max_retries=0
    )
    proxied = openai.AsyncOpenAI(api_key="sk-a", base_url=tool_stack.openai_base_url, max_retries=0)

    async def plain(c: openai.AsyncOpenAI) -> Any:
        return (await c.chat.completions.create(model="gpt-4o", messages=MESSAGES)).model_dump()

    async def tools(c: openai.AsyncOpenAI) -> Any:
        r = await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS)
        return r.model_dump()

    async def streamed(c: openai.AsyncOpenAI) -> Any:
        s = await c.chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
        return [chunk.model_dump() async for chunk in s]

    async def responses_stream(c: openai.AsyncOpenAI) -> Any:
        s = await c.responses.create(model="gpt-4o", input="hi", stream=True)
        return [e.model_dump() async for e in s]

    for fn in (plain, tools, streamed, responses_stream):
        assert await fn(proxied) == await fn(direct)
    await direct.close()
    await proxied.close()
