"""Decision.after_send: interceptor work deferred until the request is upstream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.hooks import Decision, Exchange
from tests.support import ProxyStack
from tests.support.fake_upstream import Fault

MESSAGES: list[Any] = [{"role": "user", "content": "deploy then roll back to rev 3f2a9c1b7d4e"}]


class LateTap:
    observe_only = True

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.closed_reason: str | None = None

    def feed_json(self, status: int, body: bytes) -> bytes:
        self.bodies.append(body)
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        return [raw_event]

    def finish(self) -> list[bytes]:
        return []

    def closed(self, reason: str) -> None:
        self.closed_reason = reason


class Deferring:
    """Interceptor deferring ``work`` (given the exchange) with ``after_send``, for chat
    requests only."""

    def __init__(self, work: Callable[[Exchange], Awaitable[Decision]]) -> None:
        self.work = work
        self.finished: list[Decision] = []

    async def before(self, ex: Exchange) -> Decision:
        if ex.kind != "chat":
            return Decision()

        async def later() -> Decision:
            d = await self.work(ex)
            self.finished.append(d)
            return d

        return Decision(after_send=later)


def oa(stack: ProxyStack) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-live-SECRET-123456", base_url=stack.openai_base_url, max_retries=0)


async def _wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.001)
    return True


def test_deferred_work_runs_while_upstream_has_the_request(stack: ProxyStack) -> None:
    """The work waits until upstream received the request: had the proxy waited for the
    work before sending, this would time out."""
    tap = LateTap()
    seen_upstream: list[bool] = []

    async def work(ex: Exchange) -> Decision:
        seen_upstream.append(await _wait_until(lambda: len(stack.fake.requests) == 1))
        return Decision(conversation_id="cv_late", headers={"x-late": "yes"}, tap=tap)

    stack.interceptor = Deferring(work)
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert seen_upstream == [True]
    assert raw.headers["x-compaction-gate-conversation"] == "cv_late"
    assert raw.headers["x-late"] == "yes"
    # the request went upstream untouched; the deferred tap saw the exact response
    assert json.loads(stack.fake.requests[0].body)["messages"] == MESSAGES
    oa(stack).models.list()  # the observe-only tap is fed in the loop step after sending
    assert tap.bodies == [raw.content]


def test_deferred_failure_is_logged_and_the_response_relayed(
    stack: ProxyStack, caplog: pytest.LogCaptureFixture
) -> None:
    async def work(ex: Exchange) -> Decision:
        raise RuntimeError("tracker broke on sk-live-SECRET-123456")

    stack.interceptor = Deferring(work)
    caplog.set_level(logging.ERROR, logger="compaction_gate")
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("echo: deploy")
    assert raw.headers["x-compaction-gate-conversation"] == "unknown"
    failures = [r for r in caplog.records if r.name == "compaction_gate.server"]
    assert [f.fields["where"] for f in failures] == ["after_send"]  # type: ignore[attr-defined]
    assert "sk-live-SECRET-123456" not in repr([f.__dict__ for f in failures])


def test_deferred_decision_may_not_change_the_request(
    stack: ProxyStack, caplog: pytest.LogCaptureFixture
) -> None:
    async def work(ex: Exchange) -> Decision:
        return Decision(conversation_id="cv_x", body=b'{"too": "late"}')

    stack.interceptor = Deferring(work)
    caplog.set_level(logging.ERROR, logger="compaction_gate")
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices
    assert raw.headers["x-compaction-gate-conversation"] == "unknown"
    failures = [r for r in caplog.records if r.name == "compaction_gate.server"]
    assert failures and failures[0].fields["error_type"] == "TypeError"  # type: ignore[attr-defined]


def test_deferred_tap_closed_when_upstream_fails(stack: ProxyStack) -> None:
    tap = LateTap()

    async def work(ex: Exchange) -> Decision:
        return Decision(conversation_id="cv_up", tap=tap)

    stack.interceptor = Deferring(work)
    stack.fake.inject(Fault(drop_connection=True))
    with pytest.raises(openai.APIStatusError) as info:
        oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 502
    assert info.value.response.headers["x-compaction-gate-conversation"] == "cv_up"
    assert tap.closed_reason == "upstream_error" and tap.bodies == []


async def test_deferred_work_finishes_when_the_client_goes_away(stack: ProxyStack) -> None:
    tap = LateTap()
    release = asyncio.Event()

    async def work(ex: Exchange) -> Decision:
        await release.wait()  # still working when the client disconnects
        return Decision(conversation_id="cv_gone", tap=tap)

    icp = Deferring(work)
    stack.interceptor = icp
    stack.fake.inject(Fault(delay=0.5))
    body = json.dumps({"model": "gpt-4o", "messages": MESSAGES}).encode()
    async with aiohttp.ClientSession() as s:
        with pytest.raises(asyncio.TimeoutError):
            async with s.post(stack.openai_base_url + "/chat/completions", data=body,
                              headers={"content-type": "application/json"},
                              timeout=aiohttp.ClientTimeout(total=0.2)):
                pass
    assert await stack.fake.wait_for_disconnects(1)
    stack.bg.loop.call_soon_threadsafe(release.set)
    assert await _wait_until(lambda: tap.closed_reason is not None)
    assert [d.conversation_id for d in icp.finished] == ["cv_gone"]
    assert tap.closed_reason == "client_disconnected"


def test_decision_with_both_after_send_and_a_tap_is_refused_and_fails_open(
    stack: ProxyStack, caplog: pytest.LogCaptureFixture
) -> None:
    early, late_tap = LateTap(), LateTap()

    async def work() -> Decision:
        return Decision(conversation_id="cv_never", tap=late_tap)

    class Both:
        async def before(self, ex: Exchange) -> Decision:
            return Decision(tap=early, after_send=work)

    stack.interceptor = Both()
    caplog.set_level(logging.ERROR, logger="compaction_gate")
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("echo: deploy")
    assert raw.headers["x-compaction-gate-conversation"] == "unknown"
    assert early.bodies == [] and late_tap.bodies == []  # neither tap is used
    failures = [r for r in caplog.records if r.name == "compaction_gate.server"]
    assert failures and failures[0].fields["where"] == "interceptor"  # type: ignore[attr-defined]
