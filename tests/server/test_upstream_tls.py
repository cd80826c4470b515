"""HTTPS upstreams: certificates are always verified, against the system's CAs plus
``server.upstream_ca_file``; through an outbound proxy the TLS connection is tunnelled
with CONNECT (a real tunnelling proxy here), so the proxy never sees the traffic. A
throwaway CA (trustme) signs the fake upstream's certificate for 127.0.0.1."""

from __future__ import annotations

import asyncio
import io
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trustme

from proxy.config import ServerSettings
from proxy.yamlconf import Invalid
from tests.support import BackgroundLoop, ProxyStack
from tests.support.fake_upstream import FakeUpstream


class ConnectProxy:
    """A tunnelling HTTP proxy: answers ``CONNECT host:port`` with 200 and relays bytes
    both ways; records each tunnel's target and ``Proxy-Authorization``."""

    def __init__(self) -> None:
        self.tunnels: list[tuple[str, str | None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.bg = BackgroundLoop()
        self.url = self.bg.run(self._start())

    async def _start(self) -> str:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                return
            self.tunnels.append((target, headers.get("Proxy-Authorization")))
            host, port = target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            for task in list(self._tasks):  # tunnels kept open by pooled connections
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.server.wait_closed()

        self.bg.run(stop())
        self.bg.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except ConnectionError:
        pass
    finally:
        dst.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
def tls_fake(ca: trustme.CA) -> FakeUpstream:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    return FakeUpstream(ssl_context=ctx)


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy()
    yield p
    p.close()


def _client(stack: ProxyStack) -> openai.OpenAI:
    # the SDK itself must not pick up a proxy from the environment: only the gate's hop
    return openai.OpenAI(api_key="sk-tls", base_url=stack.openai_base_url, max_retries=0,
                         http_client=httpx.Client(trust_env=False))


def test_https_upstream_with_a_private_ca_through_a_connect_tunnel(
    make_stack: Any, tls_fake: FakeUpstream, ca_file: str, connect_proxy: ConnectProxy, json_log: io.StringIO
) -> None:
    proxy_url = connect_proxy.url.replace("http://", "http://agent:tunnel-pass-77@")
    stack: ProxyStack = make_stack(
        fake=tls_fake, server=ServerSettings(port=0, upstream_proxy=proxy_url, upstream_ca_file=ca_file))
    assert stack.fake.url.startswith("https://127.0.0.1:")
    client = _client(stack)
    out = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "over TLS"}])
    assert out.choices[0].message.content
    chunks = list(client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "streamed over TLS"}], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # both went through tunnels to the upstream's host:port, authenticated by the URL's credentials
    host_port = stack.fake.url.removeprefix("https://")
    assert connect_proxy.tunnels and all(t == host_port for t, _ in connect_proxy.tunnels)
    assert all(auth is not None and auth.startswith("Basic ") for _, auth in connect_proxy.tunnels)
    assert [r.path for r in stack.fake.requests] == ["/v1/chat/completions"] * 2
    assert "tunnel-pass-77" not in json_log.getvalue()


def test_https_upstream_with_a_private_ca_directly(make_stack: Any, tls_fake: FakeUpstream, ca_file: str) -> None:
    stack: ProxyStack = make_stack(fake=tls_fake, server=ServerSettings(port=0, upstream_ca_file=ca_file))
    out = _client(stack).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert out.choices[0].message.content and len(stack.fake.requests) == 1


def test_an_untrusted_upstream_certificate_is_a_clear_error_in_the_callers_dialect(
    make_stack: Any, tls_fake: FakeUpstream
) -> None:
    stack: ProxyStack = make_stack(fake=tls_fake)  # the private CA is not trusted
    with pytest.raises(openai.APIStatusError) as err:
        _client(stack).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert err.value.status_code == 502
    body = err.value.body
    assert isinstance(body, dict) and body.get("code") == "upstream_tls_error"
    assert "certificate" in body["message"] and "server.upstream_ca_file" in body["message"]
    assert stack.fake.requests == []  # nothing was sent over an unverified connection


def test_the_ca_file_is_checked_when_the_config_is_loaded(tmp_path: Path) -> None:
    with pytest.raises(Invalid, match="no such file"):
        ServerSettings(upstream_ca_file=str(tmp_path / "missing.pem"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(Invalid, match="not a PEM CA bundle"):
        ServerSettings(upstream_ca_file=str(junk))
