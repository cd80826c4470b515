"""Running the app: bind a TCP site, serve until a signal, shut down gracefully.

``handler_cancellation=True`` makes aiohttp cancel a handler when its client
disconnects, so the upstream request is closed at once instead of at the next
write. On SIGINT/SIGTERM the listener closes first, in-flight requests (streams)
get ``server.shutdown_grace_seconds`` to finish, then the upstream session closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from proxy.config import ProxyConfig
from proxy.server.app import create_app
from proxy.server.hooks import Interceptor
from proxy.server.logs import GATE_LOGGER

__all__ = ["AppFactory", "RunningServer", "serve", "start_server"]

#: Builds the application to serve from the validated config.
AppFactory = Callable[[ProxyConfig], web.Application]


@dataclass
class RunningServer:
    """A started app; ``port`` is the bound port (useful with port 0)."""

    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish (grace period), clean up."""
        await self.runner.cleanup()


async def start_server(
    app: web.Application, host: str, port: int, *, shutdown_grace_seconds: float = 30.0
) -> RunningServer:
    """Start ``app`` on ``host:port`` (``port=0`` picks a free port)."""
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=shutdown_grace_seconds,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return RunningServer(runner=runner, host=host, port=bound)


async def _serve(config: ProxyConfig, app: web.Application, on_listening: Callable[[RunningServer], None] | None) -> None:
    server = await start_server(
        app,
        config.server.host,
        config.server.port,
        shutdown_grace_seconds=config.server.shutdown_grace_seconds,
    )
    if on_listening is not None:
        on_listening(server)
    GATE_LOGGER.info(
        "listening",
        extra={
            "fields": {
                "url": server.url,
                "upstreams": [u.name for u in config.upstreams],
                "policy": config.policy,
            }
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        GATE_LOGGER.info(
            "shutting down",
            extra={"fields": {"grace_seconds": config.server.shutdown_grace_seconds}},
        )
        await server.stop()
        GATE_LOGGER.info("stopped")


def serve(
    config: ProxyConfig,
    interceptor: Interceptor | None = None,
    *,
    app: web.Application | None = None,
    on_listening: Callable[[RunningServer], None] | None = None,
) -> None:
    """Run the proxy in the foreground until SIGINT/SIGTERM.

    ``app`` is the application to serve (e.g. one with the gate installed); by
    default ``create_app(config, interceptor)``. ``on_listening(server)`` is called once
    the socket is bound. A listening failure (a busy port) raises :class:`OSError`.
    """
    served = app if app is not None else create_app(config, interceptor)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, served, on_listening))
