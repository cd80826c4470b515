"""Outbound HTTP(S) proxy: ``server.upstream_proxy``, or the environment's
``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` with ``server.proxy_from_env``. A real
forward proxy (absolute-form requests, as aiohttp sends them) sits between
compaction-gate and the fake upstream; its credentials never reach the log."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from aiohttp import ClientSession, web
from yarl import URL

from proxy.config import ServerSettings
from proxy.server.upstream import proxy_for
from proxy.yamlconf import Invalid
from tests.support import BackgroundLoop, ProxyStack
from tests.support.logs import access


def settings(**kw: Any) -> ServerSettings:
    return ServerSettings(port=0, **kw)


@pytest.mark.parametrize(
    ("url", "server", "env", "expected"),
    [
        ("https://api.openai.com/v1/x", settings(), {"HTTPS_PROXY": "http://p:3128"}, None),  # off by default
        ("https://api.openai.com/v1/x", settings(upstream_proxy="http://cfg:1"), {"HTTPS_PROXY": "http://p:3128"},
         "http://cfg:1"),
        ("https://api.openai.com/v1/x", settings(proxy_from_env=True), {"HTTPS_PROXY": "http://p:3128"},
         "http://p:3128"),
        ("http://llm.internal/v1/x", settings(proxy_from_env=True), {"HTTPS_PROXY": "http://p:3128"}, None),
        ("http://llm.internal/v1/x", settings(proxy_from_env=True), {"HTTP_PROXY": "http://h:8080"}, "http://h:8080"),
        ("http://llm.internal/v1/x", settings(proxy_from_env=True),
         {"HTTP_PROXY": "http://upper:1", "http_proxy": "http://lower:2"}, "http://lower:2"),
        ("https://a.example/x", settings(proxy_from_env=True), {"ALL_PROXY": "http://all:9"}, "http://all:9"),
        ("https://api.openai.com/x", settings(proxy_from_env=True),
         {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "localhost, .openai.com"}, None),
        ("https://openai.com/x", settings(proxy_from_env=True),
         {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".openai.com"}, None),
        ("https://notopenai.com/x", settings(proxy_from_env=True),
         {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "openai.com"}, "http://p:1"),
        ("http://10.0.0.5:8000/x", settings(proxy_from_env=True),
         {"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.5:9000"}, "http://p:1"),
        ("http://10.0.0.5:8000/x", settings(proxy_from_env=True),
         {"HTTP_PROXY": "http://p:1", "NO_PROXY": "10.0.0.5:8000"}, None),
        ("http://anything/x", settings(proxy_from_env=True), {"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ],
)
def test_which_proxy(url: str, server: ServerSettings, env: dict[str, str], expected: str | None) -> None:
    assert proxy_for(URL(url), server, env) == expected


def test_upstream_proxy_must_be_an_http_url() -> None:
    with pytest.raises(Invalid):
        ServerSettings(upstream_proxy="socks5://127.0.0.1:1080")
    assert "secret" not in repr(ServerSettings(upstream_proxy="http://u:secret@p:1"))


class ForwardProxy:
    """A minimal HTTP forward proxy: relays absolute-form requests, records them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        self.bg = BackgroundLoop()
        self.url = self.bg.run(self._start())

    async def _start(self) -> str:
        self.session = ClientSession(auto_decompress=False)

        async def relay(request: web.Request) -> web.StreamResponse:
            target = request.url  # absolute-form request target: the full upstream URL
            self.seen.append((str(target), request.headers.get("Proxy-Authorization")))
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "proxy-authorization")}
            async with self.session.request(request.method, target, data=await request.read(), headers=headers) as up:
                body = await up.read()
                return web.Response(status=up.status, body=body, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in ("content-length", "transfer-encoding")})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", relay)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        async def stop() -> None:
            await self.session.close()
            await self.runner.cleanup()

        self.bg.run(stop())
        self.bg.close()


@pytest.fixture
def forward_proxy() -> Iterator[ForwardProxy]:
    p = ForwardProxy()
    yield p
    p.close()


def _chat(stack: ProxyStack) -> str:
    # the SDK itself must not pick up HTTP_PROXY: only the gate's own upstream hop is under test
    client = openai.OpenAI(api_key="sk-via-proxy", base_url=stack.openai_base_url, max_retries=0,
                           http_client=httpx.Client(trust_env=False))
    out = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    return out.choices[0].message.content or ""


def test_requests_go_through_the_configured_proxy_and_its_password_is_never_logged(
    make_stack: Any, forward_proxy: ForwardProxy, json_log: io.StringIO
) -> None:
    proxy_url = forward_proxy.url.replace("http://", "http://agent:hunter2-proxy-pass@")
    stack: ProxyStack = make_stack(server=settings(upstream_proxy=proxy_url))
    assert _chat(stack)
    assert len(forward_proxy.seen) == 1
    target, auth = forward_proxy.seen[0]
    assert target == stack.fake.url + "/v1/chat/completions"
    assert auth is not None and auth.startswith("Basic ")  # credentials from the proxy URL
    assert len(stack.fake.requests) == 1
    assert access(json_log, expect=1)  # the request's line is written once the reply is sent
    assert "hunter2-proxy-pass" not in json_log.getvalue()


def test_proxy_from_the_environment_and_no_proxy(
    make_stack: Any, forward_proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", forward_proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("http_proxy", raising=False)
    ignoring: ProxyStack = make_stack()  # proxy_from_env is off: direct
    assert _chat(ignoring) and forward_proxy.seen == []
    stack: ProxyStack = make_stack(server=settings(proxy_from_env=True))
    assert _chat(stack) and [t for t, _ in forward_proxy.seen] == [stack.fake.url + "/v1/chat/completions"]
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert _chat(stack) and len(forward_proxy.seen) == 1  # bypassed: direct again


def test_an_unreachable_proxy_is_a_clear_upstream_error(make_stack: Any, json_log: io.StringIO) -> None:
    stack: ProxyStack = make_stack(server=settings(upstream_proxy="http://agent:hunter2-proxy-pass@127.0.0.1:9"))
    client = openai.OpenAI(api_key="sk-x", base_url=stack.openai_base_url, max_retries=0)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502 and "upstream" in str(err.value.body).lower()
    assert access(json_log, expect=1)[0]["error"] == "upstream_unreachable"
    assert "hunter2-proxy-pass" not in json_log.getvalue() + str(err.value.body)
