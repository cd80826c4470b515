"""Upstream failures and bad input: clear dialect errors, and the proxy keeps serving."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from proxy.config import ServerSettings
from tests.support import ProxyStack
from tests.support.fake_upstream import Fault

CHAT = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
CHAT_STREAM = json.dumps(
    {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "a b c d e f g"}]}
).encode()
MSG = json.dumps(
    {"model": "claude-fake-1", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
).encode()
OPENAI_H = {"content-type": "application/json", "authorization": "Bearer sk-test"}
ANTHROPIC_H = {
    "content-type": "application/json",
    "x-api-key": "sk-ant",
    "anthropic-version": "2023-06-01",
}


async def request(
    method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, aiohttp.typedefs.LooseHeaders, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, url, data=body, headers=headers or OPENAI_H) as r,
    ):
        raw = await r.read()
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw
        return r.status, r.headers, parsed


async def assert_still_serving(stack: ProxyStack) -> None:
    status, _, body = await request("POST", stack.openai_base_url + "/chat/completions", CHAT)
    assert status == 200, body
    status, _, body = await request("GET", stack.url + "/healthz")
    assert (status, body["status"]) == (200, "ok")


def openai_error(body: Any, code: str) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    err: dict[str, Any] = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["message"]
    return err


def anthropic_error(body: Any, etype: str) -> dict[str, Any]:
    assert body["type"] == "error", body
    err: dict[str, Any] = body["error"]
    assert err["type"] == etype and err["message"]
    return err


@pytest.fixture
def fast_stack(make_stack: Callable[..., ProxyStack]) -> ProxyStack:
    return make_stack(server=ServerSettings(read_timeout=0.4, connect_timeout=1.0))


# ------------------------------------------------------------------ upstream side


async def test_upstream_timeout_gives_504_in_each_dialect(fast_stack: ProxyStack) -> None:
    fast_stack.fake.inject(Fault(delay=1.5), times=2)
    status, headers, body = await request(
        "POST", fast_stack.openai_base_url + "/chat/completions", CHAT
    )
    assert status == 504
    openai_error(body, "upstream_timeout")
    assert headers["x-compaction-gate-action"] == "none"
    status, _, body = await request("POST", fast_stack.url + "/v1/messages", MSG, ANTHROPIC_H)
    assert status == 504
    anthropic_error(body, "timeout_error")
    await assert_still_serving(fast_stack)


async def test_connection_refused_gives_502_and_recovers(stack: ProxyStack) -> None:
    port = int(stack.fake.url.rsplit(":", 1)[1])
    stack.bg.run(stack.fake.close())
    status, _, body = await request("POST", stack.openai_base_url + "/chat/completions", CHAT)
    assert status == 502
    assert "connect" in openai_error(body, "upstream_unreachable")["message"].lower()
    status, _, body = await request("POST", stack.url + "/v1/messages", MSG, ANTHROPIC_H)
    assert status == 502
    anthropic_error(body, "api_error")
    stack.bg.run(stack.fake.start(port=port))
    await assert_still_serving(stack)


async def test_upstream_drops_connection_before_answering(stack: ProxyStack) -> None:
    stack.fake.inject(Fault(drop_connection=True))
    status, _, body = await request("POST", stack.openai_base_url + "/chat/completions", CHAT)
    assert status == 502
    openai_error(body, "upstream_error")
    await assert_still_serving(stack)


def test_sdk_sees_error_when_upstream_dies_mid_stream(stack: ProxyStack) -> None:
    stack.fake.inject(Fault(drop_after_events=3))
    client = openai.OpenAI(api_key="sk", base_url=stack.openai_base_url, max_retries=0)
    received = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "a b c d e f"}], stream=True
        ):
            received.append(chunk)  # noqa: PERF402 - partial results before the error
    assert len(received) == 3
    assert client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "ok"}]
    )


def test_anthropic_sdk_sees_error_event_on_mid_stream_timeout(
    make_stack: Callable[..., ProxyStack],
) -> None:
    stack = make_stack(server=ServerSettings(read_timeout=0.4))
    stack.fake.inject(Fault(stall_after_events=2))
    client = anthropic.Anthropic(api_key="sk", base_url=stack.url, max_retries=0)
    types = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in client.messages.create(
            model="claude-fake-1",
            max_tokens=5,
            messages=[{"role": "user", "content": "x y z"}],
            stream=True,
        ):
            types.append(event.type)
    assert types == ["message_start", "content_block_start"]
    assert "did not respond in time" in str(info.value)
    # the proxy closed the stalled upstream request
    assert stack.fake.wait_for_disconnects_sync(1, timeout=5)


async def test_client_disconnect_mid_stream_closes_upstream(stack: ProxyStack) -> None:
    stack.fake.inject(Fault(stall_after_events=2))
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            stack.openai_base_url + "/chat/completions", data=CHAT_STREAM, headers=OPENAI_H
        )
        assert resp.status == 200
        first = await resp.content.readline()
        assert first.startswith(b"data: ")
        resp.close()  # client goes away while upstream is still streaming
    assert await stack.fake.wait_for_disconnects(1, timeout=5)
    assert stack.fake.disconnects[0].path == "/v1/chat/completions"
    await assert_still_serving(stack)


async def test_client_disconnect_while_waiting_for_headers_closes_upstream(
    stack: ProxyStack,
) -> None:
    stack.fake.inject(Fault(delay=30))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as s:
        with pytest.raises(TimeoutError):
            await s.post(stack.openai_base_url + "/chat/completions", data=CHAT, headers=OPENAI_H)
    assert await stack.fake.wait_for_disconnects(1, timeout=5)
    await assert_still_serving(stack)


# ----------------------------------------------------------------------- bad input


async def test_invalid_json(stack: ProxyStack) -> None:
    status, headers, body = await request(
        "POST", stack.openai_base_url + "/chat/completions", b'{"model": '
    )
    assert status == 400
    openai_error(body, "invalid_json")
    assert headers["x-compaction-gate-conversation"] == "unknown"
    status, _, body = await request("POST", stack.url + "/v1/messages", b"[1,2]", ANTHROPIC_H)
    assert status == 400
    anthropic_error(body, "invalid_request_error")
    status, _, body = await request("POST", stack.url + "/v1/messages", b"\xff\xfe", ANTHROPIC_H)
    assert status == 400
    assert stack.fake.requests == []
    await assert_still_serving(stack)


async def test_wrong_content_type(stack: ProxyStack) -> None:
    headers = {**OPENAI_H, "content-type": "text/plain"}
    status, _, body = await request(
        "POST", stack.openai_base_url + "/chat/completions", CHAT, headers
    )
    assert status == 415
    assert "text/plain" in openai_error(body, "unsupported_content_type")["message"]
    assert stack.fake.requests == []
    await assert_still_serving(stack)


async def test_body_over_limit(make_stack: Callable[..., ProxyStack]) -> None:
    stack = make_stack(server=ServerSettings(max_body_bytes=1000))
    big = json.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 5000}]}
    ).encode()
    status, _, body = await request("POST", stack.openai_base_url + "/chat/completions", big)
    assert status == 413
    openai_error(body, "request_too_large")

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: limit enforced while reading
        for i in range(0, len(big), 500):
            yield big[i : i + 500]

    async with (
        aiohttp.ClientSession() as s,
        s.post(stack.url + "/v1/messages", data=chunked(), headers=ANTHROPIC_H) as r,
    ):
        assert r.status == 413
        anthropic_error(await r.json(), "request_too_large")
    assert stack.fake.requests == []
    await assert_still_serving(stack)


def test_default_limit_holds_a_million_token_history() -> None:
    assert ServerSettings().max_body_bytes >= 32 * 1024 * 1024


async def test_unknown_route(stack: ProxyStack) -> None:
    status, headers, body = await request("POST", stack.url + "/chat/completions", CHAT)
    assert status == 404
    err = openai_error(body, "unknown_route")
    assert "/v1" in err["message"]
    assert headers["x-compaction-gate-action"] == "none"
    status, _, body = await request("GET", stack.url + "/nope", None, ANTHROPIC_H)
    assert status == 404
    anthropic_error(body, "not_found_error")
    status, _, body = await request("POST", stack.url + "/healthz", b"")
    assert status == 405
    await assert_still_serving(stack)


async def test_unknown_routes_are_logged_and_counted_under_a_bounded_label(stack: ProxyStack, json_log: Any) -> None:
    from tests.support.logs import access

    for n in range(3):  # distinct paths must not become distinct label values
        status, _, _ = await request("POST", stack.url + f"/chat/completions/{n}", CHAT)
        assert status == 404
    records = [r for r in access(json_log, expect=3) if r["status"] == 404]
    assert len(records) == 3 and {r["error"] for r in records} == {"unknown_route"}
    # the route is a template, never the raw path (which may carry an id or a key)
    assert {r["route"] for r in records} == {"{unknown}"} and records[0]["method"] == "POST"
    _, _, text = await request("GET", stack.url + "/metrics", None)
    text = text.decode() if isinstance(text, bytes) else str(text)
    counted = [line for line in text.splitlines() if line.startswith("compaction_gate_requests_total{") and 'status="404"' in line]
    assert counted == ['compaction_gate_requests_total{route="other",status="404"} 3.0']


def test_sdk_with_wrong_base_url_gets_clear_not_found(stack: ProxyStack) -> None:
    client = openai.OpenAI(api_key="sk", base_url=stack.url, max_retries=0)  # forgot /v1
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "unknown_route"
