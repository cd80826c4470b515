"""Traffic we did not write (issue 15): a client that sends the model's reply back
re-serialised, or replaces it with its own next message, or edits its last turn.

Through the real gate (tracker + default policy) with the openai SDK and the fake
upstream: a re-serialised reply is the same message (``append``); an edited or replaced
last turn is tracked on the timeline without a compaction event unless a required
binding was lost; and the analysis of such an edit scans only the messages it changed.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.analysis import analyze, settled_safe
from proxy.core.dialects import from_body
from proxy.core.identifiers import extract as extract_mod
from proxy.core.transition import classify, within_last_turn
from proxy.policy.loader import load_policy
from proxy.policy.obligations import PolicyObligations
from tests.e2e.stack import GateStack
from tests.support.counting import threads_counting
from tests.support.fake_upstream import Call, Reply, ToolCall

UPLOAD = "2~Zk4XbR7sQpLw9TnVd3HcYa"
ARGS = {"cmd": "kubectl rollout status deploy/api -n prod", "timeout": 30}


def _model(call: Call) -> Reply:
    return Reply(tool_calls=[ToolCall("bash", ARGS)])


def _history(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent."},
        {"role": "user", "content": "Upload the backup and keep every handle."},
    ]
    for i in range(n):
        cid = f"call_{i}"
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps(
                    {"cmd": f"aws s3api create-multipart-upload --bucket b --key k{i}"})}}]},
            {"role": "tool", "tool_call_id": cid,
             "content": json.dumps({"Bucket": "b", "Key": f"k{i}", "UploadId": f"{UPLOAD}{i:04d}"})},
        ]
    return msgs


def _reserialised(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply as a client that rebuilds it from its own types sends it back."""
    calls = [{"function": {"arguments": json.dumps(json.loads(tc["function"]["arguments"]), indent=2),
                           "name": tc["function"]["name"]}, "id": tc["id"], "type": "function"}
             for tc in reply["tool_calls"]]
    return {"tool_calls": calls, "content": "", "role": "assistant"}  # other order, null -> ""


@pytest.fixture
def stack() -> Any:
    s = GateStack("default", _model)
    yield s
    s.close()


def _client(stack: GateStack) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test-shapes", base_url=stack.openai_base_url, max_retries=0)


def _timeline(stack: GateStack) -> list[dict[str, Any]]:
    status, convs = stack.get("/gate/conversations")
    assert status == 200
    [conv] = convs["conversations"]
    status, detail = stack.get(f"/gate/conversations/{conv['id']}")
    assert status == 200
    return list(detail["timeline"])


def _compactions(stack: GateStack) -> list[dict[str, Any]]:
    return [e for e in stack.events() if e.get("kind") == "compaction"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_re_serialised_reply_is_the_same_message(stack: GateStack, stream: bool) -> None:
    client = _client(stack)
    msgs = _history(3)
    for turn in range(3):
        if stream:
            calls: dict[int, dict[str, Any]] = {}
            for chunk in client.chat.completions.create(model="gpt-4o", messages=msgs, stream=True):  # type: ignore[arg-type]
                for tc in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
                    c = calls.setdefault(tc.index, {"id": tc.id, "type": "function",
                                                    "function": {"name": "", "arguments": ""}})
                    c["id"] = tc.id or c["id"]
                    c["function"]["name"] += (tc.function and tc.function.name) or ""
                    c["function"]["arguments"] += (tc.function and tc.function.arguments) or ""
            reply = {"role": "assistant", "content": None, "tool_calls": [calls[i] for i in sorted(calls)]}
        else:
            reply = client.chat.completions.create(model="gpt-4o", messages=msgs).choices[0].message.model_dump()  # type: ignore[arg-type]
        sent = _reserialised(reply)
        assert sent["tool_calls"][0]["function"]["arguments"] != reply["tool_calls"][0]["function"]["arguments"]
        msgs += [sent, {"role": "tool", "tool_call_id": sent["tool_calls"][0]["id"], "content": f"rollout {turn} ok"}]
    client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    timeline = _timeline(stack)
    assert [t["relation"] for t in timeline] == ["new", "extend", "extend", "extend"]
    assert [t.get("transition") for t in timeline[1:]] == ["append"] * 3
    assert _compactions(stack) == []


def test_a_replaced_reply_is_tracked_without_a_compaction_event(stack: GateStack) -> None:
    client = _client(stack)
    msgs = _history(3)
    for turn in range(3):
        client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        # the client drops the reply and drives the loop with its own call and result
        cid = f"own_{turn}"
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function": {
                     "name": "bash", "arguments": json.dumps({"cmd": f"kubectl get deploy api-{turn}"})}}]},
                 {"role": "tool", "tool_call_id": cid, "content": f"deploy api-{turn}: 3/3 ready"}]
    client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    timeline = _timeline(stack)
    assert len(timeline) == 4  # one conversation: the replaced reply does not fork it
    assert all(t.get("transition") != "append" for t in timeline[1:])  # but it is no append
    assert _compactions(stack) == []


KEY = "7Hq2Lx9Vt4Rb8Nc3Zp1W"


def test_a_replaced_reply_that_held_a_required_binding_is_still_a_compaction() -> None:
    # the model's call writes an idempotency key it generated (PRINCIPLES 2c); the client
    # sends its own message instead, and the key is nowhere in what the model will see
    cmd = f"aws s3api put-object --bucket b --key k --idempotency-key {KEY}"
    stack = GateStack("default", lambda call: Reply(tool_calls=[ToolCall("bash", {"cmd": cmd})]))
    try:
        client = _client(stack)
        msgs = _history(2)
        client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": "own_1", "type": "function",
                  "function": {"name": "bash", "arguments": json.dumps({"cmd": "aws s3 ls s3://b"})}}]},
                 {"role": "tool", "tool_call_id": "own_1", "content": "k0 k1"}]
        client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        [event] = _compactions(stack)
        assert event["verdict"] == "destructive"
        assert KEY in event["required"]
    finally:
        stack.close()


# ----------------------------------------------------------------------------- cost


def _analysis_scans(before: dict[str, Any], after: dict[str, Any], quick: bool) -> tuple[Any, list[int]]:
    """The analysis of before -> after, and the message index of every text part it
    scanned for identifiers."""
    scanned: list[int] = []
    real = extract_mod._cached_scan
    rule = PolicyObligations(load_policy("default"))

    def counting(key: Any, text: str, *args: Any) -> Any:
        scanned.append((key, text))
        return real(key, text, *args)

    b, a = from_body("chat", before), from_body("chat", after)
    index = {m.digest: i for i, m in enumerate(b.messages)} | {m.digest: i for i, m in enumerate(a.messages)}
    # a short text is scanned under its own value (no message key): found by its text
    by_text: dict[str, int] = {}
    for snap in (b, a):
        for i, m in enumerate(snap.messages):
            for p in m.parts:
                by_text.setdefault(p.text, i)
    extract_mod._cached_scan = counting  # type: ignore[assignment]
    try:
        got = analyze(b, a, obligation_rule=rule, quick_survival=quick)
    finally:
        extract_mod._cached_scan = real  # type: ignore[assignment]
    return got, [index.get(k[0], -1) if isinstance(k, tuple) else by_text.get(t, -1) for k, t in scanned]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 40), words=st.lists(st.sampled_from(["deploy/api", "rollout", "status", "web-frontend",
                                                             "ok", "the", "pods"]), min_size=1, max_size=6))
def test_a_one_message_edit_scans_only_the_changed_message(n: int, words: list[str]) -> None:
    msgs = _history(n)
    reply = {"role": "assistant", "content": "I will check " + " ".join(words)}
    before = {"model": "gpt-4o", "messages": [*msgs, reply]}
    after = {"model": "gpt-4o", "messages": [*msgs, {"role": "assistant", "content": "Checking the rollout."},
                                             {"role": "user", "content": "go on"}]}
    quick, scanned = _analysis_scans(before, after, True)
    full, full_scanned = _analysis_scans(before, after, False)
    last = len(msgs) - 1  # the reply's index among the snapshot's messages (system aside)
    assert quick.transition.lost_region == (last,)
    assert set(scanned) <= {last}  # only the replaced reply was read
    assert len(full_scanned) > 2 * n  # the whole analysis reads both histories
    # and the verdict and the lost values are the same
    assert quick.verdict == full.verdict == "safe"
    assert {b.value for b in quick.dropped + quick.altered} <= {b.value for b in full.dropped + full.altered}
    assert not any(b.required for b in quick.dropped + quick.altered)


def test_an_edit_that_drops_an_opaque_value_gets_the_whole_analysis() -> None:
    msgs = _history(4)
    text = "Started upload 9b2f4c1e-7d3a-4e5b-8c6f-1a2b3c4d5e6f for k9."
    before = {"model": "gpt-4o", "messages": [*msgs, {"role": "assistant", "content": text}]}
    after = {"model": "gpt-4o", "messages": [*msgs, {"role": "assistant", "content": "Upload started."}]}
    quick, scanned = _analysis_scans(before, after, True)
    full, _ = _analysis_scans(before, after, False)
    assert len(scanned) > 2 * 4  # an opaque value is gone: provenance needs the history
    assert quick.verdict == full.verdict
    assert [(b.value, b.required) for b in quick.dropped] == [(b.value, b.required) for b in full.dropped]
    assert [b.value for b in full.dropped] == ["9b2f4c1e-7d3a-4e5b-8c6f-1a2b3c4d5e6f"]


# ----------------------------------------------------------------------------- first sight


def test_a_first_seen_long_history_is_counted_off_the_event_loop() -> None:
    import asyncio
    import threading

    from proxy.gate.admission import FIRST_SIGHT_MESSAGES
    from proxy.gate.tracker import Tracker
    from proxy.server.hooks import Exchange
    from proxy.state import MemoryStore

    body = {"model": "gpt-4o", "messages": _history(FIRST_SIGHT_MESSAGES // 2 + 1)}
    raw = json.dumps(body).encode()
    reply = json.dumps({"model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Uploads done."}}]}).encode()

    async def main() -> tuple[set[str], int, int, list[str]]:
        tracker = Tracker(MemoryStore())
        await tracker.start()
        await tracker.warm(["gpt-4o"])
        texts = {p.text for m in from_body("chat", body).messages for p in m.parts if p.text}
        where = threads_counting(tracker, texts.__contains__)
        ex = Exchange("POST", "/v1/chat/completions", "", "openai", "chat", {}, "tenant", raw, body, False, "gpt-4o")
        obs = await tracker.observe(ex, defer_accounting=True)
        assert obs is not None
        tracker.tap(obs).feed_json(200, reply)
        for _ in range(200):  # the reply is recorded once the thread has counted
            await asyncio.sleep(0.01)
            if not tracker._counting and not tracker._waiting:
                break
        rec = tracker.get(obs.conversation_id)
        assert rec is not None
        exact = tracker.accounting.count_snapshot("gpt-4o", from_body("chat", body))
        relations = [t.relation for t in rec.timeline]
        await tracker.close()
        return where, rec.timeline[0].tokens, exact, relations

    where, tokens, exact, relations = asyncio.run(main())
    assert where and threading.main_thread().name not in where  # no history message counted on the loop
    assert relations == ["new"] and tokens == exact > 0  # and the counts are the exact ones


_COMMANDS = [
    "kubectl rollout status deploy/api -n prod",  # reads
    "aws s3 ls s3://b/k1",
    f"aws s3api put-object --bucket b --key k --idempotency-key {KEY}",  # writes a key it made (2c)
    "aws s3api upload-part --bucket b --key k1 --upload-id " + UPLOAD + "0001 --part-number 2",  # a kept handle
    "git reset --hard 4f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), lost=st.sampled_from(_COMMANDS), own=st.sampled_from(_COMMANDS),
       text=st.booleans())
def test_settled_safe_never_says_safe_where_the_analysis_finds_a_loss(n: int, lost: str, own: str, text: bool) -> None:
    """:func:`settled_safe` (what the gate's quiet path acts on) agrees with the whole
    analysis whenever it answers: a replaced or edited last reply it calls safe is safe."""
    msgs = _history(n)
    call = {"id": "model_1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": lost})}}
    reply: dict[str, Any] = ({"role": "assistant", "content": f"Next I will run {lost}"} if text
                             else {"role": "assistant", "content": None, "tool_calls": [call]})
    mine = {"id": "own_1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": own})}}
    b = from_body("chat", {"model": "gpt-4o", "messages": [*msgs, reply]})
    a = from_body("chat", {"model": "gpt-4o", "messages": [
        *msgs, {"role": "assistant", "content": None, "tool_calls": [mine]},
        {"role": "tool", "tool_call_id": "own_1", "content": "done"}]})
    rule = PolicyObligations(load_policy("default"))
    t = classify(b, a)
    assert t.kind == "append" or within_last_turn(t, b)  # the same call again: only moved
    full = analyze(b, a, obligation_rule=rule, transition=t)
    if settled_safe(b, a, t, obligation_rule=rule):
        assert full.verdict == "safe"
    if full.destructive:
        assert not settled_safe(b, a, t, obligation_rule=rule)
    if lost == own:
        assert settled_safe(b, a, t, obligation_rule=rule)  # every lost value still visible
