"""WebSocket pass-through (the Realtime API): the official openai SDK's realtime client
through compaction-gate to a WebSocket upstream that speaks its handshake; frames
relayed unchanged both ways, credentials and subprotocols passed on, a refused
handshake answered as an HTTP error, the key never logged."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from proxy.config import ProxyConfig, ServerSettings, Upstream
from proxy.server.app import create_app
from proxy.server.runner import start_server
from tests.support import BackgroundLoop
from tests.support.logs import access

KEY = "sk-realtime-secret-123"


class RealtimeUpstream:
    """A WebSocket upstream: greets with session.created, echoes every event as
    ``echo`` (binary frames as they are), closes with 4001 on ``{"type": "bye"}``;
    refuses the handshake (401) without a bearer key."""

    def __init__(self, bg: BackgroundLoop) -> None:
        self.bg = bg
        self.handshakes: list[dict[str, Any]] = []
        self.url = bg.run(self._start())

    async def _start(self) -> str:
        async def realtime(request: web.Request) -> web.StreamResponse:
            self.handshakes.append({"auth": request.headers.get("Authorization"), "query": dict(request.query),
                                    "protocol": request.headers.get("Sec-WebSocket-Protocol"),
                                    "host": request.headers.get("Host")})
            if not (request.headers.get("Authorization") or "").startswith("Bearer "):
                return web.json_response({"error": {"message": "no key"}}, status=401)
            ws = web.WebSocketResponse(protocols=("realtime",))
            await ws.prepare(request)
            await ws.send_str(json.dumps({"type": "session.created", "event_id": "e0", "session": {"id": "sess_1"}}))
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    event = json.loads(msg.data)
                    if event.get("type") == "bye":
                        await ws.close(code=4001, message=b"bye")
                        break
                    await ws.send_str(json.dumps({"type": "echo", "got": event}))
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    await ws.send_bytes(msg.data)
            return ws

        app = web.Application()
        app.router.add_get("/v1/realtime", realtime)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


@pytest.fixture
def realtime_stack() -> Iterator[tuple[str, RealtimeUpstream]]:
    bg = BackgroundLoop()
    upstream = RealtimeUpstream(bg)
    config = ProxyConfig(server=ServerSettings(port=0),
                         upstreams=(Upstream(name="openai", base_url=upstream.url + "/v1", dialect="openai"),))
    server = bg.run(start_server(create_app(config, None), "127.0.0.1", 0))
    try:
        yield server.url, upstream
    finally:
        bg.run(server.stop())
        bg.run(upstream.runner.cleanup())
        bg.close()


# the openai SDK's own sync WebSocket wrapper triggers this in websockets >= 14; not ours
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
def test_openai_realtime_client_through_the_proxy(realtime_stack: tuple[str, RealtimeUpstream],
                                                  json_log: io.StringIO) -> None:
    url, upstream = realtime_stack
    client = openai.OpenAI(api_key=KEY, base_url=url + "/v1", max_retries=0)
    with client.realtime.connect(model="gpt-realtime") as conn:
        first = json.loads(conn.recv_bytes())
        assert first["type"] == "session.created"
        conn.send({"type": "session.update", "session": {"type": "realtime", "instructions": "be brief"}})
        echo = json.loads(conn.recv_bytes())
        assert echo == {"type": "echo", "got": {"type": "session.update",
                                                 "session": {"type": "realtime", "instructions": "be brief"}}}
    hs = upstream.handshakes[-1]
    assert hs["auth"] == f"Bearer {KEY}" and hs["query"] == {"model": "gpt-realtime"}
    assert hs["host"] == upstream.url.removeprefix("http://")  # upstream's own host, not the proxy's
    line = access(json_log, expect=1)[-1]
    assert line["route"] == "/v1/realtime" and line["status"] == 101 and line["kind"] == "websocket"
    assert line["bytes_in"] > 0 and line["bytes_out"] > 0
    assert KEY not in json_log.getvalue()


def test_frames_both_ways_close_code_subprotocol_and_refusal(realtime_stack: tuple[str, RealtimeUpstream]) -> None:
    url, upstream = realtime_stack
    bg = BackgroundLoop()

    async def session() -> tuple[Any, ...]:
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(url + "/v1/realtime?model=m", protocols=("realtime",),
                                    headers={"Authorization": f"Bearer {KEY}"}) as ws:
                hello = await ws.receive_str()
                await ws.send_bytes(b"\x00\x01audio")
                binary = await ws.receive_bytes()
                await ws.send_str(json.dumps({"type": "bye"}))
                closing = await ws.receive()
                protocol = ws.protocol
            try:
                await s.ws_connect(url + "/v1/realtime?model=m")  # no key: upstream refuses
                refused: Any = None
            except aiohttp.WSServerHandshakeError as exc:
                refused = exc.status
            async with s.get(url + "/v1/realtime?model=m", headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                                                       "Sec-WebSocket-Version": "13",
                                                                       "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as r:
                body = await r.json()
            return hello, binary, closing, protocol, refused, r.status, body

    try:
        hello, binary, closing, protocol, refused, status, body = bg.run(session())
    finally:
        bg.close()
    assert json.loads(hello)["type"] == "session.created"
    assert binary == b"\x00\x01audio"  # binary frames relayed as they are
    assert closing.type == aiohttp.WSMsgType.CLOSE and closing.data == 4001  # upstream's close code reaches the client
    assert protocol == "realtime" and upstream.handshakes[0]["protocol"] == "realtime"
    assert refused == 401 and status == 401
    assert body["error"]["code"] == "upstream_refused" and "401" in body["error"]["message"]
