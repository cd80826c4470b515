"""The tripwire (DESIGN §4.3): after a compaction, a tool call whose arguments carry an
identifier of a *dropped kind* that never appeared anywhere in the conversation is a
hallucinated binding (signal 3 of DESIGN §3).

:func:`find_hallucinations` is the pure check. :func:`tool_calls_of_json` reads the tool
calls of a non-streamed response and :func:`block_json` / :func:`annotate_json` change
it; a streamed response is guarded by :class:`.tripwire_stream.ToolCallStreamGuard`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .reject import HALLUCINATION_CODE
from .sse import render_event
from .text_actions import SUGGESTED, commands_in_text

#: ``text -> [(value, norm, kind), ...]`` — the identifier catalogue, injected.
Extractor = Callable[[str], Iterable[tuple[str, str, str]]]
TripwireAction = Literal["block", "annotate", "warn", "off"]
ToolApi = Literal["chat", "responses", "messages"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    call_id: str | None = None


def suggested_calls(text: str) -> list[ToolCall]:
    """The shell commands an assistant reply proposes in fenced blocks, as calls (the next
    action of an agent without a tool role, see :mod:`.text_actions`)."""
    return [ToolCall(SUGGESTED, cmd) for cmd in commands_in_text(text)]


@dataclass(frozen=True, slots=True)
class Hallucination:
    value: str
    kind: str
    tool_name: str
    call_id: str | None
    #: Non-sensitive dropped values of the same kind (what the model probably meant).
    expected: tuple[str, ...] = ()


def find_hallucinations(
    calls: Sequence[ToolCall],
    *,
    extract: Extractor,
    dropped_kinds: Collection[str],
    known_norms: Collection[str],
    expected_by_kind: dict[str, tuple[str, ...]] | None = None,
) -> list[Hallucination]:
    """Identifiers of a dropped kind in tool-call arguments whose normalised value is not
    in ``known_norms`` (every identifier seen in the conversation, before and after the
    compaction)."""
    if not dropped_kinds:
        return []
    out: list[Hallucination] = []
    seen: set[tuple[str, str | None]] = set()
    for call in calls:
        for value, norm, kind in extract(call.arguments):
            if kind not in dropped_kinds or norm in known_norms:
                continue
            if any(norm in k or k in norm for k in known_norms if len(k) >= 7 and len(norm) >= 7):
                continue  # prefix/suffix of a known value (short SHA of a full one, …)
            key = (norm, call.call_id)
            if key in seen:
                continue
            seen.add(key)
            out.append(
                Hallucination(value, kind, call.name, call.call_id, (expected_by_kind or {}).get(kind, ()))
            )
    return out


def in_text(found: Sequence[Hallucination]) -> bool:
    """Whether one of the findings is in a command the reply's text suggests."""
    return any(h.tool_name == SUGGESTED for h in found)


def hallucination_message(found: Sequence[Hallucination], *, stopped: bool = True) -> str:
    """What the model and the user are told; ``stopped=False`` when the action has
    already reached the client (a command suggested in streamed text)."""
    what = "stopped a tool call" if stopped else "flags the command suggested above"
    if stopped and all(h.tool_name == SUGGESTED for h in found):
        what = "stopped a suggested command"
    lines = [
        (
            f"compaction-gate {what}: after a compaction dropped identifiers of the "
            "kinds below, the model used value(s) that never appeared in this conversation "
            "(probably invented):"
        )
    ]
    for h in found:
        where = h.tool_name if h.tool_name == SUGGESTED else f"a call to {h.tool_name}"
        line = f"- `{h.value}` ({h.kind}) in {where}"
        if h.expected:
            line += "; the value recorded before the compaction: " + ", ".join(f"`{v}`" for v in h.expected)
        lines.append(line)
    if not stopped:
        lines.append("Do not run it.")
    lines.append("Use the recorded value verbatim, or re-check it with a read-only command, before acting.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- JSON


def tool_calls_of_json(api: ToolApi, body: Any) -> list[ToolCall]:
    if not isinstance(body, dict):
        return []
    calls: list[ToolCall] = []
    if api == "chat":
        for ch in body.get("choices") or ():
            for tc in ((ch or {}).get("message") or {}).get("tool_calls") or ():
                fn = tc.get("function") or {}
                calls.append(ToolCall(str(fn.get("name", "")), str(fn.get("arguments", "")), tc.get("id")))
    elif api == "responses":
        for item in body.get("output") or ():
            if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
                args = item.get("arguments", item.get("input", ""))
                calls.append(ToolCall(str(item.get("name", "")), str(args), item.get("call_id")))
    else:
        for block in body.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append(
                    ToolCall(str(block.get("name", "")), json.dumps(block.get("input", {})), block.get("id"))
                )
    return calls


def block_json(api: ToolApi, body: dict[str, Any], message: str, *, drop_text: bool = False) -> dict[str, Any]:
    """The response with its tool calls removed and ``message`` as the assistant's text,
    so no agent executes the call (the HTTP status of an upstream 200 cannot change);
    ``drop_text``: the assistant's own text goes too (it suggests the stopped command).
    (On chat the message's text is always replaced.)"""
    out = copy.deepcopy(body)
    text = "[compaction-gate] " + message
    if api == "chat":
        for ch in out.get("choices") or ():
            msg = ch.setdefault("message", {"role": "assistant"})
            msg.pop("tool_calls", None)
            msg.pop("function_call", None)
            msg["content"] = text
            ch["finish_reason"] = "stop"
    elif api == "responses":
        dropped = ("function_call", "custom_tool_call", "message") if drop_text else ("function_call", "custom_tool_call")
        out["output"] = [
            i for i in out.get("output") or () if not (isinstance(i, dict) and i.get("type") in dropped)
        ] + [
            {
                "type": "message",
                "id": "msg_compaction_gate",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    else:
        dropped_blocks = ("tool_use", "text") if drop_text else ("tool_use",)
        out["content"] = [
            b for b in out.get("content") or () if not (isinstance(b, dict) and b.get("type") in dropped_blocks)
        ] + [{"type": "text", "text": text}]
        out["stop_reason"] = "end_turn"
    return out


def annotate_json(api: ToolApi, body: dict[str, Any], message: str) -> dict[str, Any]:
    """The response with ``message`` added as assistant text next to its tool calls."""
    out = copy.deepcopy(body)
    note = "[compaction-gate warning] " + message
    if api == "chat":
        for ch in (out.get("choices") or ())[:1]:
            msg = ch.setdefault("message", {"role": "assistant"})
            msg["content"] = ((msg.get("content") or "") + "\n\n" + note).lstrip()
    elif api == "responses":
        out.setdefault("output", []).insert(
            0,
            {
                "type": "message",
                "id": "msg_compaction_gate",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": note, "annotations": []}],
            },
        )
    else:
        out.setdefault("content", []).insert(0, {"type": "text", "text": note})
    return out


def stream_error_event(api: ToolApi, message: str) -> bytes:
    """An SSE error event each official SDK raises on (OpenAI: a data object with an
    ``error`` key; Anthropic: ``event: error``)."""
    if api == "messages":
        return render_event({"type": "error", "error": {"type": "invalid_request_error", "message": message}}, "error")
    err = {"message": message, "type": "invalid_request_error", "param": None, "code": HALLUCINATION_CODE}
    if api == "responses":
        return render_event({"type": "error", "error": err, "message": message, "code": HALLUCINATION_CODE}, "error")
    return render_event({"error": err})
