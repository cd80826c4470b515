"""A plain append to a conversation the gate holds nothing for — and a change of its
last turn that lost nothing required (a reply the client replaced with its own call) —
is decided without the policy's steps
(:meth:`~proxy.gate.interceptor.GateInterceptor._quiet`): the same outcome — timeline,
events, what the client gets — as the full steps, which still run whenever the
conversation has something pending (here: after a destructive compaction) or the change
lost a required binding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from proxy.gate import interceptor as interceptor_mod
from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Call, Reply, ToolCall

KEY = "7Hq2Lx9Vt4Rb8Nc3Zp1W"


def _model(call: Call) -> Reply:
    # each call writes with an idempotency key it generated: a required binding (one of
    # its own per turn, so a reply the client drops takes its key with it)
    key = f"{KEY}{len(call.messages()):03d}"
    return Reply(tool_calls=[ToolCall("bash", {"cmd": f"aws s3api put-object --bucket b --key k --idempotency-key {key}"})])


def _readonly_model(call: Call) -> Reply:
    # each call only reads: a reply the client drops takes nothing required with it
    return Reply(tool_calls=[ToolCall("bash", {"cmd": f"aws s3 ls s3://b/{len(call.messages())}"})])


def _history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an operations agent."},
        {"role": "user", "content": "Upload the object, once."},
    ]


def _own_turn(i: int) -> list[dict[str, Any]]:
    cid = f"own_{i}"
    return [
        {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"cmd": f"aws s3 ls s3://b/{i}"})}}]},
        {"role": "tool", "tool_call_id": cid, "content": f"listing {i}: k0 k1"},
    ]


def _play(stack: GateStack, replace_at: int | set[int] | None) -> list[Any]:
    """Five requests, each reply echoed with its tool result, except the one after
    request ``replace_at`` (or each of a set): replaced by the client's own call (which,
    with :func:`_model`, loses the key)."""
    client = openai.OpenAI(api_key="sk-test-quiet", base_url=stack.openai_base_url, max_retries=0)
    msgs = _history()
    answers = []
    for turn in range(5):
        got = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        reply = got.parse().choices[0].message.model_dump(exclude_none=True)
        answers.append((got.headers.get("x-compaction-gate-action"), reply))
        if turn == replace_at or (isinstance(replace_at, set) and turn in replace_at):
            msgs += _own_turn(turn)
        elif reply.get("tool_calls"):
            msgs += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": f"ok {turn}"}]
        else:  # the tripwire held the call back: the client answers the text
            msgs += [reply, {"role": "user", "content": f"go on {turn}"}]
    return answers


def _outcome(stack: GateStack) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    status, convs = stack.get("/gate/conversations")
    assert status == 200
    [conv] = convs["conversations"]
    status, detail = stack.get(f"/gate/conversations/{conv['id']}")
    assert status == 200
    timeline = [(t["relation"], t.get("transition"), t["messages"], t["new_messages"], t["tokens"])
                for t in detail["timeline"]]
    events = [(e["kind"], e.get("action"), e.get("verdict"), e.get("transition")) for e in stack.events()]
    return timeline, events


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The conversations' requests the full analysis ran for (by relation)."""
    ran: list[str] = []
    real = interceptor_mod.analyze_request

    def counting(req: Any, *args: Any, **kwargs: Any) -> Any:
        ran.append(req.obs.relation)
        return real(req, *args, **kwargs)

    monkeypatch.setattr(interceptor_mod, "analyze_request", counting)
    yield ran


def _run(
    replace_at: int | set[int] | None, quiet: bool, monkeypatch: pytest.MonkeyPatch, model: Any = _model
) -> tuple[Any, ...]:
    if not quiet:
        monkeypatch.setattr(interceptor_mod.GateInterceptor, "_is_quiet", lambda self, ex, obs, t: False)
    stack = GateStack("default", model)
    try:
        answers = _play(stack, replace_at)
        return (answers, *_outcome(stack))
    finally:
        stack.close()
        monkeypatch.undo()


def test_plain_appends_skip_the_analysis(analyses: list[str]) -> None:
    stack = GateStack("default", _model)
    try:
        answers = _play(stack, None)
        timeline, events = _outcome(stack)
    finally:
        stack.close()
    assert analyses == ["new"]  # the first request only; the four appends took the quiet path
    assert [t[1] for t in timeline] == ["new", "append", "append", "append", "append"]
    assert all(tokens > 0 for *_, tokens in timeline)
    assert [a for a, _ in answers] == ["none"] * 5
    assert events == []


def test_after_a_destructive_compaction_the_full_steps_run(analyses: list[str]) -> None:
    stack = GateStack("default", _model)
    try:
        _play(stack, 1)
        _, events = _outcome(stack)
    finally:
        stack.close()
    assert [e[2] for e in events if e[0] == "compaction"] == ["destructive"]
    # request 0 (the first) ran in full, request 1 appended quietly; request 2 (the
    # replaced reply, no append) and the two after it — the conversation now has a
    # repair or an armed tripwire — ran in full
    assert len(analyses) == 4
    assert analyses[0] == "new"


@pytest.mark.parametrize("replace_at", [None, 1, 3])
def test_the_quiet_path_decides_as_the_full_steps_do(replace_at: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _run(replace_at, True, monkeypatch)
    full = _run(replace_at, False, monkeypatch)
    assert fast == full


def test_a_replaced_reply_that_lost_nothing_required_skips_the_analysis(analyses: list[str]) -> None:
    stack = GateStack("default", _readonly_model)
    try:
        answers = _play(stack, {1, 2, 3})
        timeline, events = _outcome(stack)
    finally:
        stack.close()
    assert analyses == ["new"]  # the replaced replies took the quiet path too
    kinds = [t[1] for t in timeline]
    assert kinds[:2] == ["new", "append"]
    assert all(k not in ("append", "new") for k in kinds[2:])  # three replaced replies, tracked as such
    assert [a for a, _ in answers] == ["none"] * 5
    assert events == []  # an ordinary turn, not a compaction


def test_a_replaced_reply_that_lost_a_required_binding_runs_the_full_steps(analyses: list[str]) -> None:
    stack = GateStack("default", _model)
    try:
        _play(stack, {1})
        _, events = _outcome(stack)
    finally:
        stack.close()
    assert [e[2] for e in events if e[0] == "compaction"] == ["destructive"]
    assert "extend" in analyses[1:]  # the replaced reply (a lineage extension) was analysed in full


@pytest.mark.parametrize("replace_at", [{1}, {1, 2, 3}, {0, 2}])
def test_the_quiet_last_turn_path_decides_as_the_full_steps_do(
    replace_at: set[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _run(replace_at, True, monkeypatch, _readonly_model)
    full = _run(replace_at, False, monkeypatch, _readonly_model)
    assert fast == full
