"""The Responses API through the gate, and the tripwire blocking an invented identifier."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.e2e import story
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply, ToolCall

KEY = "sk-test-responses"
TOOL = {"type": "function", "name": "bash", "description": "Run a shell command",
        "parameters": story.BASH_OPENAI["function"]["parameters"]}


class ResponsesAgent:
    def __init__(self, client: openai.OpenAI, stream: bool) -> None:
        self.client, self.stream = client, stream
        self.items: list[dict[str, Any]] = []

    def call(self, items: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        kw = {"model": "gpt-4o", "instructions": story.SYSTEM, "input": items, "tools": [TOOL]}
        if self.stream:
            with self.client.responses.stream(**kw) as s:
                resp = s.get_final_response()
        else:
            resp = self.client.responses.create(**kw)
        calls = [{"type": "function_call", "call_id": o.call_id, "name": o.name, "arguments": o.arguments}
                 for o in resp.output if o.type == "function_call"]
        return resp.output_text, calls

    def user(self, text: str) -> None:
        self.items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})

    def work(self, ask: str) -> None:
        self.user(ask)
        for _ in range(10):
            text, calls = self.call(self.items)
            if not calls:
                self.items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
                return
            for c in calls:
                self.items.append(c)
                self.items.append({"type": "function_call_output", "call_id": c["call_id"],
                                   "output": story.run_tool(json.loads(c["arguments"])["cmd"])})

    def summarize(self) -> str:
        text, _ = self.call(self.items + [{"type": "message", "role": "user", "content": story.CC_SUMMARY_MARKER + "."}])
        return text

    def compact(self, summary: str) -> None:
        tail = self.items[-3:]
        self.items = []
        self.user(story.CONTINUATION + summary)
        self.items.extend(tail)


@pytest.fixture
def stack():
    s = GateStack("default", story.responder)
    yield s
    s.close()


@pytest.mark.parametrize("stream", [False, True])
def test_responses_reinject_gives_the_right_rollback(stack: GateStack, stream: bool) -> None:
    agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), stream)
    agent.work(story.TASK)
    agent.compact(story.LOSSY_SUMMARY)
    agent.user(story.ROLLBACK_ASK)
    _, calls = agent.call(agent.items)
    assert story.rollback_target(calls[0]["arguments"]) == story.REVISION
    assert ("compaction", "reinject") in [(e["kind"], e["action"]) for e in stack.events()]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_summary_gate(stack: GateStack, stream: bool) -> None:
    agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), stream)
    agent.work(story.TASK)
    summary = agent.summarize()
    assert summary.startswith(story.LOSSY_SUMMARY[:40]) and story.REVISION in summary


def inventing_responder(call: Call) -> Reply:
    """A model that ignores its context when asked to roll back (always invents)."""
    if "roll back" in call.last_user_text().lower() and "Running downgrade" not in call.all_text():
        return Reply(tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {story.INVENTED}"})])
    return story.responder(call)


@pytest.mark.parametrize("stream", [False, True])
def test_tripwire_blocks_an_invented_revision(stream: bool) -> None:
    stack = GateStack("default", inventing_responder)
    try:
        agent = story.OpenAIAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), stream)
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        if stream:
            with pytest.raises(openai.APIError) as ei:
                agent.next_action(story.ROLLBACK_ASK)
            assert story.INVENTED in str(ei.value) and story.REVISION in str(ei.value)
        else:
            agent.messages.append({"role": "user", "content": story.ROLLBACK_ASK})
            r = agent.client.chat.completions.create(model="gpt-4o", messages=agent.messages, tools=[story.BASH_OPENAI])
            m = r.choices[0].message
            assert not m.tool_calls  # the invented call never reaches the agent's executor
            assert story.INVENTED in m.content and story.REVISION in m.content
        trip = [e for e in stack.events() if e["kind"] == "tripwire"]
        assert trip and trip[-1]["tripwire"] == "block"
    finally:
        stack.close()


def test_tripwire_blocks_in_anthropic_streams() -> None:
    import anthropic

    stack = GateStack("default", inventing_responder)
    try:
        agent = story.AnthropicAgent(anthropic.Anthropic(api_key=KEY, base_url=stack.url, max_retries=0), stream=True)
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        with pytest.raises(anthropic.APIError) as ei:
            agent.next_action(story.ROLLBACK_ASK)
        assert story.INVENTED in str(ei.value)
    finally:
        stack.close()


def test_tripwire_annotates_a_responses_stream_the_sdk_reads(tmp_path: Any) -> None:
    policy = tmp_path / "annotate.yaml"
    policy.write_text("extends: default\ntripwire:\n  action: annotate\n")
    stack = GateStack(str(policy), inventing_responder)
    try:
        agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), True)
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        agent.user(story.ROLLBACK_ASK)
        kw = {"model": "gpt-4o", "instructions": story.SYSTEM, "input": agent.items, "tools": [TOOL]}
        with agent.client.responses.stream(**kw) as s:
            events = list(s)
            resp = s.get_final_response()
        calls = [o for o in resp.output if o.type == "function_call"]
        assert calls and story.INVENTED in calls[0].arguments  # annotate keeps the call ...
        note = resp.output_text  # ... and tells the agent, in an assistant message item
        assert note.startswith("[compaction-gate warning]") and story.INVENTED in note and story.REVISION in note
        seqs = [e.sequence_number for e in events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert [e.type for e in events if e.type.startswith("response.output_text")] == [
            "response.output_text.delta", "response.output_text.done"]
        trip = [e for e in stack.events() if e["kind"] == "tripwire"]
        assert trip and trip[-1]["tripwire"] == "annotate"
    finally:
        stack.close()


def test_a_blocked_responses_stream_completes_and_its_retries_stay_blocked() -> None:
    """The blocked stream ends with response.completed (no SDK error, nothing to
    execute), and sending the same request again — more times than the tripwire window
    (5 in `default`) — never lets the invented value through: a retry does not consume
    the window."""
    stack = GateStack("default", inventing_responder)
    try:
        agent = ResponsesAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0), True)
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        agent.user(story.ROLLBACK_ASK)
        for _ in range(7):
            text, calls = agent.call(agent.items)
            assert calls == []  # the invented downgrade never reaches the executor
            assert text.startswith("[compaction-gate]") and story.INVENTED in text and story.REVISION in text
        trip = [e for e in stack.events() if e["kind"] == "tripwire"]
        assert len(trip) == 7 and {e["tripwire"] for e in trip} == {"block"}
    finally:
        stack.close()


def remote_responder(call: Call) -> Reply:
    items = call.json.get("input") or []
    if items and isinstance(items[-1], dict) and items[-1].get("type") == "compaction_trigger":
        return Reply(items=[{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque"}])
    return story.responder(call)


@pytest.mark.parametrize("stream", [False, True])
def test_remote_compaction_over_http_gets_the_contract_and_the_next_request_the_bindings(stream: bool) -> None:
    """POST /v1/responses whose input ends with a compaction_trigger item (Codex's remote
    compaction over HTTP): the contract goes in before the trigger; the encrypted answer
    passes untouched; the request after it gets the bindings back in plain text."""
    stack = GateStack("default", remote_responder)
    try:
        client = openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0,
                               default_headers={"session-id": "thread-http-remote"})
        agent = ResponsesAgent(client, stream)
        agent.work(story.TASK)
        kw = {"model": "gpt-4o", "instructions": story.SYSTEM, "tools": [TOOL],
              "input": [*agent.items, {"type": "compaction_trigger"}]}
        if stream:
            with client.responses.stream(**kw) as s:
                resp = s.get_final_response()
        else:
            resp = client.responses.create(**kw)
        assert [o.type for o in resp.output] == ["compaction"]
        sent = stack.fake.requests[-1].json["input"]
        assert sent[-1] == {"type": "compaction_trigger"} and story.REVISION in json.dumps(sent[-2])
        agent.items = [agent.items[0], resp.output[0].model_dump(exclude_none=True)]
        agent.user(story.ROLLBACK_ASK)
        _, calls = agent.call(agent.items)
        assert story.rollback_target(calls[0]["arguments"]) == story.REVISION
        kinds = [(e["kind"], e["action"]) for e in stack.events()]
        assert ("summarization", "gate") in kinds and ("compaction", "reinject") in kinds
    finally:
        stack.close()
