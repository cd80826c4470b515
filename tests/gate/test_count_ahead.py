"""A long text's token count is made in a worker thread, never on the event loop (issue
16): a request's text over the exact cap (its estimate: tiktoken over spread windows, a
few ms of the loop for a single run) and a reply's long text, before the reply is
recorded; the counts are what the loop would have made (estimates, flagged)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from proxy.accounting import LOOP_EXACT_CHARS, MAX_EXACT_CHARS, MESSAGE_OVERHEAD, TokenAccounting
from proxy.core.dialects import from_body
from proxy.core.responses import reply_from_json
from proxy.gate.tracker import Tracker
from proxy.server.hooks import Exchange
from proxy.state import MemoryStore
from tests.support.counting import threads_counting

ASKED = "q" * (MAX_EXACT_CHARS * 2)  # over the exact cap: an estimate wherever counted
ANSWERED = "r" * (MAX_EXACT_CHARS * 2)
BETWEEN = "s" * (LOOP_EXACT_CHARS * 3)  # between the caps: exact in the thread


def _reply(text: str) -> bytes:
    return json.dumps({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}).encode()


def _run(body: dict[str, Any], reply: bytes) -> tuple[set[str], Any]:
    raw = json.dumps(body).encode()

    async def main() -> tuple[set[str], Any]:
        tracker = Tracker(MemoryStore())
        await tracker.start()
        await tracker.warm(["gpt-4o"])
        where = threads_counting(tracker, lambda text: len(text) > LOOP_EXACT_CHARS)
        ex = Exchange("POST", "/v1/chat/completions", "", "openai", "chat", {}, "tenant", raw, body, False, "gpt-4o")
        obs = await tracker.observe(ex, defer_accounting=True)
        assert obs is not None
        tracker.tap(obs).feed_json(200, reply)
        for _ in range(500):  # recorded once the threads have counted (not read before: a read drains)
            await asyncio.sleep(0.01)
            if not tracker._counting and not tracker._waiting and not len(tracker._later):
                break
        rec = tracker.get(obs.conversation_id)
        await tracker.close()
        return where, rec

    return asyncio.run(main())


def test_a_long_request_and_reply_are_counted_off_the_loop_and_recorded_as_the_loop_would() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": ASKED}]}
    where, rec = _run(body, _reply(ANSWERED))
    assert where and threading.main_thread().name not in where  # nothing long counted on the loop
    entry = rec.timeline[0]
    acc = TokenAccounting()  # the counts the loop makes, in a fresh accounting
    asked = from_body("chat", body)
    answered = _answer(ANSWERED)
    assert entry.tokens == acc.count_snapshot("gpt-4o", asked)
    assert entry.reply_tokens == sum(acc.count_message("gpt-4o", m) for m in answered)
    assert entry.reply_tokens > MESSAGE_OVERHEAD
    assert entry.estimated and entry.reply_estimated


def test_a_reply_between_the_caps_is_counted_exactly_before_it_is_recorded() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}]}
    where, rec = _run(body, _reply(BETWEEN))
    assert where and threading.main_thread().name not in where
    entry = rec.timeline[0]
    answered = _answer(BETWEEN)
    acc = TokenAccounting()
    acc.precount("gpt-4o", answered)
    assert entry.reply_tokens == sum(acc.count_message("gpt-4o", m) for m in answered)
    assert not entry.reply_estimated


def _answer(text: str) -> Any:
    reply = reply_from_json("chat", json.loads(_reply(text)))
    assert reply is not None
    return reply.messages


@pytest.mark.parametrize("quiet_first", [True, False])
def test_a_reader_sees_the_reply_recorded_while_its_count_is_still_in_the_thread(quiet_first: bool) -> None:
    """A drain (a reader, the tenant's next request) does not wait for the counting
    thread: the reply is recorded then, counted on the loop — whether the thread was
    started at a quiet moment before, or by the drain itself."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}]}
    raw = json.dumps(body).encode()
    release = threading.Event()

    async def main() -> tuple[Any, Any]:
        tracker = Tracker(MemoryStore())
        await tracker.start()
        await tracker.warm(["gpt-4o"])
        real = tracker.accounting.precount

        def blocked(model: str | None, msgs: Any) -> None:
            release.wait(10)
            real(model, msgs)

        tracker.accounting.precount = blocked  # type: ignore[method-assign]
        ex = Exchange("POST", "/v1/chat/completions", "", "openai", "chat", {}, "tenant", raw, body, False, "gpt-4o")
        obs = await tracker.observe(ex, defer_accounting=True)
        assert obs is not None
        tracker.tap(obs).feed_json(200, _reply(ANSWERED))
        if quiet_first:
            await asyncio.sleep(0.1)  # the quiet moment: the count of the reply started, and blocks
            assert tracker._waiting  # the record waits for the thread
        rec = tracker._recs[obs.conversation_id]  # not tracker.get: a read drains
        before = rec.timeline[0].reply_tokens if rec.timeline else None
        tracker.settle_all()
        after = rec.timeline[0].reply_tokens
        release.set()
        await tracker.close()
        return before, after

    before, after = asyncio.run(main())
    assert before is None
    assert after == sum(TokenAccounting().count_message("gpt-4o", m) for m in _answer(ANSWERED))
