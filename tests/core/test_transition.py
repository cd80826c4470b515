"""Transition classification: one test per kind, with and without agent markers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.dialects import from_any, from_body, from_openai_chat
from proxy.core.markers import NO_MARKERS, default_markers
from proxy.core.messages import Message, Snapshot
from proxy.core.restatement import looks_like_summary
from proxy.core.summarize_request import _last_user, detect_summarize_request
from proxy.core.transition import classify, same_reply
from tests.support.conversations import (
    MASK_STYLES,
    STYLES,
    SUMMARIZE_PROMPTS,
    TASKS,
    Turn,
    build_task,
    compact,
    summarization_request,
)

M = default_markers()


def chat(*msgs: tuple[str, str], system: str = "You are an agent.") -> Snapshot:
    return from_openai_chat({"messages": [{"role": "system", "content": system}] + [{"role": r, "content": c} for r, c in msgs]})


def tool_turns(n: int, prefix: str = "out") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"step {i}"})}}],
            }
        )
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"{prefix} {i} " + "lorem ipsum " * 20})
    return out


def body(msgs: list[dict[str, Any]]) -> Snapshot:
    return from_openai_chat({"messages": [{"role": "system", "content": "sys"}] + msgs})


BASE = [{"role": "user", "content": "Fix the flaky deploy job in the ci pipeline."}] + tool_turns(4)


# --------------------------------------------------------------------------- append


def test_append_extends_by_whole_messages() -> None:
    before = body(BASE)
    after = body(BASE + [{"role": "user", "content": "and now?"}])
    t = classify(before, after, M)
    assert t.kind == "append" and t.appended == (len(BASE),) and not t.lost_region


def test_identical_request_is_an_append() -> None:
    assert classify(body(BASE), body(BASE)).kind == "append"


def test_first_request_is_an_append() -> None:
    assert classify(body([]), body(BASE)).kind == "append"


def test_recorded_reply_reserialised_by_the_client_is_an_append() -> None:
    reply_recorded = {
        "role": "assistant",
        "content": "Running it.",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
    }
    reply_sent = {
        "role": "assistant",
        "content": "Running it. ",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}],
    }
    before = body(BASE + [reply_recorded])
    after = body(BASE + [reply_sent, {"role": "tool", "tool_call_id": "c9", "content": "a b"}])
    assert classify(before, after).kind == "append"
    assert classify(before, after, lenient_last_reply=False).kind != "append"
    assert same_reply(before.messages[-1], after.messages[len(BASE)])


# --------------------------------------------------------------------------- summarize


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("style", [s for s in STYLES if s != "truncation"])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_every_agent_style_is_a_summarize_named_by_its_marker(task: str, style: str, dialect: str) -> None:
    conv = build_task(task, seed=7, filler=2)
    for drop in ((), "all"):
        c = compact(conv, style, drop=drop)
        before, after = c.snapshots(dialect)  # type: ignore[arg-type]
        t = classify(before, after, M)
        assert t.kind == "summarize", (t.reason, t.components)
        assert t.agent == style
        assert t.summary
        # the structure alone says the same
        assert classify(before, after, NO_MARKERS).kind == "summarize"


def test_summary_replacing_the_head_without_marker_is_structural() -> None:
    before = body(BASE + [{"role": "user", "content": "next"}])
    after = body([{"role": "user", "content": "Recap: we ran four steps."}] + BASE[5:] + [{"role": "user", "content": "next"}])
    t = classify(before, after, NO_MARKERS)
    assert t.kind == "summarize" and t.agent is None
    assert t.lost == (0, 1, 2, 3, 4) and t.summary == (0,)


def test_everything_replaced_by_a_restatement_is_a_summary_not_a_reset() -> None:
    before = body(BASE)
    after = body([{"role": "user", "content": "So far: the flaky deploy job in the ci pipeline was investigated in four steps; lorem ipsum output reviewed."}])
    assert classify(before, after).kind == "summarize"


# --------------------------------------------------------------------------- truncate


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_head_dropped_without_marker_is_truncate(dialect: str) -> None:
    conv = build_task("migration", seed=1, filler=3)
    c = compact(conv, "truncation", keep_last=5)
    t = classify(*c.snapshots(dialect), M)  # type: ignore[arg-type]
    assert t.kind == "truncate" and t.agent is None and t.lost[0] == 0


def test_middle_dropped_keeping_the_first_message_is_truncate() -> None:
    before = body(BASE + [{"role": "user", "content": "next"}])
    after = body(BASE[:1] + BASE[5:] + [{"role": "user", "content": "next"}])
    t = classify(before, after)
    assert t.kind == "truncate" and t.lost == (1, 2, 3, 4)


# --------------------------------------------------------------------------- mask


@pytest.mark.parametrize("style, agent", [("claude_code_clear", "claude_code"), ("openhands_mask", "openhands")])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_placeholders_are_mask(style: str, agent: str, dialect: str) -> None:
    c = compact(build_task("upload", seed=2, filler=1), style)
    t = classify(*c.snapshots(dialect), M)  # type: ignore[arg-type]
    assert t.kind == "mask" and t.agent == agent
    assert t.changed and all(ch.kind == "mask" for ch in t.changed)
    assert not t.lost


def test_shorter_text_under_the_same_tool_call_id_is_mask_without_marker() -> None:
    masked = [dict(m) for m in BASE]
    masked[2] = {**masked[2], "content": "(output elided to save space)"}
    t = classify(body(BASE), body(masked + [{"role": "user", "content": "go on"}]), NO_MARKERS)
    assert t.kind == "mask" and t.agent is None
    assert [(c.old_index, c.kind) for c in t.changed] == [(2, "mask")]
    assert t.lost_region == (2,)


# --------------------------------------------------------------------------- edit


def test_message_changed_in_place_is_edit() -> None:
    edited = [dict(m) for m in BASE]
    edited[0] = {"role": "user", "content": "Fix the flaky deploy job; use the staging runner."}
    t = classify(body(BASE), body(edited), NO_MARKERS)
    assert t.kind == "edit" and t.lost_region == (0,)


def test_longer_tool_result_is_an_edit_not_a_mask() -> None:
    edited = [dict(m) for m in BASE]
    edited[2] = {**edited[2], "content": edited[2]["content"] + " more output"}
    t = classify(body(BASE), body(edited), NO_MARKERS)
    assert t.kind == "edit" and [c.kind for c in t.changed] == ["edit"]


# --------------------------------------------------------------------------- fork / rewind


def test_rewind_keeps_a_prefix_and_drops_the_tail() -> None:
    t = classify(body(BASE), body(BASE[:3]))
    assert t.kind == "fork" and t.lost == tuple(range(3, len(BASE))) and t.prefix == 3


def test_fork_replaces_the_tail_by_a_different_continuation() -> None:
    other = [{"role": "user", "content": "Actually, let us look at the billing service instead."}]
    t = classify(body(BASE), body(BASE[:3] + other), NO_MARKERS)
    assert t.kind == "fork" and t.lost == tuple(range(3, len(BASE))) and t.appended == (3,)


def _call(cid: str, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": command})}}]}


@pytest.mark.parametrize("markers", [NO_MARKERS, M], ids=["no-markers", "markers"])
def test_a_reply_replaced_by_the_clients_own_similar_call_is_a_fork_not_a_summary(markers: Any) -> None:
    # the client drops the model's call and sends its own next call and result: most of
    # its words are the lost call's, but it does not restate that call, it replaces it
    reply = _call("m1", "kubectl rollout status deploy/api -n prod")
    own = [_call("x1", "kubectl get deploy api -o yaml"), {"role": "tool", "tool_call_id": "x1", "content": "kind: Deployment"}]
    n = len(BASE)
    t = classify(body(BASE + [reply]), body(BASE + own), markers)
    assert t.kind == "fork" and t.summary == () and t.lost == (n,) and t.appended == (n, n + 1)


def test_a_last_user_message_rewritten_longer_is_an_edit_not_a_summary() -> None:
    ask = "Deploy the api service to prod."
    longer = ask + " Yes, deploy the api service to prod: the api service, deployed to prod now, and the prod deploy of the api service reported back to me."
    answer = {"role": "assistant", "content": "Deploying now."}
    t = classify(body(BASE + [{"role": "user", "content": ask}, answer]),
                 body(BASE + [{"role": "user", "content": longer}, answer]), NO_MARKERS)
    assert t.kind == "edit" and t.summary == () and [c.old_index for c in t.changed] == [len(BASE)]


def test_a_restatement_of_more_than_the_last_turn_is_still_a_summary() -> None:
    # the same test on a trailing span that is not the last turn alone: a summary
    summary = {"role": "user", "content": "Summary so far: out 1, out 2 and out 3 of step 1, step 2 and step 3, lorem ipsum."}
    t = classify(body(BASE), body(BASE[:3] + [summary]), NO_MARKERS)
    assert t.kind == "summarize" and t.summary == (3,)


# --------------------------------------------------------------------------- reset


def test_new_task_with_nothing_shared_is_reset() -> None:
    before = chat(("user", "Fix the flaky deploy job in the ci pipeline."), ("assistant", "Looking at the pipeline logs now."))
    after = chat(("user", "Write a haiku about autumn leaves."))
    t = classify(before, after, M)
    assert t.kind == "reset" and t.agent is None


# --------------------------------------------------------------------------- many at once


def test_summary_plus_cleared_tool_results_reports_both_components() -> None:
    conv = build_task("k8s", seed=4, filler=3)
    c = compact(conv, "langchain", keep_last=8, mask_kept=True)
    t = classify(*c.snapshots("openai"), M)
    assert t.kind == "summarize" and {"summarize", "mask"} <= t.components


def test_transition_json_is_serialisable() -> None:
    c = compact(build_task("git", seed=1), "aider")
    t = classify(*c.snapshots("openai"), M)
    doc = json.loads(json.dumps(t.to_json()))
    assert doc["kind"] == "summarize" and doc["agent"] == "aider"


# --------------------------------------------------------------------------- summarize requests


@pytest.mark.parametrize("style", [s for s in SUMMARIZE_PROMPTS if s != "generic"])
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_each_agents_summarization_call_is_recognised(style: str, dialect: str) -> None:
    req = summarization_request(build_task("refund", seed=3, filler=1), style)
    sr = detect_summarize_request(req.snapshot(dialect), M)  # type: ignore[arg-type]
    assert sr is not None and sr.agent == style and sr.reason == "marker"


def test_history_pasted_as_text_is_recognised_without_markers() -> None:
    req = summarization_request(build_task("kafka", seed=3, filler=1), "generic")
    for markers in (M, NO_MARKERS):
        sr = detect_summarize_request(req.snapshot("openai"), markers)
        assert sr is not None and sr.reason == "pasted_history" and sr.history_in_text and sr.agent is None


def test_summarize_the_conversation_so_far_after_a_history_is_recognised() -> None:
    conv = build_task("terraform", seed=1, filler=1).then(Turn("user", "Please summarize our conversation so far in a few bullet points."))
    sr = detect_summarize_request(conv.snapshot("openai"), NO_MARKERS)
    assert sr is not None and sr.reason == "instruction" and not sr.history_in_text


@pytest.mark.parametrize(
    "text",
    [
        "Run the migrations and tell me what happened.",
        "Write a summary section for the README of this project.",
        "What is the difference between a summary and an abstract?",
    ],
)
def test_ordinary_requests_are_not_summarization_calls(text: str) -> None:
    conv = build_task("migration", seed=1).then(Turn("user", text))
    assert detect_summarize_request(conv.snapshot("openai"), M) is None


def test_looks_like_summary_needs_shared_vocabulary() -> None:
    lost = "alembic upgrade head; Running upgrade 3f2a -> 9c1e, add order status; smoke tests failed on orders"
    assert looks_like_summary("Summary so far: applied the alembic migration adding order status; smoke tests failed.", lost)
    assert not looks_like_summary("Write a haiku about autumn leaves falling gently.", lost)


def test_bare_list_inputs_work_too() -> None:
    before = from_any(BASE)
    after = from_any(BASE + [{"role": "user", "content": "x"}])
    assert classify(before, after).kind == "append"


@pytest.mark.parametrize("style", MASK_STYLES + ("truncation",))
def test_mask_and_truncation_styles_have_no_summary(style: str) -> None:
    c = compact(build_task("refactor", seed=5, filler=2), style)
    t = classify(*c.snapshots("openai"), M)
    assert not t.summary


def test_cutting_everything_is_a_truncation_not_a_new_task() -> None:
    t = classify(body(BASE), body([]), NO_MARKERS)
    assert t.kind == "truncate" and t.lost == tuple(range(len(BASE)))


_CODEX_SYS = {"role": "developer", "content": "You are Codex."}
_CODEX_BEFORE = [
    _CODEX_SYS,
    {"role": "user", "content": "Apply the migration."},
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"command":["alembic","upgrade","head"]}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Applied."}]},
]


def test_an_encrypted_compaction_item_is_the_summary_of_what_it_replaced() -> None:
    """Remote compaction (Codex's built-in provider): the history after it keeps the user
    messages and ends in the API's encrypted ``compaction`` item — unreadable, but the
    summary of the lost messages, so the transition is ``summarize``, not a fork."""
    compacted = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-x"}
    after = [_CODEX_SYS, {"role": "user", "content": "Apply the migration."}, compacted, {"role": "user", "content": "Roll back."}]
    t = classify(from_any({"input": _CODEX_BEFORE}), from_any({"input": after}))
    assert t.kind == "summarize" and t.summary == (1,)  # (indexes after the system messages)
    # an opaque item that is no summary (reasoning) replacing the tail stays a fork
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAAB-y", "summary": []}
    after = [_CODEX_SYS, {"role": "user", "content": "Apply the migration."}, reasoning, {"role": "user", "content": "Roll back."}]
    assert classify(from_any({"input": _CODEX_BEFORE}), from_any({"input": after})).kind == "fork"
    # Anthropic's compaction block is the same thing in the Messages API
    anth_before = {"messages": [
        {"role": "user", "content": "Apply the migration."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "alembic upgrade head"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d"}]},
        {"role": "assistant", "content": "Applied."},
    ]}  # fmt: skip
    anth_after = {"messages": [
        {"role": "user", "content": "Apply the migration."},
        {"role": "assistant", "content": [{"type": "compaction", "content": "enc"}]},
        {"role": "user", "content": "Roll back."},
    ]}  # fmt: skip
    t = classify(from_body("messages", anth_before), from_body("messages", anth_after))
    assert t.kind == "summarize" and t.summary == (1,)


@given(st.lists(st.sampled_from(["user", "assistant", "tool", "system"]), max_size=40))
def test_last_user_is_the_highest_user_index(roles: list[str]) -> None:
    snap = Snapshot("openai", "", tuple(Message(r, ()) for r in roles))  # type: ignore[arg-type]
    want = max((i for i, r in enumerate(roles) if r == "user"), default=None)
    assert _last_user(snap) == want
