"""Issue 5, end to end: the migration story through the real gate with the real SDKs."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.e2e import story
from tests.e2e.stack import GateStack

KEY = "sk-test-tenant-a"


@pytest.fixture
def make_stack() -> Iterator:
    stacks: list[GateStack] = []

    def factory(policy: str) -> GateStack:
        s = GateStack(policy, story.responder)
        stacks.append(s)
        return s

    yield factory
    for s in stacks:
        s.close()


def agent_for(sdk: str, stack: GateStack, stream: bool, max_retries: int = 0):
    if sdk == "openai":
        return story.OpenAIAgent(openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=max_retries), stream)
    return story.AnthropicAgent(anthropic.Anthropic(api_key=KEY, base_url=stack.url, max_retries=max_retries), stream)


def lossy_compaction(agent) -> None:
    calls = agent.work(story.TASK)
    assert story.rollback_target is not None and calls[0][2].find("alembic upgrade") >= 0
    agent.compact(story.LOSSY_SUMMARY)  # a client-side summary that dropped the revision


SDKS = ["openai", "anthropic"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", SDKS)
def test_default_reinjects_and_the_rollback_uses_the_original_revision(make_stack, sdk, stream) -> None:
    stack = make_stack("default")
    agent = agent_for(sdk, stack, stream)
    lossy_compaction(agent)
    calls = agent.next_action(story.ROLLBACK_ASK)
    assert story.rollback_target(calls[0][2]) == story.REVISION
    # what reached the model: the compacted history plus the re-injected binding
    last = stack.fake.model_requests()[-1]
    assert story.REVISION in last.body.decode()
    assert "[compaction-gate: identifiers preserved" in last.body.decode()
    # the client's own history still lacks it (the proxy repaired it in flight)
    assert story.REVISION not in str(agent.messages)
    ev = [e for e in stack.events() if e["kind"] == "compaction"]
    assert ev and ev[-1]["action"] == "reinject" and ev[-1]["verdict"] == "destructive"
    assert story.REVISION in ev[-1]["required"]


@pytest.mark.parametrize("sdk", SDKS)
def test_reinjection_is_sticky_on_later_turns(make_stack, sdk) -> None:
    stack = make_stack("default")
    agent = agent_for(sdk, stack, False)
    lossy_compaction(agent)
    agent.next_action("What is the state of the service?")  # any next turn
    agent.messages.append({"role": "assistant", "content": "ok"}) if sdk == "openai" else agent.messages.append(
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    calls = agent.next_action(story.ROLLBACK_ASK)
    assert story.rollback_target(calls[0][2]) == story.REVISION


@pytest.mark.parametrize("sdk", SDKS)
def test_strict_rejects_with_400_naming_the_revision_and_the_sdk_does_not_retry(make_stack, sdk) -> None:
    stack = make_stack("strict")
    agent = agent_for(sdk, stack, False, max_retries=3)
    lossy_compaction(agent)
    before = len(stack.fake.model_requests())
    exc_type = openai.BadRequestError if sdk == "openai" else anthropic.BadRequestError
    with pytest.raises(exc_type) as ei:
        agent.next_action(story.ROLLBACK_ASK)
    err = ei.value
    assert err.status_code == 400
    assert err.response.headers["x-should-retry"] == "false"
    assert err.response.headers["x-compaction-gate-action"] == "reject"
    assert story.REVISION in str(err.body) and story.REVISION in err.message
    lowered = err.message.lower()
    assert "context_length_exceeded" not in lowered and "prompt is too long" not in lowered
    if sdk == "openai":
        assert err.body["code"] == "destructive_compaction"
    # no retry: exactly one request reached the proxy's gate, none reached the model
    assert len(stack.fake.model_requests()) == before
    rejects = [e for e in stack.events() if e["action"] == "reject" and e["kind"] == "compaction"]
    assert len(rejects) == 1
    # retrying by hand fails the same way (the refusal is sticky)
    with pytest.raises(exc_type):
        agent.call(agent.messages)


@pytest.mark.parametrize("sdk", SDKS)
def test_audit_lets_the_wrong_rollback_happen_and_records_why(make_stack, sdk) -> None:
    stack = make_stack("audit")
    agent = agent_for(sdk, stack, False)
    lossy_compaction(agent)
    calls = agent.next_action(story.ROLLBACK_ASK)
    assert story.rollback_target(calls[0][2]) == story.INVENTED  # the failure happens
    last = stack.fake.model_requests()[-1]
    assert story.REVISION not in last.body.decode()  # nothing was changed
    comp = [e for e in stack.events() if e["kind"] == "compaction"]
    assert comp and comp[-1]["action"] == "warn" and comp[-1]["verdict"] == "destructive"
    assert any(d["value"] == story.REVISION for d in comp[-1]["dropped"])
    trip = [e for e in stack.events() if e["kind"] == "tripwire"]
    assert trip, stack.events()
    assert trip[-1]["hallucinated"][0]["value"] == story.INVENTED
    assert story.REVISION in trip[-1]["hallucinated"][0]["expected"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("sdk", SDKS)
def test_summarization_gate_makes_the_stored_summary_keep_the_revision(make_stack, sdk, stream) -> None:
    stack = make_stack("default")
    agent = agent_for(sdk, stack, stream)
    agent.work(story.TASK)
    summary = agent.summarize_via_model()
    # the fake model wrote the lossy summary; the gate appended the verbatim section
    assert summary.startswith(story.LOSSY_SUMMARY[:40])
    assert story.REVISION in summary
    summarize_req = stack.fake.model_requests()[-1].body.decode()
    assert "[compaction-gate: summary contract]" in summarize_req
    agent.compact(summary)
    calls = agent.next_action(story.ROLLBACK_ASK)
    assert story.rollback_target(calls[0][2]) == story.REVISION
    kinds = [(e["kind"], e["action"]) for e in stack.events()]
    assert ("summarization", "gate") in kinds and ("summary_check", "gate") in kinds
    assert ("compaction", "reinject") not in kinds  # prevention made repair unnecessary


def test_every_response_carries_the_gate_headers(make_stack) -> None:
    stack = make_stack("default")
    client = openai.OpenAI(api_key=KEY, base_url=stack.openai_base_url, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-compaction-gate-action"] == "none"
    assert raw.headers["x-compaction-gate-conversation"]
