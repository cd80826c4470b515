"""The fake upstream's Responses API WebSocket mode (``GET /v1/responses`` upgraded).

What the real API does, as far as a client can tell: every client frame
``{"type": "response.create", ...}`` is a ``POST /v1/responses`` body (``stream`` implied)
answered by the same events as JSON text frames, one response at a time. A frame may
continue an earlier response of the same socket with ``previous_response_id`` and only
the new input items; the server resolves it to that response's input and output plus the
new items (an unknown id is an ``error`` event, ``previous_response_not_found``).
``generate: false`` warms the socket up: the response completes with no output.

The responder sees the *resolved* body (``Call.json["input"]`` is the whole history); the
recorded request (``FakeUpstream.requests``, method ``WS``) keeps the raw frame as
``body`` and the resolved body as ``json``. Faults: a queued
:class:`~tests.support.fake_upstream.Fault` with ``status`` answers the next frame with an
error event of that status; with ``drop_connection`` the socket is closed without an
answer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web
from multidict import CIMultiDict, CIMultiDictProxy

if TYPE_CHECKING:
    from tests.support.fake_upstream import FakeUpstream

__all__ = ["serve_responses_websocket"]


def _error(status: int, code: str, message: str) -> str:
    err = {"type": "invalid_request_error", "code": code, "message": message, "param": None}
    return json.dumps({"type": "error", "status": status, "error": err})


async def serve_responses_websocket(fake: FakeUpstream, request: web.Request) -> web.WebSocketResponse:
    from tests.support.fake_upstream import _BUILDERS, Call, RecordedRequest, Reply, Usage, _Ids

    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    headers = CIMultiDictProxy(CIMultiDict(request.headers))
    lowered = {k.lower(): v for k, v in request.headers.items()}
    history: dict[str, list[Any]] = {}  # response id -> its whole input and output
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            continue
        try:
            frame = json.loads(msg.data)
        except ValueError:
            await ws.send_str(_error(400, "invalid_json", "frame is not JSON"))
            continue
        if not isinstance(frame, dict) or frame.get("type") != "response.create":
            await ws.send_str(_error(400, "unknown_event", "expected response.create"))
            continue
        prev = frame.get("previous_response_id")
        items = frame.get("input")
        if (prev is not None and not isinstance(prev, str)) or not isinstance(items, (str, list, type(None))):
            # as the real API: a field of the wrong type is an invalid request, not a crash
            await ws.send_str(_error(400, "invalid_type", "previous_response_id must be a string, input a string or a list"))
            continue
        if prev is not None and prev not in history:
            await ws.send_str(_error(400, "previous_response_not_found", f"Previous response {prev!r} not found."))
            continue
        items = [items] if isinstance(items, str) else list(items or [])
        full = (history[prev] if prev is not None else []) + items
        body = {k: v for k, v in frame.items() if k not in ("type", "previous_response_id")}
        body["input"] = full
        body["stream"] = True
        rec = RecordedRequest(
            method="WS", path=request.path, query=request.rel_url.raw_query_string, headers=headers,
            body=msg.data.encode(), json=body, dialect="openai", kind="responses",
        )
        fake.requests.append(rec)
        fault = fake._take_fault(request.path)
        if fault is not None and fault.drop_connection:
            await ws.close()
            break
        if fault is not None and fault.status is not None:
            await ws.send_str(_error(fault.status, "fake_fault", f"fake upstream error {fault.status}"))
            continue
        call = Call(dialect="openai", kind="responses", method="POST", path=request.path, headers=lowered,
                    json=body, model=body.get("model") if isinstance(body.get("model"), str) else None,
                    stream=True)
        warmup = frame.get("generate") is False
        reply = Reply(usage=Usage(0, 0)) if warmup else await fake._reply_for(call)
        response_id, output = "", []
        for _name, data in _BUILDERS["responses"].stream(call, reply, _Ids(rec)):
            event = json.loads(data)
            if event.get("type") == "response.completed":
                response_id = event["response"]["id"]
                output = event["response"]["output"]
            await ws.send_str(data)
        history[response_id] = full + output
        rec.completed = True
    return ws
