"""WebSocket relay: the OpenAI Realtime API (``GET /v1/realtime`` upgraded) passed
through, the Responses API WebSocket mode (``GET /v1/responses``) gated.

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
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import WSMsgType, web

from proxy.server.errors import ProxyError
from proxy.server.headers import upstream_headers
from proxy.server.record import RequestRecord, respond_error, upstream_failure
from proxy.server.routes import Route
from proxy.server.state import CONFIG_KEY, SESSION_KEY
from proxy.server.upstream import apply_credentials, proxy_for, select_upstream, target_url

__all__ = ["connect_upstream", "is_websocket", "pump_both", "relay_websocket"]

_Socket = web.WebSocketResponse | aiohttp.ClientWebSocketResponse

#: Handshake headers aiohttp sets itself on the upstream connection.
_HANDSHAKE = ("sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
              "sec-websocket-protocol", "upgrade", "connection")


def is_websocket(request: web.Request) -> bool:
    return request.method == "GET" and request.headers.get("upgrade", "").lower() == "websocket"


async def relay_websocket(request: web.Request, rec: RequestRecord, route: Route) -> web.StreamResponse:
    """Connect upstream, then relay: a Responses API socket (``/v1/responses``) is gated
    frame by frame (:mod:`proxy.server.responses_ws`); any other (Realtime) is pumped
    unchanged both ways."""
    up, refused = await connect_upstream(request, rec, route)
    if up is None:
        assert refused is not None
        return refused
    try:
        client = web.WebSocketResponse(protocols=(up.protocol,) if up.protocol else (), autoping=False,
                                       max_msg_size=0)
        await client.prepare(request)
        rec.status = 101
        if route.kind == "responses":
            from proxy.server.responses_ws import relay_responses

            await relay_responses(request, rec, client, up)
        else:
            await pump_both(client, up, rec)
        return client
    finally:
        await up.close()


async def connect_upstream(
    request: web.Request, rec: RequestRecord, route: Route
) -> tuple[aiohttp.ClientWebSocketResponse | None, web.Response | None]:
    """The upstream socket (same upstream choice, credentials, subprotocols and outbound
    proxy as any request), or the HTTP error the client gets when it cannot be opened."""
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
            url, headers=headers, protocols=protocols, autoping=False, proxy=proxy_for(url, config.server),
            max_msg_size=0,
        )
    except aiohttp.WSServerHandshakeError as exc:
        rec.upstream_status = exc.status
        status = exc.status if 400 <= exc.status < 600 else 502
        return None, respond_error(rec, route.dialect, ProxyError(
            status, f"Upstream refused the WebSocket connection (HTTP {exc.status}).", code="upstream_refused"))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        err, _ = upstream_failure(exc)
        return None, respond_error(rec, route.dialect, err)
    rec.upstream_status = 101
    return up, None


TextHandler = Callable[[str], Awaitable[None]]


async def pump_both(client: web.WebSocketResponse, up: aiohttp.ClientWebSocketResponse, rec: RequestRecord,
                    *, client_text: TextHandler | None = None, upstream_text: TextHandler | None = None) -> None:
    """Relay frames both ways until one side closes; then close the other alike. Text
    frames go to ``client_text`` / ``upstream_text`` when given (which send what they
    decide), else straight to the other side."""

    async def pump(src: _Socket, dst: _Socket, inbound: bool, on_text: TextHandler | None) -> None:
        size = 0
        async for msg in src:  # ends at CLOSE / CLOSING / ERROR
            if msg.type == WSMsgType.TEXT:
                size += len(msg.data)  # JSON events: characters are bytes; no copy to count
                if on_text is not None:
                    await on_text(msg.data)
                else:
                    await dst.send_str(msg.data)
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

    tasks = [asyncio.ensure_future(pump(client, up, True, client_text)),
             asyncio.ensure_future(pump(up, client, False, upstream_text))]
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
