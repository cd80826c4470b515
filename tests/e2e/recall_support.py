"""What the recall tests share: the client-side request counter, agents over the real
SDKs, and one turn seen the way the client sees it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from tests.e2e import story
from tests.e2e.stack import GateStack

KEY = "sk-test-recall-a"
SPILL = "extends: default\nname: spill-recall\nactions:\n  destructive: spill\nspill:\n  list_bindings: false\n"
SAFE_SPILL = "extends: default\nname: safe-spill\nactions:\n  safe: spill\n"


@dataclass
class Sent:
    """What the client itself sent (an httpx request hook on the SDK's own client)."""

    urls: list[str] = field(default_factory=list)

    def hook(self, request: Any) -> None:
        self.urls.append(str(request.url))


def agent_for(sdk: str, stack: GateStack, stream: bool, sent: Sent, *, key: str = KEY, run: Any = None) -> Any:
    if sdk == "openai":
        http = openai.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
        c = openai.OpenAI(api_key=key, base_url=stack.openai_base_url, max_retries=0, http_client=http)
        return story.OpenAIAgent(c, stream, run=run)
    http = anthropic.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    return story.AnthropicAgent(anthropic.Anthropic(api_key=key, base_url=stack.url, max_retries=0, http_client=http), stream, run=run)


@dataclass
class Turn:
    """The client's view of one answer: its tool calls, text, usage, headers."""

    calls: list[tuple[str, str]]
    text: str
    usage: tuple[int, int] | None
    headers: dict[str, str]
    stop: str | None


def ask(agent: Any, text: str, **extra: Any) -> Turn:
    """One turn of the agent's conversation, seen the way the client sees it."""
    agent.messages.append({"role": "user", "content": text})
    if isinstance(agent, story.OpenAIAgent):
        kw = {"model": agent.model, "messages": agent.messages, "tools": [story.BASH_OPENAI], **extra}
        if not agent.stream:
            raw = agent.client.chat.completions.with_raw_response.create(**kw)
            r = raw.parse()
            m = r.choices[0].message
            return Turn([(tc.function.name, tc.function.arguments) for tc in m.tool_calls or []], m.content or "",
                        (r.usage.prompt_tokens, r.usage.completion_tokens), dict(raw.headers), r.choices[0].finish_reason)
        calls: dict[int, list[str]] = {}
        out, usage, stop, ids = "", None, None, set()
        with agent.client.chat.completions.with_streaming_response.create(
            **kw, stream=True, stream_options={"include_usage": True}
        ) as resp:
            headers = dict(resp.headers)
            for chunk in resp.parse():
                ids.add(chunk.id)
                if chunk.usage is not None:
                    usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for ch in chunk.choices:
                    out += ch.delta.content or ""
                    stop = ch.finish_reason or stop
                    for tc in ch.delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, ["", ""])
                        slot[0] += (tc.function.name or "") if tc.function else ""
                        slot[1] += (tc.function.arguments or "") if tc.function else ""
        assert len(ids) == 1, ids  # one coherent stream
        return Turn([(n, a) for n, a in calls.values()], out, usage, headers, stop)
    kw = {"model": agent.model, "max_tokens": 1024, "system": story.SYSTEM, "messages": agent.messages,
          "tools": [story.BASH_ANTHROPIC], **extra}
    if agent.stream:
        with agent.client.messages.stream(**kw) as s:
            msg = s.get_final_message()
            headers = dict(s.response.headers)
    else:
        raw = agent.client.messages.with_raw_response.create(**kw)
        msg, headers = raw.parse(), dict(raw.headers)
    return Turn([(b.name, json.dumps(b.input)) for b in msg.content if b.type == "tool_use"],
                "".join(b.text for b in msg.content if b.type == "text"),
                (msg.usage.input_tokens, msg.usage.output_tokens), headers, msg.stop_reason)


def messages_text(req: Any) -> str:
    body = req.json
    return json.dumps(body.get("messages") or body.get("input"))


