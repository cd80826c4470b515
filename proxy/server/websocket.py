"""WebSocket pass-through (the OpenAI Realtime API, ``GET /v1/realtime`` upgraded).

A realtime session keeps its conversation on the provider's side and streams audio
and events both ways, so the gate has nothing to diff there: the proxy connects to the
chosen upstream (same upstream choice, credentials and outbound proxy as any request;
the model comes from the ``model`` query parameter), then relays every frame unchanged
in both directions until either side closes, and closes the other side with the same
code. If upstream refuses the handshake, the client gets that status as an HTTP error
in its API dialect, before any upgrade. Frames are never logged; the access line gives
the route, status 101, and byte counts.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import WSMsgType, web

from proxy.server.errors import ProxyError
from proxy.server.headers import upstream_headers
from proxy.server.record import RequestRecord, respond_error, upstream_failure
from proxy.server.routes import Route
from proxy.server.state import CONFIG_KEY, SESSION_KEY
from proxy.server.upstream import apply_credentials, proxy_for, select_upstream, target_url

__all__ = ["is_websocket", "relay_websocket"]

_Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse

#: Handshake headers aiohttp sets itself on the upstream connection.
_HANDSHAKE = ("sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
              "sec-websocket-protocol", "upgrade", "connection")


def is_websocket(request: web.Request) -> bool:
    return request.method == "GET" and request.headers.get("upgrade", "").lower() == "websocket"


async def relay_websocket(request: web.Request, rec: RequestRecord, route: Route) -> web.StreamResponse:
    config = request.app[CONFIG_KEY]
    model = request.query.get("model") or None
    rec.model = model
    upstream = select_upstream(config, route.dialect, model)
    rec.upstream = upstream.name
    headers = upstream_headers(request.headers, identity_encoding=False)
    for name in _HANDSHAKE:
        headers.popall(name, None)
    apply_credentials(headers, upstream, route.dialect)
    url = target_url(upstream, route.dialect, request.raw_path)
    url = url.with_scheme("wss" if url.scheme == "https" else "ws")
    protocols = tuple(p.strip() for p in request.headers.get("sec-websocket-protocol", "").split(",") if p.strip())
    try:
        up = await request.app[SESSION_KEY].ws_connect(
            url, headers=headers, protocols=protocols, autoping=False, proxy=proxy_for(url, config.server)
        )
    except aiohttp.WSServerHandshakeError as exc:
        rec.upstream_status = exc.status
        status = exc.status if 400 <= exc.status < 600 else 502
        return respond_error(rec, route.dialect, ProxyError(
            status, f"Upstream refused the WebSocket connection (HTTP {exc.status}).", code="upstream_refused"))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        err, _ = upstream_failure(exc)
        return respond_error(rec, route.dialect, err)
    rec.upstream_status = 101
    try:
        client = web.WebSocketResponse(protocols=(up.protocol,) if up.protocol else (), autoping=False,
                                       max_msg_size=0)
        await client.prepare(request)
        rec.status = 101
        await _pump_both(client, up, rec)
        return client
    finally:
        await up.close()


async def _pump_both(client: web.WebSocketResponse, up: aiohttp.ClientWebSocketResponse,
                     rec: RequestRecord) -> None:
    """Relay frames both ways until one side closes; then close the other alike."""

    async def pump(src: _Socket, dst: _Socket, inbound: bool) -> None:
        size = 0
        async for msg in src:  # ends at CLOSE / CLOSING / ERROR
            if msg.type == WSMsgType.TEXT:
                await dst.send_str(msg.data)
                size += len(msg.data)  # JSON events: characters are bytes; no copy to count
            elif msg.type == WSMsgType.BINARY:
                await dst.send_bytes(msg.data)
                size += len(msg.data)
            elif msg.type == WSMsgType.PING:
                await dst.ping(msg.data)
            elif msg.type == WSMsgType.PONG:
                await dst.pong(msg.data)
            if inbound:
                rec.bytes_in = size
            else:
                rec.bytes_out = size
        if not dst.closed:
            await dst.close(code=src.close_code or aiohttp.WSCloseCode.OK)

    tasks = [asyncio.ensure_future(pump(client, up, True)), asyncio.ensure_future(pump(up, client, False))]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in pending:  # the other side is closing too: let it finish briefly
            try:
                await asyncio.wait_for(t, timeout=5)
            except (asyncio.TimeoutError, ConnectionError, aiohttp.ClientError):
                t.cancel()
        for t in done:
            exc = t.exception()
            if exc is not None and not isinstance(exc, (ConnectionError, aiohttp.ClientError)):
                raise exc
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
