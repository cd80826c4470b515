"""Minimal SSE event parsing and rendering (one complete event at a time)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


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
