"""QuietQueue: bookkeeping that waits for a quiet event loop — after a burst, at the
latest after max_delay or max_items, or on demand; in order, exactly once."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.gate.quiet import QuietQueue
from tests.gate.conftest import exchange
from tests.gate.scripts import body, chat_reply, new_tracker


async def test_runs_once_the_loop_is_quiet() -> None:
    done: list[int] = []
    q: QuietQueue[int] = QuietQueue(done.append, quiet=0.2, max_delay=5.0)
    q.push(1)
    q.push(2)
    await asyncio.sleep(0)
    assert done == [] and len(q) == 2
    await asyncio.sleep(0.5)
    assert done == [1, 2] and len(q) == 0


async def test_a_burst_postpones_it_until_max_delay() -> None:
    drained_at: list[float] = []
    loop = asyncio.get_running_loop()
    q: QuietQueue[int] = QuietQueue(lambda _: drained_at.append(loop.time()), quiet=0.2, max_delay=0.3, max_items=1000)
    t0 = loop.time()
    while loop.time() - t0 < 1.0:  # a new item every 10 ms: never 200 ms of quiet
        q.push(0)
        await asyncio.sleep(0.01)
    assert drained_at
    first = drained_at[0] - t0
    assert 0.3 <= first < 0.9  # drained at max_delay, not when the pushes stopped (1.2 s)


async def test_max_items_drains_at_once() -> None:
    done: list[int] = []
    q: QuietQueue[int] = QuietQueue(done.append, quiet=10.0, max_delay=10.0, max_items=3)
    q.push(1)
    q.push(2)
    assert done == []
    q.push(3)
    assert done == [1, 2, 3]


def test_outside_a_loop_it_runs_at_once() -> None:
    done: list[int] = []
    QuietQueue(done.append).push(7)
    assert done == [7]


async def test_a_failing_item_is_logged_and_the_rest_still_run(caplog: pytest.LogCaptureFixture) -> None:
    done: list[int] = []

    def run(i: int) -> None:
        if i == 2:
            raise ValueError("boom")
        done.append(i)

    q: QuietQueue[int] = QuietQueue(run)
    for i in (1, 2, 3):
        q.push(i)
    with caplog.at_level(logging.ERROR, logger="proxy.gate.quiet"):
        q.drain()
    assert done == [1, 3]
    assert "deferred bookkeeping failed" in caplog.text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["push", "drain", "tick", "wait"]), max_size=40))
async def test_every_item_runs_once_in_push_order(ops: list[str]) -> None:
    done: list[int] = []
    q: QuietQueue[int] = QuietQueue(done.append, quiet=0.002, max_delay=0.01, max_items=5)
    pushed = 0
    for op in ops:
        if op == "push":
            q.push(pushed)
            pushed += 1
        elif op == "drain":
            q.drain()
            assert done == list(range(pushed))
        elif op == "tick":
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(0.003)
        assert done == list(range(len(done)))  # in order, none twice
        assert len(done) + len(q) == pushed  # none lost
    await asyncio.sleep(0.03)
    assert done == list(range(pushed))


async def test_the_tracker_records_a_waiting_reply_before_the_next_request() -> None:
    t = await new_tracker()
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "deploy release 4f1c2b9"},
            {"role": "assistant", "content": "building"}, {"role": "user", "content": "go on"},
            {"role": "assistant", "content": "built"}, {"role": "user", "content": "roll it out"}]
    obs = await t.observe(exchange(body(msgs)))
    assert obs is not None
    t.tap(obs).feed_json(200, chat_reply("rolled out 4f1c2b9"))  # waits for a quiet loop
    msgs += [{"role": "assistant", "content": "rolled out 4f1c2b9"}, {"role": "user", "content": "now roll back"}]
    obs2 = await t.observe(exchange(body(msgs)))  # comes before the loop was quiet
    assert obs2 is not None and obs2.conversation_id == obs.conversation_id
    assert obs2.relation == "extend" and obs2.match.prefix_len == 6  # the reply was part of the history
    assert obs2.previous is not None and len(obs2.previous.messages) == 6
    assert obs2.previous.messages[-1].digest == obs2.current.messages[5].digest
    await t.close()


async def test_the_tap_keeps_events_and_reassembles_them_when_quiet() -> None:
    t = await new_tracker()
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "which revision?"}]
    obs = await t.observe(exchange({**body(msgs), "stream": True}))
    assert obs is not None
    tap = t.tap(obs)
    events = [
        b'data: {"choices":[{"index":0,"delta":{"content":"revision "}}]}\n\n',
        b"data: {not json\n\n",  # a malformed event is passed through and skipped
        b'data: {"choices":[{"index":0,"delta":{"content":"4f1c2b9e"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    for ev in events:
        assert tap.feed_event(ev) == [ev]  # unchanged, at once
    assert tap.finish() == []
    rec = t._recs[obs.conversation_id]
    assert rec.timeline[-1].status == "pending" and len(rec.digests) == 1  # not parsed yet
    await asyncio.sleep(0.05)
    assert rec.timeline[-1].status == "ok" and rec.timeline[-1].reply_messages == 1
    hist = await t.history(obs.conversation_id)
    assert hist is not None and hist.messages[-1].role == "assistant"
    assert hist.messages[-1].parts[0].text == "revision 4f1c2b9e"
    await t.close()
