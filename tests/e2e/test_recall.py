"""Issue 19, end to end: the recall tool makes a spilled compaction reversible.

The migration story through the real gate with the real ``openai`` and ``anthropic``
SDKs: the agent compacts, the scripted model — seeing only the summary — calls the
gate's recall tool, the gate resolves it from the spill store and asks upstream again,
and the client's next action is the rollback to the original revision. The client sends
one request and never sees the recall call; ``usage`` sums both rounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e import story
from tests.e2e.stack import GateStack
from tests.e2e.test_responses_and_tripwire import TOOL as RESPONSES_BASH
from tests.e2e.test_responses_and_tripwire import ResponsesAgent
from tests.support.fake_upstream import Responder

KEY = "sk-test-recall-a"
SPILL = "extends: default\nname: spill-recall\nactions:\n  destructive: spill\nspill:\n  list_bindings: false\n"
SAFE_SPILL = "extends: default\nname: safe-spill\nactions:\n  safe: spill\n"
R1, R2 = story.ROUND_USAGE[0], story.ROUND_USAGE[1]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., GateStack]]:
    stacks: list[GateStack] = []

    def factory(policy: str, responder: Responder) -> GateStack:
        path = policy
        if "\n" in policy:
            p = tmp_path / f"policy{len(stacks)}.yaml"
            p.write_text(policy)
            path = str(p)
        s = GateStack(path, responder)
        stacks.append(s)
        return s

    yield factory
    for s in stacks:
        s.close()


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


SDKS = ["openai", "anthropic"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", SDKS)
def test_destructive_compaction_under_spill_is_recalled_and_the_rollback_uses_the_original_revision(
    make: Any, sdk: str, stream: bool
) -> None:
    stack = make(SPILL, story.recalling())
    sent = Sent()
    agent = agent_for(sdk, stack, stream, sent)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    before_client, before_model = len(sent.urls), len(stack.fake.model_requests())
    turn = ask(agent, story.ROLLBACK_ASK)
    # the client's next action: the rollback to the original revision
    assert [n for n, _ in turn.calls] == ["bash"]
    assert story.rollback_target(turn.calls[0][1]) == story.REVISION
    # one request from the client, two rounds upstream; no recall call reached the client
    assert len(sent.urls) - before_client == 1
    rounds = stack.fake.model_requests()[before_model:]
    assert len(rounds) == 2
    assert story.RECALL_TOOL not in json.dumps([turn.calls, turn.text])
    assert turn.stop in ("tool_calls", "tool_use")
    # usage sums both rounds
    assert turn.usage == (R1[0] + R2[0], R1[1] + R2[1])
    assert turn.headers["x-compaction-gate-action"] == "spill"
    assert turn.headers["x-compaction-gate-recall"] == story.RECALL_TOOL
    if not stream:
        assert turn.headers["x-compaction-gate-recall-rounds"] == "2"
        assert "summed over 2 upstream rounds" in turn.headers["x-compaction-gate-usage"]
    # the model saw only the summary and the handle (list_bindings: false) in round 1,
    # and the recalled region in round 2
    assert story.REVISION not in messages_text(rounds[0])
    assert "spill_" in messages_text(rounds[0]) and story.RECALL_TOOL in messages_text(rounds[0])
    assert story.REVISION in messages_text(rounds[1]) and "alembic upgrade head" in messages_text(rounds[1])
    ev = [e for e in stack.events() if e["kind"] == "recall"]
    assert len(ev) == 1 and ev[0]["outcome"] == "found" and ev[0]["bytes"] > 100 and ev[0]["round"] == 1
    assert "alembic upgrade" not in json.dumps(ev)  # events never carry the content
    # the client runs the rollback; its next request carries the revision itself
    if sdk == "openai":
        agent.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c_rb", "type": "function", "function": {"name": "bash", "arguments": turn.calls[0][1]}}]})
        agent.messages.append({"role": "tool", "tool_call_id": "c_rb", "content": story.run_tool("alembic downgrade x")})
    else:
        agent.messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": "t_rb", "name": "bash",
                                                                  "input": json.loads(turn.calls[0][1])}]})
        agent.messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t_rb",
                                                             "content": story.run_tool("alembic downgrade x")}]})
    _, calls = agent.call(agent.messages)
    assert calls == [] and len(stack.fake.model_requests()) == before_model + 3  # one round: nothing to recall


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", SDKS)
def test_a_compaction_judged_safe_under_safe_spill_is_still_recoverable(make: Any, sdk: str, stream: bool) -> None:
    """The revisions here have no shape a detector knows: the gate judges the compaction
    safe. ``safe: spill`` keeps the region anyway and the model recalls the revision it
    needs; without it the model invents one."""
    outcomes = {}
    for policy in ("default", SAFE_SPILL):
        stack = make(policy, story.recalling(story.slug_revisions))
        sent = Sent()
        agent = agent_for(sdk, stack, stream, sent, run=story.run_slug_tool)
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        n = len(sent.urls)
        turn = ask(agent, story.ROLLBACK_ASK)
        assert len(sent.urls) - n == 1
        outcomes[policy == "default"] = turn
        comp = [e for e in stack.events() if e["kind"] == "compaction"]
        assert comp and comp[-1]["verdict"] == "safe"
        assert comp[-1]["action"] == ("none" if policy == "default" else "spill")
    missed, recalled = outcomes[True], outcomes[False]
    assert story.rollback_target(missed.calls[0][1]) == story.INVENTED
    assert [n for n, _ in recalled.calls] == ["bash"]
    assert story.rollback_target(recalled.calls[0][1]) == story.SLUG_BEFORE
    assert recalled.usage == (R1[0] + R2[0], R1[1] + R2[1])


@pytest.mark.parametrize("stream", [False, True])
def test_responses_api_recall_with_function_call_items(make: Any, stream: bool) -> None:
    stack = make(SPILL, story.recalling())
    agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), stream)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    agent.user(story.ROLLBACK_ASK)
    n = len(stack.fake.model_requests())
    kw = {"model": "gpt-4o", "instructions": story.SYSTEM, "input": agent.items, "tools": [RESPONSES_BASH]}
    if stream:
        with agent.client.responses.stream(**kw) as s:  # the SDK checks ids, indices, sequence
            resp = s.get_final_response()
    else:
        resp = agent.client.responses.create(**kw)
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["bash"] and story.rollback_target(calls[0].arguments) == story.REVISION
    assert all(getattr(t, "name", None) != story.RECALL_TOOL for t in resp.tools)
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (R1[0] + R2[0], R1[1] + R2[1])
    second = stack.fake.model_requests()[n + 1].json
    kinds = [i.get("type") for i in second["input"][-2:]]
    assert kinds == ["function_call", "function_call_output"] and story.REVISION in second["input"][-1]["output"]
    assert len(stack.fake.model_requests()) == n + 2


def test_a_streamed_responses_recall_keeps_previous_response_id_chains_working(make: Any) -> None:
    """The stream shows the first round's id; upstream stored the whole exchange under the
    last round's. A request continuing the shown id reaches upstream with the real one."""
    stack = make(SPILL, story.recalling())
    agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), True)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    agent.user(story.ROLLBACK_ASK)
    with agent.client.responses.stream(model="gpt-4o", instructions=story.SYSTEM, input=agent.items, tools=[RESPONSES_BASH]) as s:
        shown = s.get_final_response()
    rounds = stack.fake.model_requests()[-2:]
    real = "resp_" + __import__("hashlib").sha256(b"POST /v1/responses\n" + rounds[1].body).hexdigest()[:24]
    assert shown.id != real
    call = next(o for o in shown.output if o.type == "function_call")
    agent.client.responses.create(model="gpt-4o", previous_response_id=shown.id, tools=[RESPONSES_BASH],
                                  input=[{"type": "function_call_output", "call_id": call.call_id, "output": "done"}])
    assert stack.fake.model_requests()[-1].json["previous_response_id"] == real
