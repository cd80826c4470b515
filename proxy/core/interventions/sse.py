"""Minimal SSE event parsing and rendering (one complete event at a time), and the base
of the stream rewriters that handle each API dialect's events in their own method
(:class:`DialectStream`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class SSEEvent:
    raw: bytes
    event: str | None
    data: str | None

    def json(self) -> Any:
        """The data parsed as JSON, or ``None`` when absent / not JSON (e.g. ``[DONE]``)."""
        if self.data is None:
            return None
        try:
            return json.loads(self.data)
        except ValueError:
            return None


def parse_event(raw: bytes) -> SSEEvent:
    event: str | None = None
    data_lines: list[str] = []
    text = raw.decode("utf-8", "replace")
    for line in text.splitlines():
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data_lines.append(value)
    return SSEEvent(raw, event, "\n".join(data_lines) if data_lines else None)


def render_event(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class DialectStream:
    """A stream rewriter fed one complete SSE event at a time: :meth:`feed` parses it and
    hands it to the handler of the stream's API — ``_feed_chat`` (OpenAI chat),
    ``_feed_responses`` (Responses API), ``_feed_anthropic`` (Anthropic ``messages``) —
    which returns the events to emit now. The one place the tripwire's
    (:class:`~.tripwire_stream.ToolCallStreamGuard`) and the summary check's
    (:class:`~.summary.SummaryStreamPatcher`) stream rewriters choose their dialect."""

    api: Literal["chat", "responses", "messages"]

    def feed(self, raw: bytes) -> list[bytes]:
        ev = parse_event(raw)
        if self.api == "chat":
            return self._feed_chat(ev)
        if self.api == "responses":
            return self._feed_responses(ev)
        return self._feed_anthropic(ev)

    def _feed_chat(self, ev: SSEEvent) -> list[bytes]:
        raise NotImplementedError

    def _feed_responses(self, ev: SSEEvent) -> list[bytes]:
        raise NotImplementedError

    def _feed_anthropic(self, ev: SSEEvent) -> list[bytes]:
        raise NotImplementedError
