"""The interception hook: Exchange contents, decisions, rejections, taps, fail-open."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from proxy.config import GateSettings
from proxy.server.hooks import Decision, Exchange, Reject, ResponseTap
from tests.support import ProxyStack
from tests.support.fake_upstream import Fault

MESSAGES: list[Any] = [{"role": "user", "content": "deploy then roll back to rev 3f2a9c1b7d4e"}]


FORWARD = Decision()


class Recorder:
    """Interceptor returning a fixed decision and recording what it saw."""

    def __init__(self, decision: Decision | Callable[[Exchange], Decision] = FORWARD) -> None:
        self.decision = decision
        self.seen: list[Exchange] = []

    async def before(self, ex: Exchange) -> Decision:
        self.seen.append(ex)
        return self.decision(ex) if callable(self.decision) else self.decision


class Boom:
    def __init__(self, message: str) -> None:
        self.message = message
        self.calls = 0

    async def before(self, ex: Exchange) -> Decision:
        self.calls += 1
        raise RuntimeError(self.message)


class InjectBeforeEnd:
    """Injects one extra event before the stream's terminal event."""

    def __init__(self, terminal: bytes, injected: bytes) -> None:
        self.terminal = terminal
        self.injected = injected
        self.events: list[bytes] = []
        self.finished = False
        self.closed_reason: str | None = None

    def feed_json(self, status: int, body: bytes) -> bytes:
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        self.events.append(raw_event)
        if self.terminal in raw_event:
            return [self.injected, raw_event]
        return [raw_event]

    def finish(self) -> list[bytes]:
        self.finished = True
        return []

    def closed(self, reason: str) -> None:
        self.closed_reason = reason


class HoldAll:
    """Holds every event and releases them all in finish()."""

    def __init__(self) -> None:
        self.held: list[bytes] = []

    def feed_json(self, status: int, body: bytes) -> bytes:
        return body

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        self.held.append(raw_event)
        return []

    def finish(self) -> list[bytes]:
        return self.held

    def closed(self, reason: str) -> None:
        pass


class RewriteJson:
    def __init__(self) -> None:
        self.statuses: list[int] = []

    def feed_json(self, status: int, body: bytes) -> bytes:
        self.statuses.append(status)
        data = json.loads(body)
        data["choices"][0]["message"]["content"] += " [gate: kept 3f2a9c1b7d4e]"
        return json.dumps(data).encode()

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        return [raw_event]

    def finish(self) -> list[bytes]:
        return []

    def closed(self, reason: str) -> None:
        pass


class ExplodingTap(HoldAll):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after
        self.n = 0
        self.closed_reason: str | None = None

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        self.n += 1
        if self.n > self.after:
            raise ValueError("tap bug")
        return [raw_event]

    def finish(self) -> list[bytes]:
        return []

    def closed(self, reason: str) -> None:
        self.closed_reason = reason


def oa(stack: ProxyStack, *, direct: bool = False, retries: int = 0) -> openai.OpenAI:
    base = stack.fake.openai_base_url if direct else stack.openai_base_url
    return openai.OpenAI(api_key="sk-live-SECRET-123456", base_url=base, max_retries=retries)


def an(stack: ProxyStack, *, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="sk-ant-SECRET-654321", base_url=stack.url, max_retries=retries
    )


def test_taps_satisfy_protocol() -> None:
    assert isinstance(InjectBeforeEnd(b"", b""), ResponseTap)
    assert isinstance(HoldAll(), ResponseTap)


# --------------------------------------------------------------------- Exchange


def test_exchange_describes_request_without_secrets(stack: ProxyStack) -> None:
    rec = Recorder()
    stack.interceptor = rec
    oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True).close()
    an(stack).messages.create(model="claude-fake-1", max_tokens=5, messages=MESSAGES)
    oa(stack).models.list()
    chat, msg, models = rec.seen
    assert (chat.dialect, chat.kind, chat.stream, chat.model) == ("openai", "chat", True, "gpt-4o")
    assert chat.path == "/v1/chat/completions" and chat.method == "POST"
    assert chat.json["messages"] == MESSAGES
    assert json.loads(chat.body) == chat.json
    assert chat.tenant == hashlib.sha256(b"sk-live-SECRET-123456").hexdigest()[:16]
    assert (msg.dialect, msg.kind, msg.stream, msg.model) == (
        "anthropic",
        "messages",
        False,
        "claude-fake-1",
    )
    assert msg.tenant == hashlib.sha256(b"sk-ant-SECRET-654321").hexdigest()[:16]
    assert "anthropic-version" in msg.headers
    assert (models.kind, models.json, models.body, models.method) == ("models", None, b"", "GET")
    for ex in rec.seen:
        assert ex.request_id
        assert all(k == k.lower() for k in ex.headers)
        assert "authorization" not in ex.headers and "x-api-key" not in ex.headers
        assert "SECRET" not in repr(ex.headers) and "SECRET" not in ex.tenant


async def test_exchange_for_raw_route(stack: ProxyStack) -> None:
    rec = Recorder()
    stack.interceptor = rec
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            stack.openai_base_url + "/echo/x?q=1",
            data=b"not json",
            headers={"content-type": "text/plain", "x-api-key": "k-1234", "anthropic-version": "1"},
        ) as r,
    ):
        assert r.status == 200
    (ex,) = rec.seen
    assert (ex.kind, ex.dialect, ex.json, ex.body, ex.query) == (
        "raw",
        "anthropic",
        None,
        b"not json",
        "q=1",
    )


# --------------------------------------------------------------------- decisions


def test_body_replacement_reaches_upstream(stack: ProxyStack) -> None:
    def replace(ex: Exchange) -> Decision:
        data = dict(ex.json)
        data["messages"] = [{"role": "user", "content": "replaced by the gate: keep 3f2a9c1b7d4e"}]
        return Decision(
            action="reinject", conversation_id="conv-42", body=json.dumps(data).encode()
        )

    stack.interceptor = Recorder(replace)
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: replaced by the gate: keep 3f2a9c1b7d4e"
    sent = stack.fake.requests[-1]
    assert json.loads(sent.body)["messages"][0]["content"].startswith("replaced by the gate")
    assert int(sent.headers["content-length"]) == len(sent.body)
    assert raw.headers["x-compaction-gate-action"] == "reinject"
    assert raw.headers["x-compaction-gate-conversation"] == "conv-42"


def test_decision_headers_added(stack: ProxyStack) -> None:
    stack.interceptor = Recorder(
        Decision(action="warn", headers={"x-compaction-gate-warning": "dropped 1"})
    )
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.headers["x-compaction-gate-warning"] == "dropped 1"
    assert raw.headers["x-compaction-gate-action"] == "warn"


REJECT = Reject(
    400,
    "Compaction dropped binding '3f2a9c1b7d4e' (migration revision). Re-send with it kept verbatim.",
)


def test_rejection_openai_dialect_not_retried(stack: ProxyStack) -> None:
    rec = Recorder(Decision(action="reject", conversation_id="c1", reject=REJECT))
    stack.interceptor = rec
    with pytest.raises(openai.BadRequestError) as info:
        oa(stack, retries=3).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    err = info.value
    assert err.code == "destructive_compaction"
    assert err.type == "invalid_request_error"
    assert "3f2a9c1b7d4e" in err.message
    assert err.response.headers["x-should-retry"] == "false"
    assert err.response.headers["x-compaction-gate-action"] == "reject"
    assert err.response.headers["x-compaction-gate-conversation"] == "c1"
    assert len(rec.seen) == 1  # the SDK did not retry
    assert stack.fake.requests == []  # nothing reached upstream


def test_rejection_anthropic_dialect_not_retried(stack: ProxyStack) -> None:
    rec = Recorder(Decision(action="reject", reject=REJECT))
    stack.interceptor = rec
    with pytest.raises(anthropic.BadRequestError) as info:
        an(stack, retries=3).messages.create(model="claude-fake-1", max_tokens=5, messages=MESSAGES)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "3f2a9c1b7d4e" in body["error"]["message"]
    assert len(rec.seen) == 1
    assert stack.fake.requests == []


def test_retryable_status_rejection_still_not_retried(stack: ProxyStack) -> None:
    rec = Recorder(
        Decision(action="reject", reject=Reject(503, "gate says no", code="gate_unavailable"))
    )
    stack.interceptor = rec
    with pytest.raises(openai.InternalServerError):
        oa(stack, retries=3).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(rec.seen) == 1


# --------------------------------------------------------------------------- taps


def test_tap_injects_openai_event_before_done(stack: ProxyStack) -> None:
    injected_chunk = {
        "id": "chatcmpl-gate",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": " [gate note]"}, "finish_reason": None}],
    }
    tap = InjectBeforeEnd(b"[DONE]", f"data: {json.dumps(injected_chunk)}\n\n".encode())
    stack.interceptor = Recorder(Decision(action="gate", tap=tap))
    direct = [
        c.model_dump()
        for c in oa(stack, direct=True).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        )
    ]
    proxied = [
        c.model_dump()
        for c in oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    ]
    assert proxied[:-1] == direct
    assert proxied[-1]["id"] == "chatcmpl-gate"
    assert proxied[-1]["choices"][0]["delta"]["content"] == " [gate note]"
    # the SDK stops at [DONE]; the proxy calls finish() when upstream's stream ends,
    # which under load can be a moment later
    deadline = time.monotonic() + 5
    while not tap.finished and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tap.finished and tap.closed_reason is None
    assert stack.fake.requests[-1].headers["accept-encoding"] == "identity"


def test_tap_injects_anthropic_text_delta(stack: ProxyStack) -> None:
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": " [kept: 3f2a9c1b7d4e]"},
    }
    tap = InjectBeforeEnd(
        b"event: content_block_stop",
        f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n".encode(),
    )
    stack.interceptor = Recorder(Decision(action="gate", tap=tap))
    with an(stack).messages.stream(model="claude-fake-1", max_tokens=50, messages=MESSAGES) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.endswith(" [kept: 3f2a9c1b7d4e]")
    assert final.content[0].text == text
    assert any(e.startswith(b"event: message_stop") for e in tap.events)


def test_tap_holding_events_until_finish(stack: ProxyStack) -> None:
    stack.interceptor = Recorder(Decision(tap=HoldAll()))
    direct = [
        c.model_dump()
        for c in oa(stack, direct=True).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    ]
    proxied = [
        c.model_dump()
        for c in oa(stack).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    ]
    assert proxied == direct


async def test_tap_sees_whole_events_across_odd_chunking(stack: ProxyStack) -> None:
    stack.fake.write_size = 5
    stack.fake.line_ending = "\r\n"
    tap = HoldAll()
    stack.interceptor = Recorder(Decision(tap=tap))
    body = json.dumps({"model": "gpt-4o", "stream": True, "messages": MESSAGES}).encode()
    async with aiohttp.ClientSession() as s:
        async with s.post(
            stack.fake.openai_base_url + "/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        ) as r:
            direct = await r.read()
        async with s.post(
            stack.openai_base_url + "/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        ) as r:
            proxied = await r.read()
    assert proxied == direct
    assert all(e.startswith(b"data: ") and e.endswith(b"\r\n\r\n") for e in tap.held)
    assert b"".join(tap.held) == direct


def test_tap_rewrites_json_response(stack: ProxyStack) -> None:
    tap = RewriteJson()
    stack.interceptor = Recorder(Decision(action="gate", tap=tap))
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.endswith("[gate: kept 3f2a9c1b7d4e]")
    assert int(raw.headers["content-length"]) == len(raw.content)
    assert tap.statuses == [200]


class Observer(RewriteJson):
    """An observe-only tap (``observe_only``): records the bodies it is fed."""

    observe_only = True

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.bodies: list[bytes] = []
        self.fail = fail

    def feed_json(self, status: int, body: bytes) -> bytes:
        self.statuses.append(status)
        self.bodies.append(body)
        if self.fail:
            raise RuntimeError("broken promise")
        return body


def test_observe_only_tap_sees_the_json_response_exactly(stack: ProxyStack) -> None:
    tap = Observer()
    stack.interceptor = Recorder(Decision(tap=tap))
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("echo: deploy")
    # fed right after the response was handed to the client (so, on a loaded machine,
    # possibly a moment after the client has it: wait for it, bounded)
    second = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    deadline = time.monotonic() + 10
    while len(tap.statuses) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tap.statuses == [200, 200] and tap.bodies == [raw.content, second.content]


def test_observe_only_tap_failure_is_logged_and_harmless(
    stack: ProxyStack, caplog: pytest.LogCaptureFixture
) -> None:
    stack.interceptor = Recorder(Decision(tap=Observer(fail=True)))
    caplog.set_level(logging.ERROR, logger="compaction_gate")
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("echo: deploy")
    oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES)  # the loop moved on
    failures = [r for r in caplog.records if r.name == "compaction_gate.server"]
    assert failures and failures[0].fields["where"] == "tap.feed_json"  # type: ignore[attr-defined]


def test_observe_only_tap_fed_before_sending_when_failing_closed(make_stack: Callable[..., ProxyStack]) -> None:
    stack = make_stack(gate=GateSettings(fail_open=False))
    stack.interceptor = Recorder(Decision(tap=Observer(fail=True)))
    with pytest.raises(openai.APIStatusError) as info:
        oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 502 and info.value.code == "gate_error"


async def test_tap_bypassed_for_encoded_body(stack: ProxyStack) -> None:
    tap = InjectBeforeEnd(b"x", b"y")
    stack.interceptor = Recorder(Decision(tap=tap))
    raw = gzip.compress(b'{"ok":true}')
    stack.fake.inject(Fault(status=200, body=raw, headers={"content-encoding": "gzip"}))
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(
            stack.openai_base_url + "/chat/completions",
            data=json.dumps({"model": "m", "messages": []}),
            headers={"content-type": "application/json"},
        ) as r,
    ):
        assert await r.read() == raw
    assert tap.closed_reason == "content_encoding"


async def test_tap_closed_on_client_disconnect(stack: ProxyStack) -> None:
    tap = InjectBeforeEnd(b"[DONE]", b"")
    stack.interceptor = Recorder(Decision(tap=tap))
    stack.fake.inject(Fault(stall_after_events=2))
    body = json.dumps({"model": "gpt-4o", "stream": True, "messages": MESSAGES}).encode()
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            stack.openai_base_url + "/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        )
        await resp.content.readline()
        resp.close()
    assert await stack.fake.wait_for_disconnects(1)
    assert tap.closed_reason == "client_disconnected"
    assert not tap.finished


def test_tap_exception_mid_stream_fails_open(stack: ProxyStack) -> None:
    tap = ExplodingTap(after=2)
    stack.interceptor = Recorder(Decision(tap=tap))
    direct = [
        c.model_dump()
        for c in oa(stack, direct=True).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        )
    ]
    proxied = [
        c.model_dump()
        for c in oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    ]
    assert proxied == direct
    assert tap.closed_reason == "tap_error"


# ----------------------------------------------------------------------- failures


def test_interceptor_exception_fails_open(
    stack: ProxyStack, caplog: pytest.LogCaptureFixture
) -> None:
    boom = Boom("gate exploded while reading sk-live-SECRET-123456")
    stack.interceptor = boom
    caplog.set_level(logging.ERROR, logger="compaction_gate")
    raw = oa(stack).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content.startswith("echo: deploy")
    assert raw.headers["x-compaction-gate-action"] == "none"
    assert json.loads(stack.fake.requests[-1].body)["messages"] == MESSAGES
    failures = [r for r in caplog.records if r.name == "compaction_gate.server"]
    assert failures and failures[0].fields["error_type"] == "RuntimeError"  # type: ignore[attr-defined]
    assert "sk-live-SECRET-123456" not in repr(failures[0].__dict__)


def test_interceptor_exception_fail_closed(make_stack: Callable[..., ProxyStack]) -> None:
    stack = make_stack(gate=GateSettings(fail_open=False))
    stack.interceptor = Boom("nope")
    with pytest.raises(openai.APIStatusError) as info:
        oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 502
    assert info.value.code == "gate_error"
    with pytest.raises(anthropic.APIStatusError) as ainfo:
        an(stack).messages.create(model="claude-fake-1", max_tokens=5, messages=MESSAGES)
    assert ainfo.value.status_code == 502
    assert stack.fake.requests == []


def test_interceptor_returning_garbage_fails_open(stack: ProxyStack) -> None:
    class Bad:
        async def before(self, ex: Exchange) -> Decision:
            return "forward please"  # type: ignore[return-value]

    stack.interceptor = Bad()
    assert oa(stack).chat.completions.create(model="gpt-4o", messages=MESSAGES).choices


async def test_gate_headers_on_every_kind_of_response(stack: ProxyStack) -> None:
    stack.interceptor = Recorder(Decision(action="warn", conversation_id="c-9"))
    stack.fake.inject(Fault(status=429, path="/v1/embeddings"))
    urls = [
        ("POST", "/chat/completions", json.dumps({"model": "m", "messages": [], "stream": True})),
        ("POST", "/embeddings", json.dumps({"model": "m", "input": "x"})),
        ("GET", "/models", None),
        ("POST", "/echo/raw", "raw text"),
    ]
    async with aiohttp.ClientSession() as s:
        for method, path, body in urls:
            async with s.request(
                method,
                stack.openai_base_url + path,
                data=body,
                headers={"content-type": "application/json"},
            ) as r:
                await r.read()
                assert r.headers["x-compaction-gate-conversation"] == "c-9", path
                assert r.headers["x-compaction-gate-action"] == "warn", path
                assert float(r.headers["x-compaction-gate-overhead-ms"]) >= 0, path
