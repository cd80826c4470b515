"""The bare pass-through of :mod:`bench.stall`: what the loaded machine does to a proxy
that parses nothing (issue 16's floor).

An aiohttp pass-through, as :mod:`bench.load`'s ``bare`` target, that sends the large
traffic to its own fake upstream as the gate does (the gate routes it by model; this
one, which reads no body, by the :data:`ROUTE_HEADER` the large traffic's client sets)
and answers ``GET /healthz`` itself. Measured beside the gate in the same run, its
loaded/quiet p99 ratio is what the machine alone (the harness, the fake upstreams, the
kernel moving 10 MB bodies) costs a proxy in front of them.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
from aiohttp import web

#: Header (and value) with which the large traffic asks for its own upstream.
ROUTE_HEADER = ("x-bench-upstream", "big")

_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def serve_bare(q: Any, cpus: set[int] | None, small_upstream: str, big_upstream: str) -> None:
    """Serve the pass-through in this process (on ``cpus``); put ``(url, pid)`` on ``q``."""
    if cpus:
        os.sched_setaffinity(0, cpus)

    async def serve() -> None:
        session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=600))

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            big = request.headers.get(ROUTE_HEADER[0]) == ROUTE_HEADER[1]
            upstream = big_upstream if big else small_upstream
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
            async with session.request(request.method, upstream + request.path_qs, data=body, headers=headers) as up:
                resp = web.StreamResponse(status=up.status, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in _HOP})
                await resp.prepare(request)
                try:
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                except ConnectionResetError:  # the client went away mid-reply (a pump stopped)
                    pass
                return resp

        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/healthz", healthz)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        q.put((f"http://127.0.0.1:{port}", os.getpid()))
        await asyncio.Event().wait()

    asyncio.run(serve())
