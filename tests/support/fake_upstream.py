"""An in-process fake model server speaking the real OpenAI and Anthropic wire formats.

Use it as the upstream behind the proxy (or call it directly) in end-to-end tests.
Responses are a pure function of the request (ids are derived from a hash of the
request), so the same call made directly and through the proxy yields identical
bodies and events — that is what the pass-through tests compare.

Endpoints
---------
OpenAI:    POST /v1/chat/completions (tools, ``stream``, ``stream_options.include_usage``)
           POST /v1/completions, POST /v1/responses (JSON and SSE events),
           GET /v1/responses upgraded to a WebSocket (``response.create`` frames,
           ``previous_response_id`` resolved per socket; :mod:`tests.support.fake_responses_ws`),
           POST /v1/embeddings (float or ``encoding_format: base64``),
           GET /v1/models, GET /v1/models/{id}
Anthropic: POST /v1/messages (text + tool_use; SSE with message_start,
           content_block_start/delta (text_delta, input_json_delta)/stop, ping,
           message_delta, message_stop), POST /v1/messages/count_tokens,
           GET /v1/models (when ``anthropic-version`` is sent)
Raw:       ANY /v1/echo/... echoes the request body and content type back unchanged,
           with ``x-echo-method`` / ``x-echo-path`` headers (for raw pass-through tests).
Anything else under /v1/ answers 404 in the caller's dialect.

Scripting
---------
``FakeUpstream(responder)`` — ``responder(call: Call) -> Reply`` (sync or async) decides
what the model "says". :class:`Call` gives the dialect, API kind, parsed body, model,
headers and helpers ``last_user_text()`` / ``all_text()``. :class:`Reply` holds
``text``, ``tool_calls`` (:class:`ToolCall`), ``usage`` (:class:`Usage`), optional
``stop_reason``, ``chunks`` (how text is split into stream deltas), ``raw`` (a JSON
body sent verbatim instead of the generated one) and ``status`` (an HTTP error answered
instead, ``text`` its message in the dialect's error body). The default responder echoes:
``"echo: <last user text>"``. ``fake.script(r1, r2, ...)`` queues replies used before
the responder, one per model call (chat, completions, responses, messages).
A responder can react to the tools it is offered and to the tool results it is given,
in any dialect: ``call.tools()`` (``[{"name", "description"}]``), ``call.tool(prefix)``
(the first offered tool whose name starts with ``prefix``), ``call.tool_calls_made()``
(``(id, name, arguments)`` of every tool call in the history) and
``call.results_of(name)`` (the text of every result of a call to ``name``, oldest first).

Faults
------
``fake.inject(Fault(...), times=1)`` applies to the next matching request(s):
``status``/``body``/``headers`` (error reply; default body is the dialect's error JSON),
``delay`` (seconds before the response starts; use for timeouts),
``stall_after_events`` (stream N events then hang until the client goes away),
``drop_after_events`` (stream N events then cut the connection),
``drop_connection`` (close the socket without answering), ``path`` (only requests
whose path starts with it).
Stream shape knobs (attributes, may be changed any time): ``stream_delay`` (seconds
between SSE events — proves the first byte does not wait for the last),
``write_size`` (split the SSE bytes into writes of N bytes, so events straddle TCP
chunks), ``line_ending`` (``"\\n"`` or ``"\\r\\n"``).

Observation
-----------
``fake.requests``: every :class:`RecordedRequest` (method, path, query, headers as
received, raw ``body`` bytes, parsed ``json``, ``dialect``, ``kind``).
``fake.disconnects``: requests whose client went away before the response completed.
``await fake.wait_for_disconnects(n, timeout)`` / ``fake.wait_for_disconnects_sync(...)``
poll for them (safe whichever thread/loop the fake runs on).

Lifecycle
---------
``url = await fake.start()`` (binds 127.0.0.1 on a free port, returns
``http://127.0.0.1:PORT``); ``fake.openai_base_url`` is ``url + "/v1"``;
``await fake.close()``. Tests that use sync SDKs run it in a background loop via
``tests.support.BackgroundLoop``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json
import re
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "Call",
    "FakeUpstream",
    "Fault",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ToolCall",
    "Usage",
    "echo_responder",
]

Dialect = Literal["openai", "anthropic"]
CREATED = 1_700_000_000
MODEL_CALL_KINDS = frozenset({"chat", "completions", "responses", "messages"})


# ---------------------------------------------------------------------- data types


@dataclass(frozen=True)
class ToolCall:
    """A tool call the fake model makes. ``arguments`` dict is JSON-encoded compactly."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), separators=(",", ":"))


@dataclass(frozen=True)
class Usage:
    """Token usage to report; ``None`` fields are computed (whitespace word counts)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class Reply:
    """What the fake model answers (see module docstring)."""

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    usage: Usage | None = None
    stop_reason: str | None = None
    chunks: Sequence[str] | None = None
    #: Responses API only: output items sent as they are after the message and tool calls
    #: (e.g. ``{"type": "compaction", "encrypted_content": ...}``)
    items: Sequence[Mapping[str, Any]] = ()
    raw: Any = None
    #: answer with this HTTP error status instead (``text`` is the error message, in the
    #: dialect's error body): e.g. 400 "prompt is too long: …" to make an agent compact
    status: int | None = None


@dataclass(frozen=True)
class Call:
    """A parsed request as a responder sees it."""

    dialect: Dialect
    kind: str
    method: str
    path: str
    headers: Mapping[str, str]
    json: Any
    model: str | None
    stream: bool

    def messages(self) -> list[Any]:
        body = self.json if isinstance(self.json, dict) else {}
        if self.kind == "responses":
            items = body.get("input")
            if isinstance(items, str):
                return [{"role": "user", "content": items}]
            return list(items or [])
        return list(body.get("messages") or [])

    def tools(self) -> list[dict[str, str]]:
        """The tools offered, as ``{"name", "description"}`` (every dialect's spelling)."""
        body = self.json if isinstance(self.json, dict) else {}
        out: list[dict[str, str]] = []
        for t in body.get("tools") or ():
            if not isinstance(t, dict):
                continue
            spec = t.get("function") if isinstance(t.get("function"), dict) else t
            if isinstance(spec.get("name"), str):
                out.append({"name": spec["name"], "description": str(spec.get("description") or "")})
        return out

    def tool(self, prefix: str) -> dict[str, str] | None:
        """The first offered tool whose name starts with ``prefix``."""
        return next((t for t in self.tools() if t["name"].startswith(prefix)), None)

    def tool_calls_made(self) -> list[tuple[str, str, str]]:
        """``(call id, tool name, arguments JSON)`` of every tool call in the history."""
        out: list[tuple[str, str, str]] = []
        for m in self.messages():
            if not isinstance(m, dict):
                continue
            for tc in m.get("tool_calls") or ():  # OpenAI chat
                fn = tc.get("function") or {}
                out.append((str(tc.get("id")), str(fn.get("name")), str(fn.get("arguments") or "")))
            if m.get("type") == "function_call":  # Responses
                out.append((str(m.get("call_id")), str(m.get("name")), str(m.get("arguments") or "")))
            if isinstance(m.get("content"), list):  # Anthropic
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_use":
                        out.append((str(b.get("id")), str(b.get("name")), json.dumps(b.get("input") or {})))
        return out

    def results_of(self, name: str) -> list[str]:
        """The text of every result of a call to tool ``name`` (oldest first)."""
        ids = {cid for cid, n, _ in self.tool_calls_made() if n == name}
        out: list[str] = []
        for m in self.messages():
            if not isinstance(m, dict):
                continue
            if m.get("role") == "tool" and m.get("tool_call_id") in ids:
                out.append(_text_of(m.get("content")))
            elif m.get("type") == "function_call_output" and m.get("call_id") in ids:
                out.append(_text_of(m.get("output")))
            elif isinstance(m.get("content"), list):
                for b in m["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") in ids:
                        out.append(_text_of(b.get("content")))
        return out

    def last_user_text(self) -> str:
        """Text of the last user message (or the prompt for /v1/completions)."""
        body = self.json if isinstance(self.json, dict) else {}
        if self.kind == "completions":
            prompt = body.get("prompt", "")
            return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        for message in reversed(self.messages()):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""

    def all_text(self) -> str:
        """Every piece of text in the request (system, messages, tool results)."""
        body = self.json if isinstance(self.json, dict) else {}
        parts: list[str] = []
        for key in ("system", "instructions", "prompt", "input"):
            value = body.get(key)
            if isinstance(value, (str, list)) and key != "input":
                parts.append(_text_of(value))
        for message in self.messages():
            if isinstance(message, dict):
                parts.append(_text_of(message.get("content")))
                parts.append(_text_of(message.get("output")))
        return "\n".join(p for p in parts if p)


Responder = Callable[[Call], "Reply | Awaitable[Reply]"]


@dataclass
class RecordedRequest:
    """One request exactly as the fake received it."""

    method: str
    path: str
    query: str
    headers: CIMultiDictProxy[str]
    body: bytes
    json: Any
    dialect: Dialect
    kind: str
    received_at: float = field(default_factory=time.monotonic)
    completed: bool = False
    disconnected: bool = False


@dataclass(frozen=True)
class Fault:
    """A misbehaviour applied to the next matching request(s); see module docstring."""

    status: int | None = None
    body: bytes | str | Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    stall_after_events: int | None = None
    drop_after_events: int | None = None
    drop_connection: bool = False
    path: str | None = None


def echo_responder(call: Call) -> Reply:
    """Default responder: ``echo: <last user text>``."""
    return Reply(text=f"echo: {call.last_user_text()}")


# ------------------------------------------------------------------------- helpers


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif "content" in part:
                    out.append(_text_of(part["content"]))
                elif isinstance(part.get("output"), str):
                    out.append(part["output"])
        return "\n".join(o for o in out if o)
    if isinstance(content, dict):
        return _text_of([content])
    return str(content)


def _count(text: str) -> int:
    return len(text.split())


_WORDS = re.compile(r"\S+\s*|\s+")


def _split_text(text: str, chunks: Sequence[str] | None) -> list[str]:
    if chunks is not None:
        return list(chunks)
    pieces = _WORDS.findall(text)
    return pieces or [text]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _split_args(arguments: str) -> list[str]:
    if len(arguments) <= 8:
        return [arguments]
    step = max(1, len(arguments) // 3)
    return [arguments[i : i + step] for i in range(0, len(arguments), step)]


def _dialect_of(path: str, headers: Mapping[str, str]) -> Dialect:
    if path.startswith("/v1/messages"):
        return "anthropic"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def _error_json(dialect: Dialect, status: int, message: str) -> dict[str, Any]:
    if dialect == "anthropic":
        etype = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": message}}
    etype = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "server_error")
    return {"error": {"message": message, "type": etype, "param": None, "code": None}}


# -------------------------------------------------------------------------- server


class FakeUpstream:
    """Scriptable fake provider (see module docstring for the full API)."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        stream_delay: float = 0.0,
        write_size: int | None = None,
        line_ending: str = "\n",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.responder: Responder = responder or echo_responder
        #: serve HTTPS with this context (``url`` is then ``https://...``)
        self.ssl_context = ssl_context
        self.stream_delay = stream_delay
        self.write_size = write_size
        self.line_ending = line_ending
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[RecordedRequest] = []
        self._faults: deque[Fault] = deque()
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.app = self._make_app()

    # -- scripting -----------------------------------------------------------------

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Apply ``fault`` to the next ``times`` matching requests."""
        with self._lock:
            for _ in range(times):
                self._faults.append(fault)

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next model calls (before the responder is asked)."""
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        """Forget recorded requests, queued faults and scripted replies."""
        with self._lock:
            self.requests.clear()
            self.disconnects.clear()
            self._faults.clear()
            self._script.clear()

    def _take_fault(self, path: str) -> Fault | None:
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault.path is None or path.startswith(fault.path):
                    del self._faults[i]
                    return fault
        return None

    async def _reply_for(self, call: Call) -> Reply:
        with self._lock:
            scripted = (
                self._script.popleft() if self._script and call.kind in MODEL_CALL_KINDS else None
            )
        if scripted is not None:
            return scripted
        result = self.responder(call)
        if inspect.isawaitable(result):
            result = await result
        assert isinstance(result, Reply), "responder must return a Reply"
        return result

    # -- observation -----------------------------------------------------------------

    def model_requests(self) -> list[RecordedRequest]:
        """Requests that reached a model endpoint (not models/echo/404)."""
        return [r for r in self.requests if r.kind in MODEL_CALL_KINDS]

    async def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Poll until ``count`` client disconnects were observed (any loop/thread)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.disconnects) >= count:
                return True
            await asyncio.sleep(0.01)
        return len(self.disconnects) >= count

    def wait_for_disconnects_sync(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Blocking variant of :meth:`wait_for_disconnects` for sync tests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.disconnects) >= count:
                return True
            time.sleep(0.01)
        return len(self.disconnects) >= count

    # -- lifecycle -----------------------------------------------------------------

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0 = free port); returns the origin URL."""
        runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=self.ssl_context)
        await site.start()
        self._runner = runner
        bound = runner.addresses[0][1]
        self.url = f"{'https' if self.ssl_context else 'http'}://{host}:{bound}"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- app -----------------------------------------------------------------------

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("upgrade", "").lower() == "websocket" and request.path == "/v1/responses":
            from tests.support.fake_responses_ws import serve_responses_websocket

            return await serve_responses_websocket(self, request)
        body = await request.read()
        path = request.path
        headers = request.headers
        dialect = _dialect_of(path, headers)
        kind = _kind_of(request.method, path)
        parsed: Any = None
        if body:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
        rec = RecordedRequest(
            method=request.method,
            path=path,
            query=request.rel_url.raw_query_string,
            headers=CIMultiDictProxy(CIMultiDict(headers)),
            body=body,
            json=parsed,
            dialect=dialect,
            kind=kind,
        )
        self.requests.append(rec)
        try:
            resp = await self._respond(request, rec)
            rec.completed = True
            return resp
        except (asyncio.CancelledError, ConnectionError):
            rec.disconnected = True
            self.disconnects.append(rec)
            raise

    async def _respond(self, request: web.Request, rec: RecordedRequest) -> web.StreamResponse:
        fault = self._take_fault(rec.path)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.drop_connection:
                if request.transport is not None:
                    request.transport.close()
                return web.Response()  # never delivered: the socket is already closed
            if fault.status is not None:
                return self._fault_response(rec, fault)
        ids = _Ids(rec)
        if rec.kind == "echo":
            resp = web.Response(status=200, body=rec.body)
            resp.headers["content-type"] = request.headers.get(
                "content-type", "application/octet-stream"
            )
            resp.headers["x-echo-method"] = rec.method
            resp.headers["x-echo-path"] = request.raw_path
            resp.headers.update(ids.headers(rec.dialect))
            return resp
        if rec.kind == "models":
            return self._json(ids, rec.dialect, _models_body(rec, ids))
        if rec.kind == "unknown":
            return self._json(
                ids, rec.dialect, _error_json(rec.dialect, 404, f"Unknown route {rec.path}"), 404
            )
        if not isinstance(rec.json, dict):
            return self._json(
                ids, rec.dialect, _error_json(rec.dialect, 400, "body must be a JSON object"), 400
            )
        body = rec.json
        model = body.get("model") if isinstance(body.get("model"), str) else None
        call = Call(
            dialect=rec.dialect,
            kind=rec.kind,
            method=rec.method,
            path=rec.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            json=body,
            model=model,
            stream=body.get("stream") is True,
        )
        if rec.kind == "embeddings":
            return self._json(ids, rec.dialect, _embeddings_body(body, ids))
        if rec.kind == "count_tokens":
            return self._json(ids, rec.dialect, {"input_tokens": max(1, _count(call.all_text()))})
        reply = await self._reply_for(call)
        if reply.status is not None and reply.status >= 400:
            message = reply.text or f"fake upstream error {reply.status}"
            return self._json(ids, rec.dialect, _error_json(rec.dialect, reply.status, message), reply.status)
        if reply.raw is not None:
            return self._json(ids, rec.dialect, reply.raw)
        builder = _BUILDERS[rec.kind]
        if call.stream:
            events = builder.stream(call, reply, ids)
            return await self._stream(request, ids, rec.dialect, events, fault)
        return self._json(ids, rec.dialect, builder.complete(call, reply, ids))

    def _fault_response(self, rec: RecordedRequest, fault: Fault) -> web.Response:
        assert fault.status is not None
        raw = fault.body
        if raw is None:
            payload = _dumps(
                _error_json(rec.dialect, fault.status, f"fake upstream error {fault.status}")
            ).encode()
        elif isinstance(raw, bytes):
            payload = raw
        elif isinstance(raw, str):
            payload = raw.encode()
        else:
            payload = _dumps(dict(raw)).encode()
        resp = web.Response(status=fault.status, body=payload, content_type="application/json")
        resp.headers.update(_Ids(rec).headers(rec.dialect))
        resp.headers.update(fault.headers)
        return resp

    def _json(self, ids: _Ids, dialect: Dialect, payload: Any, status: int = 200) -> web.Response:
        resp = web.Response(
            status=status, body=_dumps(payload).encode(), content_type="application/json"
        )
        resp.headers.update(ids.headers(dialect))
        return resp

    async def _stream(
        self,
        request: web.Request,
        ids: _Ids,
        dialect: Dialect,
        events: Iterator[tuple[str | None, str]],
        fault: Fault | None,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        resp.headers["content-type"] = "text/event-stream; charset=utf-8"
        resp.headers["cache-control"] = "no-cache"
        resp.headers.update(ids.headers(dialect))
        await resp.prepare(request)
        nl = self.line_ending
        for n, (name, data) in enumerate(events):
            if (
                fault is not None
                and fault.stall_after_events is not None
                and n >= fault.stall_after_events
            ):
                await asyncio.Event().wait()  # until the client disconnects
            if (
                fault is not None
                and fault.drop_after_events is not None
                and n >= fault.drop_after_events
            ):
                if request.transport is not None:
                    request.transport.close()
                return resp
            if n and self.stream_delay:
                await asyncio.sleep(self.stream_delay)
            text = (f"event: {name}{nl}" if name else "") + f"data: {data}{nl}{nl}"
            payload = text.encode("utf-8")
            size = self.write_size
            if size:
                for i in range(0, len(payload), size):
                    await resp.write(payload[i : i + size])
            else:
                await resp.write(payload)
        await resp.write_eof()
        return resp


def _kind_of(method: str, path: str) -> str:
    p = path.rstrip("/")
    if p.startswith("/v1/echo"):
        return "echo"
    if method in ("GET", "HEAD") and (p == "/v1/models" or p.startswith("/v1/models/")):
        return "models"
    table = {
        "/v1/chat/completions": "chat",
        "/v1/completions": "completions",
        "/v1/responses": "responses",
        "/v1/embeddings": "embeddings",
        "/v1/messages": "messages",
        "/v1/messages/count_tokens": "count_tokens",
    }
    if method == "POST" and p in table:
        return table[p]
    return "unknown"


class _Ids:
    """Deterministic ids and headers derived from the request bytes."""

    def __init__(self, rec: RecordedRequest) -> None:
        digest = hashlib.sha256(f"{rec.method} {rec.path}\n".encode() + rec.body).hexdigest()
        self.seed = digest[:24]

    def make(self, prefix: str, n: int = 0) -> str:
        return f"{prefix}{self.seed}{n:02d}" if n else f"{prefix}{self.seed}"

    def headers(self, dialect: Dialect) -> dict[str, str]:
        if dialect == "anthropic":
            return {
                "request-id": f"req_{self.seed}",
                "anthropic-ratelimit-requests-limit": "4000",
                "anthropic-ratelimit-requests-remaining": "3999",
                "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z",
                "x-fake-upstream": "1",
            }
        return {
            "x-request-id": f"req_{self.seed}",
            "openai-processing-ms": "12",
            "x-ratelimit-limit-requests": "10000",
            "x-ratelimit-remaining-requests": "9999",
            "x-ratelimit-reset-requests": "6ms",
            "x-fake-upstream": "1",
        }


def _usage_numbers(call: Call, reply: Reply) -> tuple[int, int]:
    usage = reply.usage or Usage()
    inp = usage.input_tokens if usage.input_tokens is not None else max(1, _count(call.all_text()))
    out_text = (reply.text or "") + " ".join(t.arguments_json() for t in reply.tool_calls)
    out = usage.output_tokens if usage.output_tokens is not None else max(1, _count(out_text))
    return inp, out


def _models_body(rec: RecordedRequest, ids: _Ids) -> Any:
    names = ["gpt-4o", "gpt-4o-mini", "claude-haiku-4-5"]
    single = rec.path.rstrip("/").removeprefix("/v1/models").strip("/")
    if rec.dialect == "anthropic":
        data = [
            {"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"}
            for n in names
        ]
        if single:
            return {
                "type": "model",
                "id": single,
                "display_name": single,
                "created_at": "2025-01-01T00:00:00Z",
            }
        return {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    if single:
        return {"id": single, "object": "model", "created": CREATED, "owned_by": "fake"}
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": CREATED, "owned_by": "fake"} for n in names
        ],
    }


def _embeddings_body(body: Mapping[str, Any], ids: _Ids) -> Any:
    inputs = body.get("input")
    items = (
        inputs
        if isinstance(inputs, list) and not all(isinstance(i, int) for i in inputs)
        else [inputs]
    )
    data = []
    total = 0
    for index, item in enumerate(items):
        text = item if isinstance(item, str) else _dumps(item)
        total += max(1, _count(text))
        seed = hashlib.sha256(text.encode()).digest()
        vector = [round((b - 128) / 128.0, 6) for b in seed[:8]]
        emb: Any = vector
        if body.get("encoding_format") == "base64":
            emb = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": emb})
    return {
        "object": "list",
        "data": data,
        "model": body.get("model", "text-embedding-3-small"),
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }


# ------------------------------------------------------------------ wire formats


class _Builder:
    def complete(self, call: Call, reply: Reply, ids: _Ids) -> Any:
        raise NotImplementedError

    def stream(self, call: Call, reply: Reply, ids: _Ids) -> Iterator[tuple[str | None, str]]:
        raise NotImplementedError


class _ChatBuilder(_Builder):
    def _tool_calls(self, reply: Reply, ids: _Ids) -> list[dict[str, Any]]:
        return [
            {
                "id": tc.id or ids.make("call_", i + 1),
                "type": "function",
                "function": {"name": tc.name, "arguments": tc.arguments_json()},
            }
            for i, tc in enumerate(reply.tool_calls)
        ]

    def _finish(self, reply: Reply) -> str:
        return reply.stop_reason or ("tool_calls" if reply.tool_calls else "stop")

    def _usage(self, call: Call, reply: Reply) -> dict[str, Any]:
        inp, out = _usage_numbers(call, reply)
        return {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def complete(self, call: Call, reply: Reply, ids: _Ids) -> Any:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text,
            "refusal": None,
            "annotations": [],
        }
        if reply.tool_calls:
            message["tool_calls"] = self._tool_calls(reply, ids)
        return {
            "id": ids.make("chatcmpl-"),
            "object": "chat.completion",
            "created": CREATED,
            "model": call.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish(reply),
                }
            ],
            "usage": self._usage(call, reply),
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

    def stream(self, call: Call, reply: Reply, ids: _Ids) -> Iterator[tuple[str | None, str]]:
        body = call.json
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        base = {
            "id": ids.make("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": call.model,
            "service_tier": "default",
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            payload = dict(base)
            payload["choices"] = [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            ]
            if include_usage:
                payload["usage"] = None
            return _dumps(payload)

        yield (
            None,
            chunk(
                {
                    "role": "assistant",
                    "content": "" if reply.text is not None else None,
                    "refusal": None,
                }
            ),
        )
        if reply.text:
            for piece in _split_text(reply.text, reply.chunks):
                yield None, chunk({"content": piece})
        for i, tc in enumerate(self._tool_calls(reply, ids)):
            yield (
                None,
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": tc["id"],
                                "type": "function",
                                "function": {"name": tc["function"]["name"], "arguments": ""},
                            }
                        ]
                    }
                ),
            )
            for part in _split_args(tc["function"]["arguments"]):
                yield None, chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        yield None, chunk({}, self._finish(reply))
        if include_usage:
            payload = dict(base)
            payload["choices"] = []
            payload["usage"] = self._usage(call, reply)
            yield None, _dumps(payload)
        yield None, "[DONE]"


class _CompletionsBuilder(_Builder):
    def complete(self, call: Call, reply: Reply, ids: _Ids) -> Any:
        inp, out = _usage_numbers(call, reply)
        return {
            "id": ids.make("cmpl-"),
            "object": "text_completion",
            "created": CREATED,
            "model": call.model,
            "choices": [
                {
                    "text": reply.text or "",
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": reply.stop_reason or "stop",
                }
            ],
            "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out},
            "system_fingerprint": "fp_fake",
        }

    def stream(self, call: Call, reply: Reply, ids: _Ids) -> Iterator[tuple[str | None, str]]:
        pieces = _split_text(reply.text or "", reply.chunks)
        for n, piece in enumerate(pieces):
            last = n == len(pieces) - 1
            yield (
                None,
                _dumps(
                    {
                        "id": ids.make("cmpl-"),
                        "object": "text_completion",
                        "created": CREATED,
                        "model": call.model,
                        "choices": [
                            {
                                "text": piece,
                                "index": 0,
                                "logprobs": None,
                                "finish_reason": (reply.stop_reason or "stop") if last else None,
                            }
                        ],
                        "system_fingerprint": "fp_fake",
                    }
                ),
            )
        yield None, "[DONE]"


class _ResponsesBuilder(_Builder):
    def _items(self, reply: Reply, ids: _Ids) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.text is not None:
            items.append(
                {
                    "id": ids.make("msg_"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "output_text",
                            "text": reply.text,
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],
                }
            )
        for i, tc in enumerate(reply.tool_calls):
            items.append(
                {
                    "id": ids.make("fc_", i + 1),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": tc.id or ids.make("call_", i + 1),
                    "name": tc.name,
                    "arguments": tc.arguments_json(),
                }
            )
        items.extend(dict(item) for item in reply.items)
        return items

    def _response(self, call: Call, reply: Reply, ids: _Ids, *, done: bool) -> dict[str, Any]:
        body = call.json
        inp, out = _usage_numbers(call, reply)
        return {
            "id": ids.make("resp_"),
            "object": "response",
            "created_at": CREATED,
            "status": "completed" if done else "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": call.model,
            "output": self._items(reply, ids) if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": (
                {
                    "input_tokens": inp,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": out,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": inp + out,
                }
                if done
                else None
            ),
            "user": None,
            "metadata": {},
        }

    def complete(self, call: Call, reply: Reply, ids: _Ids) -> Any:
        return self._response(call, reply, ids, done=True)

    def stream(self, call: Call, reply: Reply, ids: _Ids) -> Iterator[tuple[str | None, str]]:
        seq = 0

        def ev(name: str, **payload: Any) -> tuple[str, str]:
            nonlocal seq
            data = {"type": name, "sequence_number": seq, **payload}
            seq += 1
            return name, _dumps(data)

        yield ev("response.created", response=self._response(call, reply, ids, done=False))
        yield ev("response.in_progress", response=self._response(call, reply, ids, done=False))
        for index, item in enumerate(self._items(reply, ids)):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield ev(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield ev(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=empty_part,
                )
                for piece in _split_text(text, reply.chunks):
                    yield ev(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                yield ev(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
                yield ev(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=item["content"][0],
                )
            elif item["type"] != "function_call":
                yield ev("response.output_item.added", output_index=index, item=item)
            else:
                yield ev(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for part in _split_args(item["arguments"]):
                    yield ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=part,
                    )
                yield ev(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            yield ev("response.output_item.done", output_index=index, item=item)
        yield ev("response.completed", response=self._response(call, reply, ids, done=True))


class _MessagesBuilder(_Builder):
    def _blocks(self, reply: Reply, ids: _Ids) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.text is not None:
            blocks.append({"type": "text", "text": reply.text})
        for i, tc in enumerate(reply.tool_calls):
            args = (
                tc.arguments
                if isinstance(tc.arguments, Mapping)
                else json.loads(tc.arguments or "{}")
            )
            blocks.append(
                {
                    "type": "tool_use",
                    "id": tc.id or ids.make("toolu_", i + 1),
                    "name": tc.name,
                    "input": dict(args),
                }
            )
        return blocks

    def _stop(self, reply: Reply) -> str:
        return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")

    def _usage(self, inp: int, out: int) -> dict[str, Any]:
        return {
            "input_tokens": inp,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": out,
            "service_tier": "standard",
        }

    def complete(self, call: Call, reply: Reply, ids: _Ids) -> Any:
        inp, out = _usage_numbers(call, reply)
        return {
            "id": ids.make("msg_"),
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": self._blocks(reply, ids),
            "stop_reason": self._stop(reply),
            "stop_sequence": None,
            "usage": self._usage(inp, out),
        }

    def stream(self, call: Call, reply: Reply, ids: _Ids) -> Iterator[tuple[str | None, str]]:
        inp, out = _usage_numbers(call, reply)
        start: dict[str, Any] = {
            "id": ids.make("msg_"),
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(inp, 1),
        }
        yield "message_start", _dumps({"type": "message_start", "message": start})
        for index, block in enumerate(self._blocks(reply, ids)):
            if block["type"] == "text":
                yield (
                    "content_block_start",
                    _dumps(
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        }
                    ),
                )
                if index == 0:
                    yield "ping", _dumps({"type": "ping"})
                for piece in _split_text(block["text"], reply.chunks):
                    yield (
                        "content_block_delta",
                        _dumps(
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "text_delta", "text": piece},
                            }
                        ),
                    )
            else:
                yield (
                    "content_block_start",
                    _dumps(
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {
                                "type": "tool_use",
                                "id": block["id"],
                                "name": block["name"],
                                "input": {},
                            },
                        }
                    ),
                )
                if index == 0:
                    yield "ping", _dumps({"type": "ping"})
                for part in _split_args(_dumps(block["input"])):
                    yield (
                        "content_block_delta",
                        _dumps(
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": part},
                            }
                        ),
                    )
            yield "content_block_stop", _dumps({"type": "content_block_stop", "index": index})
        yield (
            "message_delta",
            _dumps(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                    "usage": {"output_tokens": out},
                }
            ),
        )
        yield "message_stop", _dumps({"type": "message_stop"})


_BUILDERS: dict[str, _Builder] = {
    "chat": _ChatBuilder(),
    "completions": _CompletionsBuilder(),
    "responses": _ResponsesBuilder(),
    "messages": _MessagesBuilder(),
}
