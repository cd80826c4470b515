"""End to end through the proxy with the real openai and anthropic SDKs against the fake
upstream: every response carries a stable ``x-compaction-gate-conversation``, replies
(streamed or not) are recorded, and the id survives a compaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from proxy.core.dialects import from_body
from proxy.gate.tracker import Tracker
from proxy.gate.tracking import TrackingInterceptor
from proxy.state import MemoryStore
from tests.support import ProxyStack
from tests.support.conversations import build_task, compact
from tests.support.fake_upstream import Call, Reply, ToolCall

H = "x-compaction-gate-conversation"


def responder(call: Call) -> Reply:
    if "tool" in call.last_user_text():
        return Reply(text="checking", tool_calls=[ToolCall("bash", {"cmd": "git rev-parse HEAD"})])
    return Reply(text="Done; the previous revision was 3f2a9c1b7d4e.")


@pytest.fixture
def tracked(make_stack: Any) -> Iterator[tuple[ProxyStack, Tracker]]:
    stack: ProxyStack = make_stack()
    stack.fake.responder = responder
    tracker = Tracker(MemoryStore())
    stack.bg.run(tracker.start())
    stack.interceptor = TrackingInterceptor(tracker)
    yield stack, tracker
    stack.bg.run(tracker.close())


def test_openai_sdk_conversation_id_is_stable_across_compaction(tracked: tuple[ProxyStack, Tracker]) -> None:
    stack, tracker = tracked
    client = openai.OpenAI(api_key="sk-test-e2e", base_url=stack.openai_base_url, max_retries=0)
    conv = build_task("migration", seed=7, filler=8)
    body = conv.to_openai(model="gpt-4o")
    msgs: list[Any] = list(body["messages"])
    first = {"model": "gpt-4o", "messages": list(msgs), "tools": body.get("tools")}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=msgs, tools=body.get("tools"))
    cid = raw.headers[H]
    assert cid and cid != "-"
    completion = raw.parse()
    msgs.append(completion.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "user", "content": "please use a tool now"})
    # streamed continuation
    with client.chat.completions.with_streaming_response.create(model="gpt-4o", messages=msgs, stream=True,
                                                                  stream_options={"include_usage": True}) as resp:
        assert resp.headers[H] == cid
        chunks = list(resp.parse())
    assert chunks
    rec = stack.bg.run(_get(tracker, cid))
    assert rec is not None and [t.relation for t in rec.timeline] == ["new", "extend"]
    assert rec.timeline[0].usage and rec.timeline[0].usage["output_tokens"]
    # counted after the response (deferred), settled by the read: tiktoken's full count
    assert rec.timeline[0].tokens == tracker.accounting.count_snapshot("gpt-4o", from_body("chat", first)) > 0
    assert rec.timeline[1].status == "ok" and rec.timeline[1].reply_messages == 1
    # LangChain-style compaction: summary + kept tail
    after = compact(conv, "langchain").after.to_openai(model="gpt-4o")
    raw2 = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=after["messages"])
    assert raw2.headers[H] == cid
    assert rec.timeline[-1].relation == "compacted"


def test_anthropic_sdk_claude_code_style(tracked: tuple[ProxyStack, Tracker]) -> None:
    stack, tracker = tracked
    client = anthropic.Anthropic(api_key="sk-ant-e2e", base_url=stack.url, max_retries=0)
    conv = build_task("git", seed=8, filler=4)
    body = conv.to_anthropic()
    meta = {"user_id": "user_x_account_y_session_0b5e3c1d-7a2f-4e6b-9c8d-1f2e3d4c5b6a"}
    raw = client.messages.with_raw_response.create(model=body["model"], max_tokens=200, system=body["system"],
                                                    messages=body["messages"], metadata=meta)
    cid = raw.headers[H]
    assert cid == "0b5e3c1d-7a2f-4e6b-9c8d-1f2e3d4c5b6a"
    msg = raw.parse()
    messages = list(body["messages"]) + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                                         {"role": "user", "content": "use a tool"}]
    with client.messages.stream(model=body["model"], max_tokens=200, system=body["system"], messages=messages,
                                metadata=meta) as stream:
        final = stream.get_final_message()
    assert any(b.type == "tool_use" for b in final.content)
    rec = stack.bg.run(_get(tracker, cid))
    assert rec is not None and [t.relation for t in rec.timeline] == ["new", "extend"]
    assert rec.timeline[-1].reply_messages == 1 and rec.request_len + 1 == len(rec.digests)
    after = compact(conv, "claude_code").after.to_anthropic()
    raw3 = client.messages.with_raw_response.create(model=body["model"], max_tokens=200, system=after["system"],
                                                     messages=after["messages"], metadata=meta)
    assert raw3.headers[H] == cid and rec.timeline[-1].relation == "compacted"


async def _get(tracker: Tracker, cid: str) -> Any:
    return tracker.get(cid)
