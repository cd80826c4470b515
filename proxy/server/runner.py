"""Running the app: bind a TCP site, serve until a signal, shut down gracefully.

``handler_cancellation=True`` makes aiohttp cancel a handler when its client
disconnects, so the upstream request is closed at once instead of at the next
write. On SIGINT/SIGTERM the listener closes first, in-flight requests (streams)
get ``server.shutdown_grace_seconds`` to finish; whatever is still open then is cut
with a final error in its dialect (:mod:`proxy.server.inflight`), and the rest of the
shutdown (other handlers, the app's cleanup, the upstream session) is bounded too.
Connections are served by :class:`~proxy.server.protocol.GateAppRunner` (the proxy's
own answers to malformed requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from proxy.config import ProxyConfig, ServerSettings
from proxy.server.app import create_app
from proxy.server.handoff import HandoffSite
from proxy.server.hooks import Interceptor
from proxy.server.inflight import INFLIGHT_KEY, InFlight
from proxy.server.logs import GATE_LOGGER
from proxy.server.protocol import ClientTimeouts, GateAppRunner
from proxy.state import offload
from proxy.state.priority import background_pool

__all__ = ["AppFactory", "RunningServer", "client_timeouts", "serve", "start_server"]

#: Builds the application to serve from the validated config.
AppFactory = Callable[[ProxyConfig], web.Application]

#: Seconds a cut request gets to write its final error event, and handlers that are not
#: proxied requests (``/gate/…``) get to finish, once the grace period is over.
CUT_WAIT = 0.5


@dataclass
class RunningServer:
    """A started app; ``port`` is the bound port (useful with port 0)."""

    runner: web.AppRunner
    host: str
    port: int
    grace: float = 30.0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        """Stop listening, let in-flight requests finish for the grace period, cut
        those still open (a final error event each), clean up."""
        inflight = self.runner.app.get(INFLIGHT_KEY) if isinstance(self.runner, web.AppRunner) else None
        for site in list(self.runner.sites):
            await site.stop()
        if inflight is not None and not await inflight.drain(self.grace):
            cut = inflight.cut()
            GATE_LOGGER.warning(
                "shutdown grace period over; cutting requests still in flight",
                extra={"fields": {"cut": cut, "grace_seconds": self.grace}},
            )
            await inflight.drain(CUT_WAIT)
        await self.runner.cleanup()


def client_timeouts(settings: ServerSettings) -> ClientTimeouts:
    """The slow-client limits ``settings`` configure."""
    return ClientTimeouts(
        header=settings.client_header_timeout,
        body=settings.client_body_timeout,
        keepalive=settings.keepalive_timeout,
    )


#: How long a thread may hold the GIL while another one waits for it (seconds; CPython's
#: default is 5 ms). See :func:`prefer_the_loop`.
SWITCH_INTERVAL = 0.001


def prefer_the_loop() -> None:
    """Shorten the interpreter's GIL switch interval to :data:`SWITCH_INTERVAL` (never
    lengthen it). Worker threads (the store's writer redacting and encoding a large
    row, token counting) run Python code for long stretches; every time the event loop
    wakes up for a socket, it waits up to the switch interval for the GIL, and a small
    request needs several wake-ups — with 5 ms, other tenants' requests queued behind
    those threads for tens of milliseconds each (``bench.stall``)."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)


#: Loops whose default executor :func:`background_default_executor` replaced.
_NICED_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def background_default_executor() -> None:
    """Make the running loop's default executor (``asyncio.to_thread``: a large body's
    plan and parse, a large commit's encoding, the catalogue's warm-up, the resolver's
    look-ups) a pool of niced threads (:func:`proxy.state.priority.background_pool`),
    once per loop: what runs there is one request's own large work, and on the loop's
    core it yields to every other tenant's wake-ups."""
    loop = asyncio.get_running_loop()
    if loop not in _NICED_LOOPS:
        _NICED_LOOPS.add(loop)
        loop.set_default_executor(background_pool("cg-background"))


async def start_server(
    app: web.Application,
    host: str,
    port: int,
    *,
    shutdown_grace_seconds: float = 30.0,
    reuse_port: bool = False,
    handoff: int | None = None,
    client_timeouts: ClientTimeouts | None = None,
) -> RunningServer:
    """Start ``app`` on ``host:port`` (``port=0`` picks a free port). ``reuse_port``: bind
    with ``SO_REUSEPORT``, beside other processes. ``handoff``: a worker of ``serve
    --workers N``: serve the connections the supervisor hands over on that channel
    (:mod:`proxy.server.handoff`) instead of listening. ``client_timeouts``: how long
    a client may take sending a request, or stay idle (default: nginx's)."""
    if INFLIGHT_KEY not in app:
        app[INFLIGHT_KEY] = InFlight()
    prefer_the_loop()
    background_default_executor()
    runner = GateAppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        # the grace period is RunningServer.stop's; aiohttp's own wait comes after it
        shutdown_timeout=CUT_WAIT,
        client_timeouts=client_timeouts or ClientTimeouts(),
    )
    await runner.setup()
    site: web.BaseSite = (
        HandoffSite(runner, handoff) if handoff is not None else web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    # the worker processes for large bodies start now, not on the first large request
    threading.Thread(target=offload.prestart, name="cg-offload-start", daemon=True).start()
    bound = port
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            bound = int(address[1])
            break
    return RunningServer(runner=runner, host=host, port=bound, grace=shutdown_grace_seconds)


async def _serve(
    config: ProxyConfig,
    app: web.Application,
    on_listening: Callable[[RunningServer], None] | None,
    reuse_port: bool = False,
    handoff: int | None = None,
) -> None:
    server = await start_server(
        app,
        config.server.host,
        config.server.port,
        shutdown_grace_seconds=config.server.shutdown_grace_seconds,
        reuse_port=reuse_port,
        handoff=handoff,
        client_timeouts=client_timeouts(config.server),
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
    reuse_port: bool = False,
    handoff: int | None = None,
) -> None:
    """Run the proxy in the foreground until SIGINT/SIGTERM.

    ``app`` is the application to serve (e.g. one with the gate installed); by
    default ``create_app(config, interceptor)``. ``on_listening(server)`` is called once
    the socket is bound. A listening failure (a busy port) raises :class:`OSError`.
    """
    served = app if app is not None else create_app(config, interceptor)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, served, on_listening, reuse_port, handoff))
