"""The ``recall`` tool as a request offers it (pure): the handles, the tool's definition.

:mod:`.recall` resolves the tool's calls (the rounds); this module holds what the gate
adds to a request before any round, so the request side of the tool reads on its own:

- :class:`RecallHandle`: a spilled region as the tool describes it (stored with the
  conversation's state, see :mod:`proxy.gate.convstate`);
- the tool in each dialect's own format (OpenAI chat ``tools``, Responses ``tools``,
  Anthropic ``tools``), its description listing the handles (:func:`tool_description`,
  :func:`tool_definition`), named so it never clashes with a client tool
  (:func:`choose_name`);
- whether the client's ``tool_choice`` lets the model call it at all
  (:func:`tools_refused`), and the body with the tool added (:func:`offer`).

Nothing here does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .recall import RecallApi

__all__ = [
    "MAX_BINDINGS_PER_HANDLE",
    "MAX_HANDLES",
    "Offer",
    "RecallHandle",
    "choose_name",
    "client_tool_names",
    "describe_handle",
    "offer",
    "tool_definition",
    "tool_description",
    "tools_refused",
]

#: Handles described in the tool (most recent first); bindings listed per handle.
MAX_HANDLES = 8
MAX_BINDINGS_PER_HANDLE = 12


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """A spilled region as the tool describes it: its handle, which messages of the
    history before the compaction it holds, when they were first and last seen (epoch
    seconds, ``None`` when unknown) and the identifiers in it (``(value, kind)``, never
    a secret)."""

    handle: str
    messages: int
    first_index: int
    last_index: int
    since: float | None
    until: float | None
    bindings: tuple[tuple[str, str], ...] = ()
    expires: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "handle": self.handle,
            "messages": self.messages,
            "first_index": self.first_index,
            "last_index": self.last_index,
            "since": self.since,
            "until": self.until,
            "bindings": [list(b) for b in self.bindings],
            "expires": self.expires,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecallHandle:
        return cls(
            handle=str(d["handle"]),
            messages=int(d.get("messages") or 0),
            first_index=int(d.get("first_index") or 0),
            last_index=int(d.get("last_index") or 0),
            since=d.get("since"),
            until=d.get("until"),
            bindings=tuple((str(v), str(k)) for v, k in d.get("bindings") or ()),
            expires=float(d.get("expires") or 0.0),
        )



def _when(t: float | None) -> str:
    return "?" if t is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def describe_handle(h: RecallHandle) -> str:
    line = (
        f"- `{h.handle}`: {h.messages} message(s) (indices {h.first_index}–{h.last_index} of the history "
        f"before the compaction), seen {_when(h.since)} – {_when(h.until)}"
    )
    if h.bindings:
        shown = h.bindings[:MAX_BINDINGS_PER_HANDLE]
        line += "; identifiers in it: " + ", ".join(f"`{v}` ({k})" for v, k in shown)
        if len(h.bindings) > len(shown):
            line += f" and {len(h.bindings) - len(shown)} more"
    return line


def tool_description(handles: Sequence[RecallHandle]) -> str:
    """The tool's description: what it is for, then each handle (deterministic for the
    same handles, so a prompt cache keeps hitting)."""
    lines = [
        "Earlier turns of this conversation were compacted (summarized or cut) and kept "
        "outside the context by compaction-gate. Call this tool to read them back verbatim "
        "whenever you need a value the summary does not state exactly (a revision, an id, "
        "a token, a path, the state before a change) instead of guessing or re-deriving it.",
        "Stored regions:",
        *(describe_handle(h) for h in handles[:MAX_HANDLES]),
        "Arguments: `handle` (required, one of the above); `query` (optional): return only "
        "the passages that mention this text.",
    ]
    return "\n".join(lines)


def _parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "handle": {"type": "string", "description": "The stored region's handle (spill_…)."},
            "query": {
                "type": "string",
                "description": "Optional: return only the passages that mention this text.",
            },
        },
        "required": ["handle"],
        "additionalProperties": False,
    }


def tool_definition(api: RecallApi, name: str, handles: Sequence[RecallHandle]) -> dict[str, Any]:
    """The recall tool in ``api``'s own tool format."""
    desc = tool_description(handles)
    if api == "chat":
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": _parameters()}}
    if api == "responses":
        return {"type": "function", "name": name, "description": desc, "parameters": _parameters(), "strict": False}
    return {"name": name, "description": desc, "input_schema": _parameters()}


def client_tool_names(api: RecallApi, body: Mapping[str, Any]) -> set[str]:
    """Names of the tools the client itself declared (every dialect's spelling)."""
    names: set[str] = set()
    for t in body.get("tools") or ():
        if not isinstance(t, Mapping):
            continue
        for holder in (t, t.get("function"), t.get("custom")):
            if isinstance(holder, Mapping) and isinstance(holder.get("name"), str):
                names.add(holder["name"])
    for f in body.get("functions") or ():  # legacy chat functions
        if isinstance(f, Mapping) and isinstance(f.get("name"), str):
            names.add(f["name"])
    return names


def choose_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_2``, ``base_3`` … — the first no client tool is called."""
    if base not in taken:
        return base
    k = 2
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def tools_refused(api: RecallApi, body: Mapping[str, Any]) -> str | None:
    """Why the model could not call the tool in this request (``None``: it can): the
    client forbids tools (``tool_choice: none``, Anthropic ``{"type": "none"}``), forces
    or restricts the choice to its own tools, or uses the legacy chat ``functions``."""
    if api == "chat" and (body.get("functions") is not None or body.get("function_call") is not None):
        return "legacy_functions"
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if api == "messages":
        kind = choice.get("type") if isinstance(choice, Mapping) else choice
        if kind == "none":
            return "tool_choice_none"
        return None if kind in ("auto", "any") else "tool_choice_forced"
    if choice == "none":
        return "tool_choice_none"
    if choice in ("auto", "required"):
        return None
    return "tool_choice_forced"


@dataclass(frozen=True, slots=True)
class Offer:
    """A request body with the recall tool added, and the tool's name in it."""

    body: dict[str, Any]
    name: str


def offer(api: RecallApi, body: Mapping[str, Any], base_name: str, handles: Sequence[RecallHandle]) -> Offer | str:
    """``body`` with the recall tool added (a shallow copy with a new ``tools`` list), or
    the reason it cannot be offered (see :func:`tools_refused`)."""
    refused = tools_refused(api, body)
    if refused is not None:
        return refused
    if not handles:
        return "no_handles"
    name = choose_name(base_name, client_tool_names(api, body))
    out = dict(body)
    out["tools"] = [*(body.get("tools") or ()), tool_definition(api, name, handles)]
    return Offer(out, name)
