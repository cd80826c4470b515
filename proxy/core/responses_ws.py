"""The Responses API WebSocket mode as the gate sees it: frames in, requests out (pure).

On ``GET /v1/responses`` upgraded to a WebSocket (the OpenAI SDK's
``client.responses.connect()``, Codex CLI's built-in provider) every client frame
``{"type": "response.create", ...}`` is one ``POST /v1/responses`` body, answered by the
usual stream events, one JSON text frame each, one response at a time. A frame may send
only the new input items with ``previous_response_id``: the server resolves that id to
the earlier response's input and output *on this socket*. ``generate: false`` only warms
the socket up (the response has no output).

:class:`SocketHistory` keeps, per socket, the history each response continues (what the
client sent and what it received), so :meth:`SocketHistory.resolve` turns a frame into
the full request body the gate analyses — the same body the client would have POSTed.
It also knows whether upstream's own state for a response equals the client's: when the
gate changed a request (a re-injected note) or its response (a patched summary, a
blocked tool call), upstream remembers something else than the client does, so a frame
continuing that response is sent upstream in full, without ``previous_response_id``
(:func:`upstream_frame`), and both sides agree again.

Events cross to the gate's response taps as SSE events (:func:`as_sse`,
:func:`from_sse`), so one tap implementation serves HTTP streams and sockets alike.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .interventions.sse import parse_event, render_event

__all__ = [
    "CREATE",
    "TERMINAL_EVENTS",
    "Create",
    "OutputCollector",
    "SocketHistory",
    "as_sse",
    "error_event",
    "event_type",
    "frame_headers",
    "from_sse",
    "parse_create",
    "upstream_frame",
]

CREATE = "response.create"
#: Events that end the response a frame asked for.
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
#: Responses kept per socket (clients continue the latest one).
KEEP_RESPONSES = 8


def parse_create(text: str) -> dict[str, Any] | None:
    """The frame as a dict when it is a ``response.create`` event, else ``None``."""
    if '"response.create"' not in text:
        return None
    try:
        frame = json.loads(text)
    except ValueError:
        return None
    if isinstance(frame, dict) and frame.get("type") == CREATE:
        return frame
    return None


@dataclass(frozen=True, slots=True)
class Create:
    """One ``response.create`` frame, resolved.

    ``body`` is the equivalent ``POST /v1/responses`` body: the frame without ``type`` and
    ``previous_response_id``, its ``input`` the whole history (``None`` when
    ``previous_response_id`` names a response this socket never saw — the history is then
    unknown). ``incremental`` says upstream's state for the previous response equals the
    client's, so the frame can go upstream as it is."""

    frame: dict[str, Any]
    body: dict[str, Any] | None
    previous: str | None
    incremental: bool
    warmup: bool

    @property
    def input_items(self) -> list[Any]:
        assert self.body is not None
        items = self.body.get("input")
        return items if isinstance(items, list) else []


@dataclass(slots=True)
class _Turn:
    items: list[Any]
    synced: bool


class SocketHistory:
    """What each recent response of one socket continues (see the module docstring)."""

    def __init__(self, keep: int = KEEP_RESPONSES) -> None:
        self.keep = keep
        self._turns: OrderedDict[str, _Turn] = OrderedDict()

    def resolve(self, frame: Mapping[str, Any]) -> Create:
        prev = frame.get("previous_response_id")
        prev = prev if isinstance(prev, str) and prev else None
        raw = frame.get("input")
        items: list[Any] = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
        warmup = frame.get("generate") is False
        body = {k: v for k, v in frame.items() if k not in ("type", "previous_response_id")}
        if prev is None:
            body["input"] = items
            return Create(dict(frame), body, None, True, warmup)
        turn = self._turns.get(prev)
        if turn is None:
            return Create(dict(frame), None, prev, True, warmup)
        body["input"] = turn.items + items
        return Create(dict(frame), body, prev, turn.synced, warmup)

    def remember(self, response_id: str, items: list[Any], synced: bool) -> None:
        """Record that ``response_id`` continues ``items`` (input and output, as the client
        knows them); ``synced``: upstream remembers the same."""
        self._turns[response_id] = _Turn(items, synced)
        self._turns.move_to_end(response_id)
        while len(self._turns) > self.keep:
            self._turns.popitem(last=False)

    def __len__(self) -> int:
        return len(self._turns)


def upstream_frame(create: Create, body: Mapping[str, Any] | None) -> str | None:
    """The frame to send upstream: ``None`` to send the client's frame unchanged (the gate
    changed nothing and upstream can continue the previous response), else the whole
    request (``body`` — the gate's rewrite — or the resolved one) as one frame without
    ``previous_response_id``."""
    if body is None and create.incremental:
        return None
    full = body if body is not None else create.body
    assert full is not None
    return json.dumps({"type": CREATE, **full}, ensure_ascii=False)


@dataclass(slots=True)
class OutputCollector:
    """The output items of one response as the client receives them: from
    ``response.output_item.done`` events, or the final event's ``response.output``."""

    response_id: str | None = None
    done: dict[int, Any] = field(default_factory=dict)
    final: list[Any] | None = None

    def feed(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        typ = event.get("type")
        resp = event.get("response")
        if isinstance(resp, dict) and isinstance(resp.get("id"), str):
            self.response_id = resp["id"]
        if typ == "response.output_item.done" and isinstance(event.get("item"), dict):
            index = event.get("output_index")
            self.done[index if isinstance(index, int) else len(self.done)] = event["item"]
        elif typ in TERMINAL_EVENTS and isinstance(resp, dict) and isinstance(resp.get("output"), list):
            self.final = list(resp["output"])

    def items(self) -> list[Any]:
        if self.final:
            return self.final
        return [self.done[k] for k in sorted(self.done)]


def event_type(text: str) -> str | None:
    """The ``type`` of a JSON event frame (``None`` if it is not one)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    t = obj.get("type") if isinstance(obj, dict) else None
    return t if isinstance(t, str) else None


def as_sse(text: str) -> bytes:
    """A server event frame as the SSE event an HTTP stream would carry."""
    return render_event(text, event_type(text))


def from_sse(raw: bytes) -> str | None:
    """The frame text of an SSE event a tap emitted (``None`` if it carries no data)."""
    return parse_event(raw).data


def error_event(status: int, message: str, *, code: str, type: str = "invalid_request_error",
                param: str | None = None, headers: Mapping[str, str] | None = None) -> str:
    """An ``error`` event for a refused frame, readable both ways clients read it: the
    OpenAI SDKs take ``code``/``message``/``param`` at the top level; Codex CLI takes
    ``status`` and ``error`` (a 4xx status is final for it: no retry)."""
    err = {"type": type, "code": code, "message": message, "param": param}
    event: dict[str, Any] = {"type": "error", "status": status, "code": code, "message": message,
                             "param": param, "error": err}
    if headers:
        event["headers"] = dict(headers)
    return json.dumps(event, ensure_ascii=False)


def frame_headers(handshake: Mapping[str, str], frame: Mapping[str, Any]) -> dict[str, str]:
    """The request headers of one frame: the handshake's, with the per-request metadata a
    client puts in the frame's ``client_metadata`` under a header name (Codex sends
    ``x-codex-turn-metadata`` there: its ``request_kind`` says turn, compaction …)."""
    out = dict(handshake)
    meta = frame.get("client_metadata")
    if isinstance(meta, Mapping):
        for k, v in meta.items():
            if isinstance(k, str) and isinstance(v, str) and k.lower().startswith("x-"):
                out[k.lower()] = v
    return out
