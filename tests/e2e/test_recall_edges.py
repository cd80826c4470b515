"""The recall tool's edges, with the real SDKs: another tenant's handle, an expired
handle, a client tool of the same name, ``tool_choice: none``, a recall mixed with
client tool calls, the round budget, and a client that goes away during the second
round."""

from __future__ import annotations

import json
import re
from typing import Any

import openai
import pytest

import proxy.gate.recall as recall_mod
from tests.e2e import story
from tests.e2e.recall_support import SPILL, Sent, agent_for, ask, messages_text
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Fault, Reply, ToolCall

BOTH = "extends: default\nname: both\nactions:\n  destructive: spill\n  safe: spill\nspill:\n  list_bindings: false\n"
_HANDLE = re.compile(r"spill_[A-Za-z0-9_-]{20,}")


def compacted(stack: GateStack, sdk: str = "openai", stream: bool = False, **kw: Any) -> Any:
    agent = agent_for(sdk, stack, stream, Sent(), **kw)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    return agent


def handles_in(req: Any) -> list[str]:
    return _HANDLE.findall(json.dumps(req.json))


def recalls(stack: GateStack) -> list[dict[str, Any]]:
    return [e for e in stack.events() if e["kind"] == "recall"]


def test_a_handle_of_another_tenant_resolves_to_not_found(make_gate: Any) -> None:
    stack = make_gate(BOTH, story.recalling())
    # tenant B: a conversation whose (safe, slug) compaction was spilled
    b = compacted(stack, key="sk-test-recall-b", run=story.run_slug_tool)
    b.messages.append({"role": "user", "content": "status?"})
    b.call(b.messages)
    theirs = handles_in(stack.fake.model_requests()[-1])
    assert theirs
    # tenant A's model asks for B's handle
    stack.fake.responder = story.recalling(handle=theirs[0])
    a = compacted(stack)
    turn = ask(a, story.ROLLBACK_ASK)
    second = stack.fake.model_requests()[-1]
    assert "no stored context under handle" in messages_text(second)
    assert story.SLUG_BEFORE not in json.dumps(second.json)  # nothing of B's region
    assert recalls(stack)[-1]["outcome"] == "not_found" and recalls(stack)[-1]["handle"] == theirs[0]
    # nothing found, the model guessed: the tripwire (armed by A's compaction) stops it
    assert story.INVENTED not in json.dumps(turn.calls)
    # B's own handle still resolves for B
    status, body = stack.get(f"/gate/spill/{theirs[0]}", {"Authorization": "Bearer sk-test-recall-b"})
    assert status == 200 and story.SLUG_BEFORE in body["text"]


def test_an_expired_handle(make_gate: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_gate(SPILL, story.recalling())
    agent = compacted(stack)
    ask(agent, "What is the state of the service?")  # the compaction is seen (and spilled) here
    agent.messages.append({"role": "assistant", "content": "ok"})
    ttl = 7 * 24 * 3600
    # the store's clock passes the TTL while the tool is still offered: the call finds nothing
    real = stack.gate.spill._clock
    stack.gate.spill._clock = lambda: real() + ttl + 60
    turn = ask(agent, story.ROLLBACK_ASK)
    assert recalls(stack)[-1]["outcome"] == "not_found"
    assert "no stored context under handle" in messages_text(stack.fake.model_requests()[-1])
    assert story.INVENTED not in json.dumps(turn.calls)  # the guess after it is blocked
    # once the gate's clock passes it too, the tool is no longer offered: the note remains
    monkeypatch.setattr(recall_mod, "now", lambda: real() + ttl + 60)
    n = len(stack.fake.model_requests())
    again = ask(agent, story.ROLLBACK_ASK)
    sent = stack.fake.model_requests()[n:]
    assert len(sent) == 1 and story.RECALL_TOOL not in json.dumps(sent[0].json.get("tools"))
    assert "x-compaction-gate-recall" not in again.headers
    assert "/gate/spill/spill_" in messages_text(sent[0])


CLIENT_RECALL = {"type": "function", "function": {
    "name": story.RECALL_TOOL, "description": "Recall a note from the user's notebook",
    "parameters": {"type": "object", "properties": {"handle": {"type": "string"}}, "required": ["handle"]}}}


def test_a_client_tool_named_like_the_recall_tool(make_gate: Any) -> None:
    stack = make_gate(SPILL, story.recalling())
    agent = compacted(stack)
    agent.messages.append({"role": "user", "content": story.ROLLBACK_ASK})
    raw = agent.client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=agent.messages, tools=[story.BASH_OPENAI, CLIENT_RECALL])
    first = stack.fake.model_requests()[-2]
    names = [t["function"]["name"] for t in first.json["tools"]]
    assert names == ["bash", story.RECALL_TOOL, story.RECALL_TOOL + "_2"]
    assert first.json["tools"][1] == CLIENT_RECALL  # the client's own, untouched
    assert raw.headers["x-compaction-gate-recall"] == story.RECALL_TOOL + "_2"
    calls = raw.parse().choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["bash"] and story.rollback_target(calls[0].function.arguments) == story.REVISION
    # a call of the client's own tool of that name is the client's: it reaches the client
    stack.fake.script(Reply(tool_calls=[ToolCall(story.RECALL_TOOL, {"handle": "page-7"})]))
    n = len(stack.fake.model_requests())
    out = agent.client.chat.completions.create(model="gpt-4o", messages=agent.messages, tools=[story.BASH_OPENAI, CLIENT_RECALL])
    assert [c.function.name for c in out.choices[0].message.tool_calls] == [story.RECALL_TOOL]
    assert len(stack.fake.model_requests()) == n + 1


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_tool_choice_none_falls_back_to_the_note(make_gate: Any, sdk: str) -> None:
    stack = make_gate(SPILL, story.recalling())
    agent = compacted(stack, sdk)
    n = len(stack.fake.model_requests())
    choice = "none" if sdk == "openai" else {"type": "none"}
    turn = ask(agent, "What is the state of the service?", tool_choice=choice)
    sent = stack.fake.model_requests()[n:]
    assert len(sent) == 1
    assert story.RECALL_TOOL not in json.dumps(sent[0].json["tools"])
    assert sent[0].json["tool_choice"] == choice
    assert "GET /gate/spill/spill_" in messages_text(sent[0])  # the note, with the handle's URL
    assert "x-compaction-gate-recall" not in turn.headers
    fb = [e for e in stack.events() if e["kind"] == "recall_fallback"]
    assert fb and fb[-1]["reason"] == "tool_choice_none"


@pytest.mark.parametrize(("sdk", "stream"), [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)])
def test_a_recall_mixed_with_client_tool_calls(make_gate: Any, sdk: str, stream: bool) -> None:
    stack = make_gate(SPILL, story.recalling(mixed=True))
    agent = compacted(stack, sdk, stream)
    n = len(stack.fake.model_requests())
    turn = ask(agent, story.ROLLBACK_ASK)
    # the guess made together with the recall never reached the client; the answer made
    # after it did
    assert [name for name, _ in turn.calls] == ["bash"]
    assert story.rollback_target(turn.calls[0][1]) == story.REVISION
    _, second = stack.fake.model_requests()[n:]
    text = json.dumps(second.json)
    assert story.INVENTED not in text  # the guessed call is not in the follow-up
    assert "were not run: bash" in text  # the model is told to make it again
    assert recalls(stack)[-1]["deferred_calls"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_the_round_budget_exhausted(make_gate: Any, stream: bool) -> None:
    policy = SPILL + "recall:\n  max_rounds: 1\n  budget_rounds: 1\n"
    stack = make_gate(policy, story.recalling(always=True))
    agent = compacted(stack, "openai", stream)
    n = len(stack.fake.model_requests())
    turn = ask(agent, story.ROLLBACK_ASK)
    assert len(stack.fake.model_requests()) - n == 2  # one follow-up round, not more
    assert turn.calls == [] and "recall limit" in turn.text
    assert turn.stop == "stop"
    assert [e["outcome"] for e in recalls(stack)] == ["found", "budget"]
    # the conversation's budget is spent: the next request gets the note, not the tool
    n = len(stack.fake.model_requests())
    ask(agent, "What is the state of the service?")
    assert len(stack.fake.model_requests()) - n == 1
    assert story.RECALL_TOOL not in json.dumps(stack.fake.model_requests()[-1].json["tools"])
    fb = [e for e in stack.events() if e["kind"] == "recall_fallback"]
    assert fb and fb[-1]["reason"] == "budget"


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_disconnect_during_the_second_round_cancels_it_upstream(make_gate: Any, stream: bool) -> None:
    holder: dict[str, GateStack] = {}
    base = story.recalling()

    def respond(call: Call) -> Reply:
        reply = base(call)
        if any(tc.name == story.RECALL_TOOL for tc in reply.tool_calls):
            # the next request is the gate's second round: make it hang
            fault = Fault(stall_after_events=2) if stream else Fault(delay=30)
            holder["s"].fake.inject(fault)
        return reply

    stack = make_gate(SPILL, respond)
    holder["s"] = stack
    agent = compacted(stack, "openai", stream)
    agent.client = agent.client.with_options(timeout=2.0)
    with pytest.raises(openai.APIConnectionError):
        ask(agent, story.ROLLBACK_ASK)
    assert stack.fake.wait_for_disconnects_sync(1, timeout=10)
    gone = stack.fake.disconnects[-1]
    assert "compaction-gate recall of spill_" in messages_text(gone)  # the second round
    assert stack.fake.disconnects == [gone]
    closed = []
    for _ in range(100):
        closed = [e for e in stack.events() if e["kind"] == "recall_closed"]
        if closed:
            break
        __import__("time").sleep(0.05)
    assert closed and closed[-1]["reason"] == "client_disconnected"


def test_a_query_returns_only_the_passages_that_mention_it(make_gate: Any) -> None:
    stack = make_gate(SPILL, story.recalling(query="Running upgrade"))
    agent = compacted(stack)
    n = len(stack.fake.model_requests())
    turn = ask(agent, story.ROLLBACK_ASK)
    assert story.rollback_target(turn.calls[0][1]) == story.REVISION
    _, second = stack.fake.model_requests()[n:]
    result = second.json["messages"][-1]
    assert result["role"] == "tool"
    assert "the 1 passage(s) that mention 'Running upgrade'" in result["content"]
    assert story.REVISION in result["content"]
    assert "4 passed in 0.31s" not in result["content"]  # another passage of the region
    ev = recalls(stack)[-1]
    assert ev["outcome"] == "found" and ev["query"] is True
    assert "Running upgrade" not in json.dumps(recalls(stack))  # the query text is not recorded


def test_the_conversations_byte_budget_cuts_the_result_then_stops_offering_the_tool(make_gate: Any) -> None:
    policy = SPILL + "recall:\n  budget_bytes: 1024\n"  # less than the region holds
    stack = make_gate(policy, story.recalling())
    agent = compacted(stack)
    n = len(stack.fake.model_requests())
    turn = ask(agent, story.ROLLBACK_ASK)
    _, second = stack.fake.model_requests()[n:]
    result = second.json["messages"][-1]["content"]
    assert "more byte(s) not returned (recall limit)" in result
    ev = recalls(stack)[-1]
    assert ev["outcome"] == "found" and ev["bytes"] == len(result.encode()) <= 1024
    # the revision comes early in the region: the cut result still holds it
    assert story.rollback_target(turn.calls[0][1]) == story.REVISION
    # the budget is spent: the next request is not offered the tool
    agent.messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c_rb", "type": "function", "function": {"name": "bash", "arguments": turn.calls[0][1]}}]})
    agent.messages.append({"role": "tool", "tool_call_id": "c_rb", "content": story.run_tool("alembic downgrade x")})
    n = len(stack.fake.model_requests())
    again = ask(agent, "What is the state of the service?")
    sent = stack.fake.model_requests()[n:]
    assert len(sent) == 1 and story.RECALL_TOOL not in json.dumps(sent[0].json["tools"])
    assert "x-compaction-gate-recall" not in again.headers
    fb = [e for e in stack.events() if e["kind"] == "recall_fallback"]
    assert fb and fb[-1]["reason"] == "budget"


def test_a_regenerated_turn_after_a_recall_keeps_one_note_naming_a_handle_the_tool_offers(make_gate: Any) -> None:
    """The client withdraws the rollback the model made after recalling and asks again (a
    regenerate): a lossy turn without a summary of its own extends the spill repair — one
    note right after the summary, naming a handle the tool describes — and the model
    recalls again instead of guessing."""
    stack = make_gate(SPILL, story.recalling())
    agent = compacted(stack)
    first = ask(agent, story.ROLLBACK_ASK)
    agent.messages.pop()  # the turn withdrawn: the same question again
    n = len(stack.fake.model_requests())
    again = ask(agent, story.ROLLBACK_ASK)
    assert story.rollback_target(again.calls[0][1]) == story.rollback_target(first.calls[0][1]) == story.REVISION
    rounds = stack.fake.model_requests()[n:]
    assert len(rounds) == 2
    sent = rounds[0].json
    text = json.dumps(sent["messages"])
    assert text.count("[compaction-gate") == 1  # one note, not a second one after the question
    assert sent["messages"][-1]["content"] == story.ROLLBACK_ASK
    tool = next(t for t in sent["tools"] if t["function"]["name"] == story.RECALL_TOOL)
    # the withdrawn turn was spilled too: the note names the newest handle (as the spill
    # note would), and the tool describes both, newest first
    described = _HANDLE.findall(tool["function"]["description"])
    assert len(described) == 2 and set(_HANDLE.findall(text)) == {described[0]}
    assert [e["transition"] for e in stack.events() if e["kind"] == "compaction"] == ["summarize", "fork"]
