"""Shared test helpers: a background event loop and a proxy-in-front-of-fake stack.

``BackgroundLoop`` runs an asyncio loop in a daemon thread so servers keep serving
while a test makes blocking calls (sync SDK clients). ``ProxyStack`` starts a
:class:`~tests.support.fake_upstream.FakeUpstream` and the proxy in such a loop,
with the proxy's upstreams pointing at the fake: ``openai`` at ``<fake>/v1``
(dialect openai) and ``anthropic`` at ``<fake>`` (dialect anthropic, ``claude-*``).
The proxy's interceptor can be swapped at any time via ``stack.interceptor``.
Works from sync and async tests alike (everything server-side lives in the thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from proxy.config import GateSettings, ProxyConfig, ServerSettings, Upstream
from proxy.server.app import create_app
from proxy.server.hooks import Decision, Exchange, Interceptor, NoopInterceptor
from proxy.server.runner import RunningServer, client_timeouts, start_server
from tests.support.fake_upstream import FakeUpstream

__all__ = ["BackgroundLoop", "ProxyStack", "RunningStack", "SwitchableInterceptor", "fake_upstreams"]

T = TypeVar("T")


class BackgroundLoop:
    """An event loop running in a daemon thread; ``run(coro)`` blocks for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="test-bg-loop", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


class SwitchableInterceptor:
    """Delegates to ``current`` (replaceable while the app runs)."""

    def __init__(self, current: Interceptor | None = None) -> None:
        self.current: Interceptor = current or NoopInterceptor()

    async def before(self, ex: Exchange) -> Decision:
        return await self.current.before(ex)


def fake_upstreams(fake: FakeUpstream) -> tuple[Upstream, ...]:
    """The proxy's upstreams in front of ``fake``: OpenAI by default, Anthropic for
    ``claude-*`` models."""
    return (
        Upstream(name="openai", base_url=fake.openai_base_url, dialect="openai"),
        Upstream(
            name="anthropic",
            base_url=fake.anthropic_base_url,
            models=("claude-*",),
            dialect="anthropic",
        ),
    )


class RunningStack:
    """A running proxy ``server`` and its ``fake`` upstream on the background loop ``bg``."""

    bg: BackgroundLoop
    fake: FakeUpstream
    server: RunningServer

    @property
    def url(self) -> str:
        """Proxy origin, e.g. ``http://127.0.0.1:PORT`` (Anthropic SDK base URL)."""
        return self.server.url

    @property
    def openai_base_url(self) -> str:
        """Proxy base URL for OpenAI SDKs (``…/v1``)."""
        return self.server.url + "/v1"

    def close(self) -> None:
        try:
            self.bg.run(self.server.stop())
            self.bg.run(self.fake.close())
        finally:
            self.bg.close()


class ProxyStack(RunningStack):
    """Fake upstream + proxy in a background loop (see module docstring)."""

    def __init__(
        self,
        *,
        server: ServerSettings | None = None,
        gate: GateSettings | None = None,
        fake: FakeUpstream | None = None,
        interceptor: Interceptor | None = None,
    ) -> None:
        self.bg = BackgroundLoop()
        self.fake = fake or FakeUpstream()
        self._switch = SwitchableInterceptor(interceptor)
        try:
            self.bg.run(self.fake.start())
            settings = server or ServerSettings(port=0)
            self.config = ProxyConfig(
                server=dataclasses.replace(settings, port=0),
                upstreams=fake_upstreams(self.fake),
                gate=gate or GateSettings(),
            )
            self.app = create_app(self.config, self._switch)
            self.server: RunningServer = self.bg.run(
                start_server(
                    self.app,
                    "127.0.0.1",
                    0,
                    shutdown_grace_seconds=self.config.server.shutdown_grace_seconds,
                    client_timeouts=client_timeouts(self.config.server),
                )
            )
        except BaseException:
            self.bg.run(self.fake.close())
            self.bg.close()
            raise

    @property
    def interceptor(self) -> Interceptor:
        return self._switch.current

    @interceptor.setter
    def interceptor(self, value: Interceptor) -> None:
        self._switch.current = value
