"""The bare pass-through the benches measure the gate against: an aiohttp proxy that
parses nothing (:func:`bare_app`).

:mod:`bench.load`'s ``bare`` target serves it in front of one upstream. :mod:`bench.stall`
serves it (:func:`serve_bare`) in front of two, sending the large traffic to its own fake
upstream as the gate does (the gate routes it by model; this proxy, which reads no body,
by the :data:`ROUTE_HEADER` the large traffic's client sets), and answering
``GET /healthz`` itself: measured beside the gate in the same run, its loaded/quiet p99
ratio is what the machine alone (the harness, the fake upstreams, the kernel moving 10 MB
bodies) costs a proxy in front of them (issue 16's floor).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

#: Header (and value) with which the large traffic asks for its own upstream.
ROUTE_HEADER = ("x-bench-upstream", "big")

#: Headers not passed on: of the request (the session sets its own), of the reply (the
#: reply is streamed back with the server's own framing).
_NOT_SENT = frozenset({"host", "content-length"})
_NOT_RETURNED = frozenset({"content-length", "transfer-encoding"})


def bare_app(upstream_of: Callable[[web.Request], str], *, healthz: bool = False) -> web.Application:
    """The pass-through: each request's body read whole and sent to ``upstream_of(request)``
    (a base URL) with its headers (but ``Host`` and ``Content-Length``), the reply streamed
    back as it comes. A request whose client went away mid-upload or mid-reply ends
    quietly. ``healthz``: answer ``GET /healthz`` here (as the gate does) instead of
    forwarding it."""
    session: aiohttp.ClientSession | None = None

    async def forward(request: web.Request) -> web.StreamResponse:
        nonlocal session
        if session is None:  # made on the serving loop
            session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=600))
        try:
            body = await request.read()
        except ConnectionResetError:  # the client went away mid-upload (a pump stopped)
            return web.Response(status=400)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_SENT}
        async with session.request(request.method, upstream_of(request) + request.path_qs, data=body,
                                   headers=headers) as up:
            resp = web.StreamResponse(status=up.status, headers={
                k: v for k, v in up.headers.items() if k.lower() not in _NOT_RETURNED})
            await resp.prepare(request)
            try:
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except ConnectionResetError:  # the client went away mid-reply (a pump stopped)
                pass
            return resp

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application(client_max_size=1 << 30)
    if healthz:
        app.router.add_get("/healthz", health)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def start_site(app: web.Application) -> str:
    """Serve ``app`` on a free loopback port; its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://127.0.0.1:{port}"


def serve_bare(q: Any, cpus: set[int] | None, small_upstream: str, big_upstream: str) -> None:
    """Serve :mod:`bench.stall`'s pass-through in this process (on ``cpus``): the large
    traffic to ``big_upstream``, the rest to ``small_upstream``, ``GET /healthz`` answered
    here; put ``(url, pid)`` on ``q``."""
    if cpus:
        os.sched_setaffinity(0, cpus)

    def upstream_of(request: web.Request) -> str:
        return big_upstream if request.headers.get(ROUTE_HEADER[0]) == ROUTE_HEADER[1] else small_upstream

    async def serve() -> None:
        q.put((await start_site(bare_app(upstream_of, healthz=True)), os.getpid()))
        await asyncio.Event().wait()

    asyncio.run(serve())
