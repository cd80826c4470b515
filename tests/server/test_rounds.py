"""``Decision.rounds``: the server asks upstream again and relays one response.

A generic rounds object (not the gate's recall) drives the seam: it asks upstream again
with a changed body, and the tests check what upstream received, what the client got,
and how failures and disconnects end the exchange.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx
import openai
import pytest

from proxy.server.hooks import Decision, Exchange, FollowUp, Rounds
from proxy.server.rounds import MAX_FOLLOW_UPS
from tests.support import ProxyStack
from tests.support.fake_upstream import Call, FakeUpstream, Fault, Reply

MESSAGES: list[Any] = [{"role": "user", "content": "first"}]


def answer(call: Call) -> Reply:
    return Reply(text=f"answer to {call.last_user_text()}")


class Again:
    """Asks upstream again ``times`` times, each with the user message ``again N``;
    relays only the last round (a stream: only the last round's events)."""

    def __init__(self, times: int = 1, *, before_follow_up: Any = None, fail: str | None = None) -> None:
        self.times = times
        self.asked = 0
        self.before_follow_up = before_follow_up
        self.fail = fail
        self.statuses: list[int] = []
        self.closed_reason: str | None = None
        self.events: list[bytes] = []

    def _next(self) -> FollowUp:
        self.asked += 1
        if self.before_follow_up is not None:
            self.before_follow_up()
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"again {self.asked}"}]}
        if self.stream:
            body["stream"] = True
        return FollowUp(json.dumps(body).encode())

    stream = False

    async def after_json(self, status: int, body: bytes) -> bytes | FollowUp:
        if self.fail == "json":
            raise RuntimeError("rounds broke")
        self.statuses.append(status)
        if self.asked < self.times and status == 200:
            return self._next()
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        if self.fail == "event":
            raise RuntimeError("rounds broke")
        self.events.append(raw_event)
        return [raw_event] if self.asked == self.times else []

    async def after_stream(self) -> list[bytes] | FollowUp:
        if self.asked < self.times:
            return self._next()
        return []

    def headers(self) -> Mapping[str, str]:
        return {"x-test-rounds": str(self.asked + 1)}

    def closed(self, reason: str) -> None:
        self.closed_reason = reason


class Interceptor:
    def __init__(self, rounds: Again) -> None:
        self.rounds = rounds
        self.seen: list[Exchange] = []

    async def before(self, ex: Exchange) -> Decision:
        self.seen.append(ex)
        self.rounds.stream = ex.stream
        return Decision(rounds=self.rounds)


@pytest.fixture
def rstack() -> Any:
    s = ProxyStack(fake=FakeUpstream(answer))
    yield s
    s.close()


def client(stack: ProxyStack, timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-test-rounds", base_url=stack.openai_base_url, max_retries=0, timeout=timeout)


def test_the_http_handler_supports_rounds_and_the_object_is_a_rounds(rstack: ProxyStack) -> None:
    r = Again(0)
    assert isinstance(r, Rounds)
    rstack.interceptor = it = Interceptor(r)
    client(rstack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert it.seen[0].supports_rounds is True


def test_json_follow_up_reaches_upstream_and_only_its_answer_reaches_the_client(rstack: ProxyStack) -> None:
    rstack.interceptor = Interceptor(r := Again(2))
    raw = client(rstack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == "answer to again 2"
    sent = [q.json["messages"][0]["content"] for q in rstack.fake.model_requests()]
    assert sent == ["first", "again 1", "again 2"]
    # the same method, path and headers (the client's credential) each round
    assert {q.headers["authorization"] for q in rstack.fake.model_requests()} == {"Bearer sk-test-rounds"}
    assert raw.headers["x-test-rounds"] == "3" and r.statuses == [200, 200, 200]
    # the last round's upstream headers (the fake derives its request id from the body)
    last = rstack.fake.model_requests()[-1]
    seed = hashlib.sha256(f"POST {last.path}\n".encode() + last.body).hexdigest()[:24]
    assert raw.headers["x-request-id"] == f"req_{seed}"
    assert raw.headers["x-compaction-gate-action"] == "none"


def test_sse_rounds_reach_the_client_as_one_stream(rstack: ProxyStack) -> None:
    rstack.interceptor = Interceptor(r := Again(1))
    text = ""
    with client(rstack).chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    ) as resp:
        assert resp.headers["x-test-rounds"] == "1"  # asked before the first event went out
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                text += "".join(c["delta"].get("content") or "" for c in chunk["choices"])
    assert text == "answer to again 1"
    assert len(rstack.fake.model_requests()) == 2 and r.asked == 1
    assert r.closed_reason is None


def test_a_follow_up_answered_with_an_error_passes_it_through(rstack: ProxyStack) -> None:
    rstack.interceptor = Interceptor(Again(1, before_follow_up=lambda: rstack.fake.inject(Fault(status=429))))
    with pytest.raises(openai.RateLimitError) as ei:
        client(rstack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert ei.value.status_code == 429 and "fake upstream error 429" in ei.value.message


def test_a_streamed_follow_up_answered_with_an_error_ends_the_stream_with_it(rstack: ProxyStack) -> None:
    rounds = Again(1, before_follow_up=lambda: rstack.fake.inject(Fault(status=500, body={"error": {"message": "overloaded now"}})))
    rstack.interceptor = Interceptor(rounds)
    with pytest.raises(openai.APIError) as ei:
        for _ in client(rstack).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass
    assert "overloaded now" in str(ei.value)
    assert rounds.closed_reason == "upstream_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_during_a_follow_up_cancels_it_upstream(rstack: ProxyStack, stream: bool) -> None:
    rounds = Again(1, before_follow_up=lambda: rstack.fake.inject(Fault(delay=30)))
    rstack.interceptor = Interceptor(rounds)
    with pytest.raises((openai.APITimeoutError, httpx.TimeoutException)):
        out = client(rstack, timeout=1.0).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=stream)
        for _ in out if stream else ():
            pass
    assert rstack.fake.wait_for_disconnects_sync(1, timeout=10)
    gone = rstack.fake.disconnects[0]
    assert gone.json["messages"][0]["content"] == "again 1"  # the follow-up, not the first round
    for _ in range(100):
        if rounds.closed_reason:
            break
        time.sleep(0.05)
    assert rounds.closed_reason == "client_disconnected"


@pytest.mark.parametrize("fail", ["json", "event"])
def test_rounds_that_raise_are_disabled_and_the_response_passes(rstack: ProxyStack, fail: str) -> None:
    rstack.interceptor = Interceptor(Again(1, fail=fail))
    c = client(rstack)
    if fail == "json":
        got = c.chat.completions.create(model="gpt-4o", messages=MESSAGES).choices[0].message.content
    else:
        got = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True) if ch.choices)
    assert got == "answer to first"
    assert len(rstack.fake.model_requests()) == 1


def test_the_server_caps_follow_ups_whatever_the_rounds_ask(rstack: ProxyStack) -> None:
    rstack.interceptor = Interceptor(r := Again(10_000))
    out = client(rstack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(rstack.fake.model_requests()) == 1 + MAX_FOLLOW_UPS
    assert out.choices[0].message.content == f"answer to again {MAX_FOLLOW_UPS}"
    assert r.closed_reason == "rounds_limit"
