from __future__ import annotations

import json

from proxy.core.analysis import analyze
from proxy.core.dialects import from_openai_chat
from proxy.core.identifiers.extract import extract_snapshot
from proxy.policy import load_policy, load_policy_text
from proxy.policy.obligations import PolicyObligations

REV = "3f9a1c2b7d4e"
SHA = "9fceb02d0ae598e95dc970b74767f19372d61af8"


def chat(*turns: tuple[str, str, str]) -> dict:
    msgs: list[dict] = [{"role": "system", "content": "ops agent"}, {"role": "user", "content": "go"}]
    for i, (tool, cmd, result) in enumerate(turns):
        cid = f"call_{i}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": tool, "arguments": json.dumps({"command": cmd})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
    return {"model": "gpt-4o", "messages": msgs}


def required(policy, body) -> set[str]:
    snap = from_openai_chat(body)
    ids = extract_snapshot(snap, None)
    norms = set()
    for o in PolicyObligations(policy)(ids, snap):
        norms.update(o.bindings)
    return {i.value for i in ids if i.norm in norms}


UPGRADE = ("bash", "alembic upgrade head", f"Running upgrade -> {REV}\nrevision {REV} applied")
DOWNGRADE = ("bash", "alembic downgrade -1", "Running downgrade done")
GITLOG = ("bash", "git log -1 --format=%H", SHA)


def test_default_requires_non_regenerable_tool_results_only() -> None:
    got = required(load_policy("default"), chat(UPGRADE, GITLOG))
    assert REV in got and SHA not in got  # git log output is regenerable (policy tool rule)


def test_rules_only_opens_and_closes_obligations() -> None:
    pol = load_policy_text(
        """
obligations:
  default: rules_only
  rules:
    - name: rollback
      opened_by: {tool: bash, command: "alembic upgrade*"}
      binds: [alembic_revision]
      closed_by: {tool: bash, command: "alembic downgrade*"}
""",
        "rules.yaml",
    )
    assert required(pol, chat(UPGRADE)) == {REV}
    assert required(pol, chat(UPGRADE, DOWNGRADE)) == set()
    assert required(pol, chat(GITLOG)) == set()


def test_rule_makes_a_regenerable_kind_required() -> None:
    pol = load_policy_text(
        """
obligations:
  default: rules_only
  rules:
    - name: before-reset
      opened_by: {tool: bash, command: "git log*"}
      binds: [git_sha]
""",
        "rbw.yaml",
    )
    assert required(pol, chat(GITLOG)) == {SHA}


def test_plan_tool_items_are_required() -> None:
    body = chat(UPGRADE)
    body["messages"].append({"role": "assistant", "content": None, "tool_calls": [
        {"id": "p1", "type": "function", "function": {"name": "update_plan", "arguments": json.dumps(
            {"plan": [f"roll back to revision {REV} if the deploy fails"]})}}]})
    body["messages"].append({"role": "tool", "tool_call_id": "p1", "content": "ok"})
    pol = load_policy_text("obligations:\n  default: rules_only\n  plan_tools: [update_plan]\n", "plan.yaml")
    assert REV in required(pol, body)


def test_allowlist_and_disable_remove_bindings() -> None:
    pol = load_policy_text(f"detectors:\n  allowlist: ['{REV}']\n", "allow.yaml")
    assert REV not in required(pol, chat(UPGRADE))
    pol = load_policy_text("detectors:\n  disable: [alembic_revision]\n", "off.yaml")
    assert REV not in required(pol, chat(UPGRADE))


def test_analysis_with_policy_rule_is_destructive_then_safe_when_kept() -> None:
    before = from_openai_chat(chat(UPGRADE, ("bash", "ls", "a b")))
    lossy = {"model": "gpt-4o", "messages": [{"role": "system", "content": "ops agent"}, {"role": "user", "content": "go"},
             {"role": "user", "content": "This session is being continued from a previous conversation. Summary: migration applied."},
             {"role": "user", "content": "roll back"}]}
    rule = PolicyObligations(load_policy("default"))
    a = analyze(before, from_openai_chat(lossy), obligation_rule=rule)
    assert a.destructive and [b.value for b in a.required_missing] == [REV]
    lossy["messages"][2]["content"] += f" Revision {REV}."
    assert not analyze(before, from_openai_chat(lossy), obligation_rule=rule).destructive
