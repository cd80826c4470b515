"""Issue 19, end to end: the recall tool makes a spilled compaction reversible.

The migration story through the real gate with the real ``openai`` and ``anthropic``
SDKs: the agent compacts, the scripted model — seeing only the summary — calls the
gate's recall tool, the gate resolves it from the spill store and asks upstream again,
and the client's next action is the rollback to the original revision. The client sends
one request and never sees the recall call; ``usage`` sums both rounds.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.e2e import story
from tests.e2e.recall_support import KEY, SAFE_SPILL, SPILL, Sent, agent_for, ask, messages_text
from tests.e2e.test_responses_and_tripwire import TOOL as RESPONSES_BASH
from tests.e2e.test_responses_and_tripwire import ResponsesAgent

R1, R2 = story.ROUND_USAGE[0], story.ROUND_USAGE[1]


SDKS = ["openai", "anthropic"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", SDKS)
def test_destructive_compaction_under_spill_is_recalled_and_the_rollback_uses_the_original_revision(
    make_gate: Any, sdk: str, stream: bool
) -> None:
    stack = make_gate(SPILL, story.recalling())
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
def test_a_compaction_judged_safe_under_safe_spill_is_still_recoverable(make_gate: Any, sdk: str, stream: bool) -> None:
    """The revisions here have no shape a detector knows: the gate judges the compaction
    safe. ``safe: spill`` keeps the region anyway and the model recalls the revision it
    needs; without it the model invents one."""
    outcomes = {}
    for policy in ("default", SAFE_SPILL):
        stack = make_gate(policy, story.recalling(story.slug_revisions))
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
def test_responses_api_recall_with_function_call_items(make_gate: Any, stream: bool) -> None:
    stack = make_gate(SPILL, story.recalling())
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


def test_a_streamed_responses_recall_keeps_previous_response_id_chains_working(make_gate: Any) -> None:
    """The stream shows the first round's id; upstream stored the whole exchange under the
    last round's. A request continuing the shown id reaches upstream with the real one."""
    stack = make_gate(SPILL, story.recalling())
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
