"""Deferred token accounting (proxy.gate.ledger): a request observed with its accounting
deferred ends up with exactly the counts of one counted on the spot, whichever event
settles it (its reply, the conversation's next request, a read, shutdown)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from proxy.core.dialects import from_body
from proxy.gate.tracking import TrackingInterceptor
from proxy.state import SQLiteStore
from tests.gate.conftest import exchange
from tests.gate.scripts import MODEL, body, chat_reply, new_tracker, ops, run_script


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
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
    assert rec.timeline[-1].tokens == 0 and rec.timeline[-1].status == "pending"  # recorded once the loop is quiet
    await asyncio.sleep(0.05)
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
    await asyncio.sleep(0.05)  # ... and the reply is recorded once the loop is quiet
    assert rec.timeline[-1].tokens == rec.tokens == full
    await t.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
async def test_reused_messages_match_like_a_full_normalisation(script: list[tuple[int, str, str]]) -> None:
    """The incremental normaliser tells lineage which conversation's last request a body
    reuses (so the extension is not compared again): conversations, relations and
    counts are those of normalising every body in full."""
    incremental, _ = await run_script(script, defer=True)
    full, _ = await run_script(script, defer=True, incremental=False)
    assert incremental == full
