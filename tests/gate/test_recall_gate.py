"""The recall tool in the gate: its policy keys, what a conversation with nothing spilled
costs (nothing), handles that survive a restart, state round trips, metrics."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from proxy.config import StateSettings
from proxy.core.interventions.recall_tool import RecallHandle
from proxy.gate.convstate import MAX_RECALL_HANDLES, ConversationState
from proxy.policy import ConfigError, load_policy, load_policy_text
from proxy.policy.model import RequestContext
from tests.e2e import story
from tests.e2e.recall_support import KEY, SPILL, Sent, agent_for, ask
from tests.e2e.stack import GateStack


def test_recall_keys_load_with_their_defaults_and_safe_spill_is_an_action() -> None:
    p = load_policy("default")
    assert (p.recall_enabled, p.recall_tool_name, p.recall_max_rounds) == (True, "recall_compacted_context", 3)
    assert (p.recall_budget_rounds, p.recall_budget_bytes, p.recall_max_result_bytes) == (20, 2_000_000, 200_000)
    q = load_policy_text("actions:\n  safe: spill\nrecall:\n  tool_name: fetch_context\n  max_rounds: 1\n", "p.yaml")
    assert q.safe == "spill" and q.recall_tool_name == "fetch_context" and q.recall_max_rounds == 1
    # a header scope may turn safe: allow into spill (stricter), never spill into allow
    r = load_policy_text(
        "actions:\n  safe: spill\n  scopes:\n    - match: {header: {x-q: 'off'}}\n      safe: allow\n", "r.yaml")
    assert r.effective(RequestContext(headers={"x-q": "off"})).safe == "spill"


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("recall:\n  max_rounds: 0\n", 2, "max_rounds must be at least 1"),
    ("recall:\n  budget_bytes: 10\n", 2, "budget_bytes must be at least 1024"),
    ("recall:\n  tool_name: 'has space'\n", 2, "tool_name must be"),
    ("recall:\n  rounds: 3\n", 2, "unknown key 'rounds' in recall"),
    ("actions:\n  safe: reinject\n", 2, "actions.safe: invalid value 'reinject'"),
])
def test_bad_recall_keys_name_file_and_line(text: str, line: int, needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load_policy_text(text, "bad.yaml")
    assert f"bad.yaml:{line}" in str(ei.value) and needle in str(ei.value)


def _spill_policy(tmp_path: Path) -> str:
    p = tmp_path / "spill.yaml"
    p.write_text(SPILL)
    return str(p)


def test_a_conversation_with_nothing_spilled_is_untouched(tmp_path: Path) -> None:
    stack = GateStack(_spill_policy(tmp_path), story.recalling())
    try:
        agent = agent_for("openai", stack, False, Sent())
        agent.work(story.TASK)  # no compaction: every request extends the last
        assert all("x-compaction-gate-recall" not in e for e in stack.events())
        turn = ask(agent, "What is the state of the service?")
        sent = stack.fake.model_requests()[-1]
        assert "x-compaction-gate-recall" not in turn.headers and turn.headers["x-compaction-gate-action"] == "none"
        assert [t["function"]["name"] for t in sent.json["tools"]] == ["bash"]
        # byte for byte what the client sent (the SDK's own serialisation)
        assert json.loads(sent.body) == {"model": "gpt-4o", "messages": agent.messages, "tools": [story.BASH_OPENAI]}
        assert not [e for e in stack.events() if e["kind"].startswith("recall")]
    finally:
        stack.close()


def test_handles_survive_a_restart_and_are_still_offered_and_resolved(tmp_path: Path) -> None:
    state = StateSettings(backend="sqlite", path=str(tmp_path / "state.sqlite3"))
    policy = _spill_policy(tmp_path)
    stack = GateStack(policy, story.recalling(), state=state)
    try:
        agent = agent_for("openai", stack, False, Sent())
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        ask(agent, "What is the state of the service?")  # spilled here
        agent.messages.append({"role": "assistant", "content": "ok"})
    finally:
        stack.close()
    again = GateStack(policy, story.recalling(), state=state)
    try:
        agent.client = openai.OpenAI(api_key=KEY, base_url=again.openai_base_url, max_retries=0)
        turn = ask(agent, story.ROLLBACK_ASK)
        assert story.rollback_target(turn.calls[0][1]) == story.REVISION
        assert [e["outcome"] for e in again.events() if e["kind"] == "recall"] == ["found"]
    finally:
        again.close()


def test_recall_state_round_trips_and_keeps_the_most_recent_handles() -> None:
    st = ConversationState()
    for i in range(MAX_RECALL_HANDLES + 3):
        st.add_recall(RecallHandle(f"spill_{i}", 2, 0, 1, 1.0, 2.0, (("v", "uuid"),), 99.0))
    st.recall_rounds, st.recall_bytes = 2, 1234
    assert [h.handle for h in st.recall] == [f"spill_{i}" for i in range(3, MAX_RECALL_HANDLES + 3)]
    back = ConversationState.from_dict(json.loads(json.dumps(st.to_dict())))
    assert back.recall == st.recall and (back.recall_rounds, back.recall_bytes) == (2, 1234)
    assert not back.is_empty()


def test_metrics_count_recalls_rounds_and_bytes(tmp_path: Path) -> None:
    stack = GateStack(_spill_policy(tmp_path), story.recalling())
    try:
        agent = agent_for("openai", stack, False, Sent())
        agent.work(story.TASK)
        agent.compact(story.LOSSY_SUMMARY)
        ask(agent, story.ROLLBACK_ASK)
        import urllib.request

        text = urllib.request.urlopen(stack.url + "/metrics", timeout=10).read().decode()
        found = [ln for ln in text.splitlines() if ln.startswith('compaction_gate_recalls_total{outcome="found"}')]
        assert found and float(found[0].split()[-1]) == 1.0
        rounds = [ln for ln in text.splitlines() if ln.startswith("compaction_gate_recall_rounds_total")]
        assert rounds and float(rounds[0].split()[-1]) == 1.0
        nbytes = [ln for ln in text.splitlines() if ln.startswith("compaction_gate_recall_bytes_total")]
        ev = next(e for e in stack.events() if e["kind"] == "recall")
        assert nbytes and float(nbytes[0].split()[-1]) == ev["bytes"] > 0
    finally:
        stack.close()
