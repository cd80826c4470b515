"""A large reply is parsed off the event loop (issue 16) and recorded exactly as one
parsed on it: a JSON reply in the request worker process, a long stream's assembly in a
background thread. Its record waits for that work — through another tenant's requests,
which cannot extend its conversation — but never past the next request of its own
tenant, nor past a read."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future
from typing import Any

import pytest

from proxy.gate import replytap
from tests.gate.conftest import exchange
from tests.gate.scripts import body, chat_reply, new_tracker

MSGS = [{"role": "system", "content": "S"}, {"role": "user", "content": "deploy release 4f1c2b9"}]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[Future[Any]]:
    """Every large JSON reply's off-loop parse, as a future the test completes."""
    futures: list[Future[Any]] = []

    def parse_elsewhere(api: str, raw: bytes) -> Future[Any]:
        fut: Future[Any] = Future()
        futures.append(fut)
        return fut

    monkeypatch.setattr(replytap, "_parse_elsewhere", parse_elsewhere)
    return futures


async def _replied() -> tuple[Any, Any, bytes]:
    """A tracker, the observation of a first request, and the JSON reply fed to its tap."""
    t = await new_tracker()
    obs = await t.observe(exchange(body(MSGS)))
    assert obs is not None
    raw = chat_reply("rolled out 4f1c2b9")
    t.tap(obs).feed_json(200, raw)
    return t, obs, raw


async def test_another_tenants_request_does_not_wait_for_a_large_reply_nor_force_it(held: list[Any]) -> None:
    t, obs, raw = await _replied()
    [fut] = held
    rec = t._recs[obs.conversation_id]
    for text in ("hello", "please check the rollout status of release 4f1c2b9 in the production cluster now\n"
                 "and report every failing pod with its full name and the reason it gives"):
        # a short request with lines to match settles what it could match: its tenant's
        other = await t.observe(exchange(body([{"role": "user", "content": text}]), tenant="tenant-b"))
        assert other is not None and other.conversation_id != obs.conversation_id
    await asyncio.sleep(0.05)
    assert rec.timeline[-1].status == "pending"  # still waiting for the worker
    fut.set_result(replytap._reply_elsewhere("chat", raw))  # what the worker hands back
    await asyncio.sleep(0.05)
    assert rec.timeline[-1].status == "ok"
    hist = await t.history(obs.conversation_id)
    assert hist is not None and hist.messages[-1].text == "rolled out 4f1c2b9"
    await t.close()


async def test_the_same_tenants_next_request_records_it_first_without_the_worker(held: list[Any]) -> None:
    t, obs, _ = await _replied()
    msgs = [*MSGS, {"role": "assistant", "content": "rolled out 4f1c2b9"}, {"role": "user", "content": "roll back"}]
    obs2 = await t.observe(exchange(body(msgs)))  # the worker never answered
    assert obs2 is not None and obs2.conversation_id == obs.conversation_id
    assert obs2.relation == "extend" and obs2.match.prefix_len == 2  # the reply was recorded, parsed here
    assert obs2.previous is not None and obs2.previous.messages[-1].digest == obs2.current.messages[1].digest
    assert held[0].cancelled()  # parsed here: the worker's job is withdrawn
    await asyncio.sleep(0.02)
    assert len(t._recs[obs.conversation_id].digests) == 3  # user, reply, user: not twice
    await t.close()


async def test_a_read_records_a_waiting_reply(held: list[Any]) -> None:
    t, obs, _ = await _replied()
    rec = t.get(obs.conversation_id)
    assert rec is not None and rec.timeline[-1].status == "ok" and len(rec.digests) == 2
    await t.close()


def _events(pieces: list[str]) -> list[bytes]:
    return ([b'data: {"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n']
            + [b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}).encode() + b"\n\n"
               for p in pieces]
            + [b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"])


async def _streamed(pieces: list[str]) -> tuple[Any, Any, Any]:
    """A tracker, a streamed first request's observation, and its tap fed the stream
    of ``pieces`` (each event passed through unchanged)."""
    t = await new_tracker()
    obs = await t.observe(exchange({**body(MSGS), "stream": True}))
    assert obs is not None
    tap = t.tap(obs)
    for ev in _events(pieces):
        assert tap.feed_event(ev) == [ev]
    return t, obs, tap


@pytest.mark.parametrize("drained", [False, True])
async def test_a_long_streams_reply_is_assembled_in_a_thread_the_same(monkeypatch: pytest.MonkeyPatch,
                                                                     drained: bool) -> None:
    monkeypatch.setattr(replytap, "ASSEMBLE_BYTES", 64)  # "long" past 64 bytes of events
    monkeypatch.setattr(replytap, "_can_offload", lambda: False)  # no worker process here
    pieces = [f"piece {i} of revision 4f1c2b9e; " for i in range(40)]
    t, obs, tap = await _streamed(pieces)
    assert tap._asm is not None  # parsed as it streamed
    assert tap.finish() == []
    if drained:  # read at once: assembled here, or waited for from the thread
        rec = t.get(obs.conversation_id)
    else:
        await asyncio.sleep(0.1)
        rec = t._recs[obs.conversation_id]
    assert rec is not None and rec.timeline[-1].status == "ok" and rec.timeline[-1].reply_messages == 1
    hist = await t.history(obs.conversation_id)
    assert hist is not None and hist.messages[-1].text == "".join(pieces)
    await t.close()


@pytest.mark.parametrize(("piece", "close"), [(40, None), (1 << 18, None), (1 << 18, "client_closed")])
async def test_a_long_streams_reply_is_assembled_in_the_worker_process_the_same(
        monkeypatch: pytest.MonkeyPatch, piece: int, close: str | None) -> None:
    """Its events kept whole and assembled in the worker (through shared memory past
    1 MiB): the same reply, recorded once the worker is done; a stream cut short too."""
    from proxy.state import offload

    if not offload.can_offload():
        pytest.skip("no worker process can run here")
    monkeypatch.setattr(replytap, "ASSEMBLE_BYTES", 64)
    pieces = [f"piece {i} of revision 4f1c2b9e; " + "x" * piece for i in range(8)]
    t, obs, tap = await _streamed(pieces)
    assert tap._asm is None and tap._keep  # kept whole, not parsed here
    if close is None:
        assert tap.finish() == []
    else:
        tap.closed(close)
    for _ in range(600):
        rec = t._recs[obs.conversation_id]
        if rec.timeline[-1].status is not None and rec.timeline[-1].reply_messages:
            break
        await asyncio.sleep(0.05)
    assert rec.timeline[-1].status == (close or "ok") and rec.timeline[-1].reply_messages == 1
    hist = await t.history(obs.conversation_id)
    assert hist is not None and hist.messages[-1].text == "".join(pieces)
    assert offload._REQUEST._pool is not None  # it was the worker's
    await t.close()
