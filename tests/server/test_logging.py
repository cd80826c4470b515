"""Structured access logs: one JSON line per request, never a secret."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from proxy.config import ProxyConfig, Upstream
from proxy.server.hooks import Decision, Exchange
from proxy.server.logs import configure_logging, redact, reset_logging
from tests.support import ProxyStack
from tests.support.fake_upstream import Fault
from tests.support.logs import access, lines

OPENAI_KEY = "sk-proj-LEAKCHECK-aaaaaaaaaaaaaaaa"
ANTHROPIC_KEY = "sk-ant-LEAKCHECK-bbbbbbbbbbbbbbbb"


def test_one_json_line_per_request(stack: ProxyStack, json_log: io.StringIO) -> None:
    client = openai.OpenAI(api_key=OPENAI_KEY, base_url=stack.openai_base_url, max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    list(
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    records = access(json_log, expect=2)
    assert len(records) == 2
    first = records[0]
    for key in (
        "method",
        "route",
        "status",
        "upstream",
        "duration_ms",
        "overhead_ms",
        "conversation",
        "action",
    ):
        assert key in first, key
    assert (first["method"], first["route"], first["status"], first["upstream"]) == (
        "POST",
        "/v1/chat/completions",
        200,
        "openai",
    )
    assert first["action"] == "none" and first["conversation"] == "unknown"
    assert 0 <= first["overhead_ms"] <= first["duration_ms"]
    assert records[1]["stream"] is True and records[1]["bytes_out"] > 0
    ids = [r["request_id"] for r in records]
    assert len(set(ids)) == 2 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)  # unique, 32 hex digits


def test_errors_are_logged_with_status(stack: ProxyStack, json_log: io.StringIO) -> None:
    stack.fake.inject(Fault(status=500))
    client = openai.OpenAI(api_key=OPENAI_KEY, base_url=stack.openai_base_url, max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o", messages=[])
    (rec,) = access(json_log, expect=1)
    assert rec["status"] == 500 and rec["upstream_status"] == 500


def test_no_secret_ever_logged(
    make_stack: Any, json_log: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="compaction_gate")
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    stack: ProxyStack = make_stack()

    class LeakyGate:
        async def before(self, ex: Exchange) -> Decision:
            # An interceptor bug whose message quotes the credential must not leak it.
            raise RuntimeError(f"cannot handle key {OPENAI_KEY} / {ANTHROPIC_KEY}")

    oa = openai.OpenAI(api_key=OPENAI_KEY, base_url=stack.openai_base_url, max_retries=0)
    an = anthropic.Anthropic(api_key=ANTHROPIC_KEY, base_url=stack.url, max_retries=0)
    oa.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    an.messages.create(
        model="claude-fake-1", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    stack.interceptor = LeakyGate()
    oa.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    an.messages.create(
        model="claude-fake-1", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    stack.fake.inject(Fault(status=401))
    with pytest.raises(openai.AuthenticationError):
        oa.models.list()

    assert len(access(json_log, expect=5)) == 5
    captured = json_log.getvalue() + caplog.text + repr([r.__dict__ for r in caplog.records])
    assert any(r["logger"] == "compaction_gate.server" for r in lines(json_log))
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, "LEAKCHECK", "Bearer"):
        assert secret not in captured, secret
    assert "authorization" not in captured.lower()
    assert "x-api-key" not in captured.lower()


async def test_configured_upstream_key_never_logged_and_replaces_client_key(
    json_log: io.StringIO,
) -> None:
    from proxy.server.app import create_app
    from proxy.server.runner import start_server
    from tests.support.fake_upstream import FakeUpstream

    fake = FakeUpstream()
    await fake.start()
    config = ProxyConfig(
        upstreams=(
            Upstream(name="o", base_url=fake.openai_base_url, api_key="sk-upstream-CONFIGURED-1"),
            Upstream(
                name="a", base_url=fake.url, api_key="sk-upstream-CONFIGURED-2", dialect="anthropic"
            ),
        )
    )
    assert "CONFIGURED" not in repr(config)
    server = await start_server(create_app(config), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(
                server.url + "/v1/chat/completions",
                json={"model": "m", "messages": []},
                headers={"authorization": "Bearer client-key"},
            ) as r:
                assert r.status == 200
            async with s.post(
                server.url + "/v1/messages",
                json={"model": "m", "max_tokens": 1, "messages": []},
                headers={"x-api-key": "client-key", "anthropic-version": "2023-06-01"},
            ) as r:
                assert r.status == 200
    finally:
        await server.stop()
        await fake.close()
    assert fake.requests[0].headers["authorization"] == "Bearer sk-upstream-CONFIGURED-1"
    assert fake.requests[1].headers["x-api-key"] == "sk-upstream-CONFIGURED-2"
    assert "authorization" not in fake.requests[1].headers
    assert "CONFIGURED" not in json_log.getvalue() and "client-key" not in json_log.getvalue()


def test_redact_and_configure_logging() -> None:
    assert redact("key sk-123456 here", ["sk-123456", None, ""]) == "key [redacted] here"
    buf = io.StringIO()
    configure_logging("debug", stream=buf)
    try:
        logging.getLogger("compaction_gate.x").info("hello", extra={"fields": {"a": 1}})
        record = json.loads(buf.getvalue())
        assert (record["msg"], record["a"], record["level"]) == ("hello", 1, "info")
        assert logging.getLogger("aiohttp.access").disabled
    finally:
        reset_logging()
