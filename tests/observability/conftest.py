"""Fixtures: the scripted upstream and full gate proxies in front of it, on loopback."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from proxy.config import GateSettings
from proxy.demo import build_gate_app, demo_config, start_app
from proxy.demo_upstream import create_app as create_upstream_app

GateFactory = Callable[..., Awaitable[str]]


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Fail any outbound connection that is not to a loopback address (offline proof)."""
    attempts: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def _check(address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if host is not None:
            attempts.append(host)
            if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
                raise OSError(f"network access attempted: {host}")

    def connect(self: socket.socket, address: Any) -> None:
        _check(address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield attempts


@pytest.fixture
async def upstream_url() -> AsyncIterator[str]:
    runner, url = await start_app(create_upstream_app())
    yield url
    await runner.cleanup()


@pytest.fixture
async def gate(upstream_url: str) -> AsyncIterator[GateFactory]:
    """``await gate(policy, admin_key=None)`` -> base URL of a full proxy (stopped after)."""
    runners: list[web.AppRunner] = []

    async def make(policy: str = "default", *, admin_key: str | None = None) -> str:
        config = demo_config(policy, upstream_url)
        if admin_key is not None:
            config = replace(config, gate=GateSettings(admin_key=admin_key))
        runner, url = await start_app(build_gate_app(config))
        runners.append(runner)
        return url

    yield make
    for runner in runners:
        await runner.cleanup()
