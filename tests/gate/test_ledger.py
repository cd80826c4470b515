"""Deferred token accounting (proxy.gate.ledger): a request observed with its accounting
deferred ends up with exactly the counts of one counted on the spot, whichever event
settles it (its reply, the conversation's next request, a read, shutdown)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.messages import from_body
from proxy.gate.tracker import Observation, Tracker
from proxy.gate.tracking import TrackingInterceptor
from proxy.state import MemoryStore, SQLiteStore
from tests.gate.conftest import exchange

MODEL = "gpt-4o"


def chat_reply(text: str) -> bytes:
    return json.dumps({"id": "r", "object": "chat.completion", "model": MODEL, "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "messages": [dict(m) for m in messages]}


async def new_tracker(store: Any = None) -> Tracker:
    ticks = itertools.count(1)
    t = Tracker(store if store is not None else MemoryStore(), clock=lambda: float(next(ticks)))
    await t.start()
    await t.warm([MODEL])
    return t


_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789abcdef", min_size=7, max_size=64),  # identifier-like runs
    st.sampled_from(["git rev-parse HEAD", "upload id 5f1c…", "ok", "", "kubectl get deploy api -o yaml"]),
)
_ops = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["turn", "turn", "reply", "compact", "side", "paste", "read"]), _text),
    max_size=25,
)


async def run_script(script: list[tuple[int, str, str]], defer: bool) -> tuple[list[Any], list[tuple[int, Observation]]]:
    """Play ``script`` on a fresh tracker; returns every conversation's settled state and
    the observations (with the tokens a fresh full count gives for each request)."""
    t = await new_tracker()
    convs = [[{"role": "system", "content": "You are an ops agent."}, {"role": "user", "content": f"task {i}"}]
             for i in range(3)]
    last: list[Observation | None] = [None, None, None]
    seen: list[tuple[int, Observation]] = []

    async def send(i: int, msgs: list[dict[str, Any]]) -> Observation | None:
        obs = await t.observe(exchange(body(msgs)), defer_accounting=defer)
        if obs is not None:
            seen.append((t.accounting.count_snapshot(MODEL, obs.current), obs))
        return obs

    for i, op, text in script:
        msgs = convs[i]
        if op == "turn":
            msgs += [{"role": "assistant", "content": text or "."}, {"role": "user", "content": f"{text} next"}]
            last[i] = await send(i, msgs)
        elif op == "reply" and last[i] is not None:
            obs = last[i]
            assert obs is not None
            t.tap(obs).feed_json(200, chat_reply(text))
            msgs.append({"role": "assistant", "content": text})
            last[i] = None
        elif op == "compact" and len(msgs) > 4:
            convs[i] = [msgs[0], {"role": "user", "content": f"Here is a summary of the conversation to date: {text}"}] + msgs[-3:]
            last[i] = await send(i, convs[i])
        elif op == "side":
            await send(i, msgs + [{"role": "user", "content": "Summarize the conversation so far."}])
        elif op == "paste":
            transcript = "\n".join(f"{m['role']}: {m['content']}" for m in msgs[1:])
            await send(i, [{"role": "user", "content": f"Summarize this conversation:\n{transcript}"}])
        elif op == "read":
            t.conversations() if i == 0 else [t.get(r.id) for r in list(t._recs.values())]
    state = [
        (rec.tokens, rec.window, rec.digests, rec.request_len,
         [(e.seq, e.relation, e.messages, e.new_messages, e.tokens, e.share, e.reply_tokens, e.status) for e in rec.timeline])
        for rec in sorted(t.conversations(), key=lambda r: r.created)
    ]
    await t.close()
    return state, seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops)
async def test_deferred_accounting_equals_counting_on_the_spot(script: list[tuple[int, str, str]]) -> None:
    eager, seen_eager = await run_script(script, defer=False)
    deferred, seen_deferred = await run_script(script, defer=True)
    assert deferred == eager
    # and each request's settled count is a full recount of what it sent
    assert sum(len(rec[4]) for rec in deferred) == len(seen_deferred) == len(seen_eager)
    assert sorted(e[4] for rec in deferred for e in rec[4]) == sorted(full for full, _ in seen_deferred)
    for full, obs in seen_eager:
        assert obs.tokens == full


async def test_pending_until_a_reply_a_read_or_the_next_request() -> None:
    t = await new_tracker()
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "sha256:" + "ab" * 32}]
    obs = await t.observe(exchange(body(msgs)), defer_accounting=True)
    assert obs is not None and obs.tokens is None and obs.share is None and obs.window == 128_000
    full = t.accounting.count_snapshot(MODEL, obs.current)
    rec = t._recs[obs.conversation_id]
    assert rec.timeline[-1].tokens == 0 and rec.tokens == 0  # not counted yet
    got = t.get(obs.conversation_id)  # a read settles
    assert got is rec and rec.timeline[-1].tokens == rec.tokens == full
    assert rec.timeline[-1].share == round(full / 128_000, 4)

    # the reply settles (and the reply's own tokens are counted with it)
    msgs += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    obs2 = await t.observe(exchange(body(msgs)), defer_accounting=True)
    assert obs2 is not None and obs2.relation == "extend" and rec.timeline[-1].tokens == 0
    t.tap(obs2).feed_json(200, chat_reply("fine"))
    assert rec.timeline[-1].tokens == t.accounting.count_snapshot(MODEL, obs2.current) and rec.timeline[-1].reply_tokens > 0

    # no reply at all (e.g. the gate rejected it): the next request settles it first
    msgs += [{"role": "assistant", "content": "fine"}, {"role": "user", "content": "again"}]
    obs3 = await t.observe(exchange(body(msgs)), defer_accounting=True)
    msgs += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    obs4 = await t.observe(exchange(body(msgs)), defer_accounting=True)
    assert obs3 is not None and obs4 is not None and obs4.relation == "extend"
    assert rec.timeline[-2].tokens == t.accounting.count_snapshot(MODEL, obs3.current)
    assert rec.timeline[-1].tokens == 0
    await t.close()  # shutdown settles
    assert rec.timeline[-1].tokens == t.accounting.count_snapshot(MODEL, obs4.current)


async def test_pending_accounting_is_settled_and_stored_at_shutdown(tmp_path: Path) -> None:
    t = await new_tracker(SQLiteStore(tmp_path / "state.db"))
    obs = await t.observe(exchange(body([{"role": "user", "content": "upload id 0f3c9a77e1"}])), defer_accounting=True)
    assert obs is not None
    full = t.accounting.count_snapshot(MODEL, obs.current)
    await t.close()
    t2 = await new_tracker(SQLiteStore(tmp_path / "state.db"))
    rec = t2.get(obs.conversation_id)
    assert rec is not None and rec.tokens == full and [e.tokens for e in rec.timeline] == [full]
    await t2.close()


async def test_interceptor_counts_after_the_response() -> None:
    t = await new_tracker()
    icp = TrackingInterceptor(t)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "HEAD " + "3f2a9c1" * 5}]
    late = await (await icp.before(exchange(body(msgs)))).after_send()  # type: ignore[misc]
    assert late.conversation_id is not None and late.tap is not None
    rec = t._recs[late.conversation_id]
    assert rec.timeline[-1].tokens == 0  # the response is not held up by counting
    late.tap.feed_json(200, chat_reply("ok"))  # the server feeds the tap once the reply is relayed
    full = t.accounting.count_snapshot(MODEL, from_body("chat", body(msgs)))
    assert rec.timeline[-1].tokens == rec.tokens == full
    await t.close()
