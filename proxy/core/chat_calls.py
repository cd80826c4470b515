"""Tool calls of one streamed OpenAI chat completion, assembled from their fragments.

A chat stream sends each tool call in pieces under ``choices[].delta.tool_calls``, keyed
by ``index``: the id (once), the function name (whole, in the first piece) and the
arguments (in as many pieces as the server likes). Every reader of a streamed turn — the
reply's reassembly, the tripwire's hold-and-check, the recall rounds' merge — needs the
same calls out of those pieces; this is the one place that reads them.

Pure, no I/O; malformed pieces (not a mapping, a non-integer index, a non-string name)
are skipped or read as absent, never raised: observing a stream must not break it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChatToolCalls", "StreamedCall", "piece_index"]


@dataclass(slots=True)
class StreamedCall:
    """One tool call as assembled so far."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    @property
    def args(self) -> str:
        return "".join(self.arguments)


def piece_index(piece: Mapping[str, Any]) -> int:
    """The ``index`` a tool-call piece belongs to (0 when absent or not an integer)."""
    i = piece.get("index", 0)
    return i if isinstance(i, int) and not isinstance(i, bool) else 0


def _name(so_far: str, piece: str) -> str:
    """The name after ``piece``: OpenAI sends it whole once; a server that repeats it
    (whole, or as a growing prefix) in later pieces is not doubled; a name really split
    across pieces is joined."""
    if not so_far or piece.startswith(so_far):
        return piece
    return so_far + piece


class ChatToolCalls:
    """The tool calls of one choice of a chat stream, by ``index``."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, StreamedCall] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, delta: Mapping[str, Any]) -> bool:
        """Take the tool-call pieces of one ``delta``; whether it carried any."""
        pieces = delta.get("tool_calls")
        if not isinstance(pieces, list):
            return False
        took = False
        for piece in pieces:
            if not isinstance(piece, Mapping):
                continue
            took = True
            call = self._calls.setdefault(piece_index(piece), StreamedCall())
            if isinstance(piece.get("id"), str) and piece["id"]:
                call.id = piece["id"]
            fn = piece.get("function")
            if isinstance(fn, Mapping):
                if isinstance(fn.get("name"), str) and fn["name"]:
                    call.name = _name(call.name, fn["name"])
                if isinstance(fn.get("arguments"), str):
                    call.arguments.append(fn["arguments"])
        return took

    def indexed(self) -> list[tuple[int, StreamedCall]]:
        """``(index, call)`` pairs in ``index`` order."""
        return sorted(self._calls.items(), key=lambda kv: kv[0])

    def calls(self) -> list[StreamedCall]:
        """The calls in ``index`` order."""
        return [c for _, c in self.indexed()]

    def as_message_field(self, *, missing_id: str | None = None) -> list[dict[str, Any]]:
        """The calls as a chat message's ``tool_calls`` (``missing_id`` where a server sent
        none)."""
        return [
            {"id": c.id if c.id is not None else missing_id, "type": "function",
             "function": {"name": c.name, "arguments": c.args}}
            for c in self.calls()
        ]
