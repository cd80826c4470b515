"""``recall``: the tool that makes a spilled compaction reversible (pure parts).

When the gate spilled the region a compaction removed (:mod:`.spill`), it can offer the
model a tool to read that region back. The gate resolves the tool's calls itself and
asks upstream again; the client never sees them. The tool as a request offers it (the
handles, its definition in each dialect, whether ``tool_choice`` allows it:
:func:`.recall_tool.offer`) is in :mod:`.recall_tool`. This module holds what is pure in
resolving its calls:

- the recall calls in a model's turn (:func:`turn_of_json`, :func:`recall_calls`);
- the follow-up request: the previous round's body plus the model's turn (its recall
  calls, not the client tools it called in the same turn — the model is asked again and
  makes those again knowing what it recalled) and one result per call
  (:func:`followup_body`);
- the final answer: the last round's body with ``usage`` summed over the rounds
  (:func:`final_json`), or, when the rounds ran out, the turn without its recall calls
  (:func:`strip_json`);
- what a call returns: the stored region, or only the passages that mention ``query``,
  cut to a byte limit (:func:`recall_result`).

Streams are merged in :mod:`.recall_stream`. Nothing here does I/O.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

RecallApi = Literal["chat", "responses", "messages"]

#: Item types of a Responses API turn that call a tool the client runs.
RESPONSES_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "computer_call"})

PASSAGE_HEAD = "--- ["


# --------------------------------------------------------------------------- the turn


@dataclass(frozen=True, slots=True)
class TurnCall:
    """A tool call in a model's turn."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class RecallCall:
    """A call of the recall tool with its parsed arguments (``problem`` when they are not
    a JSON object with a string ``handle``)."""

    call_id: str
    handle: str | None
    query: str | None
    problem: str | None = None


def turn_of_json(api: RecallApi, body: Any) -> Any:
    """The model's turn in a complete response body: the chat ``message``, the Anthropic
    ``content`` list, the Responses ``output`` list (``None`` when there is none)."""
    if not isinstance(body, Mapping):
        return None
    if api == "chat":
        choices = body.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            msg = choices[0].get("message")
            return msg if isinstance(msg, Mapping) else None
        return None
    key = "content" if api == "messages" else "output"
    value = body.get(key)
    return value if isinstance(value, list) else None


def turn_calls(api: RecallApi, turn: Any) -> list[TurnCall]:
    """Every tool call of a turn, in order."""
    out: list[TurnCall] = []
    if api == "chat":
        if not isinstance(turn, Mapping):
            return out
        for tc in turn.get("tool_calls") or ():
            if isinstance(tc, Mapping):
                fn = tc.get("function") or {}
                out.append(TurnCall(str(tc.get("id") or ""), str(fn.get("name") or ""), str(fn.get("arguments") or "")))
        return out
    for item in turn or ():
        if not isinstance(item, Mapping):
            continue
        if api == "messages" and item.get("type") == "tool_use":
            args = item.get("input")
            text = args if isinstance(args, str) else json.dumps(args if args is not None else {})
            out.append(TurnCall(str(item.get("id") or ""), str(item.get("name") or ""), text))
        elif api == "responses" and item.get("type") in RESPONSES_CALLS:
            args = item.get("arguments", item.get("input", ""))
            out.append(TurnCall(str(item.get("call_id") or ""), str(item.get("name") or ""), str(args)))
    return out


def parse_recall(call: TurnCall) -> RecallCall:
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return RecallCall(call.call_id, None, None, "the arguments are not JSON")
    if not isinstance(args, Mapping) or not isinstance(args.get("handle"), str) or not args["handle"].strip():
        return RecallCall(call.call_id, None, None, "the arguments need a string `handle`")
    query = args.get("query")
    return RecallCall(call.call_id, args["handle"].strip(), query if isinstance(query, str) and query.strip() else None)


def recall_calls(api: RecallApi, turn: Any, name: str) -> list[RecallCall]:
    """The turn's calls of the recall tool ``name``, parsed."""
    return [parse_recall(c) for c in turn_calls(api, turn) if c.name == name]


def client_calls(api: RecallApi, turn: Any, name: str) -> list[TurnCall]:
    """The turn's calls of the client's own tools."""
    return [c for c in turn_calls(api, turn) if c.name != name]


# --------------------------------------------------------------------------- follow-up


def _is_recall_item(api: RecallApi, item: Any, name: str) -> bool:
    if not isinstance(item, Mapping):
        return False
    if api == "messages":
        return item.get("type") == "tool_use" and item.get("name") == name
    return item.get("type") in RESPONSES_CALLS and item.get("name") == name


def _is_client_call_item(api: RecallApi, item: Any, name: str) -> bool:
    if not isinstance(item, Mapping):
        return False
    if api == "messages":
        return item.get("type") == "tool_use" and item.get("name") != name
    return item.get("type") in RESPONSES_CALLS and item.get("name") != name


def followup_body(
    api: RecallApi, body: Mapping[str, Any], turn: Any, name: str, results: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """The next round's request: ``body`` (the previous round's) followed by the model's
    turn — its text and its recall calls, without the calls of client tools it made in
    the same turn (it answers again, knowing what it recalled) — and one result per
    recall call (``results``: ``(call_id, text)``). ``body`` is not mutated."""
    out = dict(body)
    if api == "chat":
        msg: dict[str, Any] = {"role": "assistant", "content": turn.get("content") if isinstance(turn, Mapping) else None}
        calls = [tc for tc in (turn.get("tool_calls") or ()) if isinstance(tc, Mapping)
                 and (tc.get("function") or {}).get("name") == name] if isinstance(turn, Mapping) else []
        msg["tool_calls"] = [copy.deepcopy(tc) for tc in calls]
        out["messages"] = [
            *(body.get("messages") or ()),
            msg,
            *({"role": "tool", "tool_call_id": cid, "content": text} for cid, text in results),
        ]
        return out
    if api == "messages":
        blocks = [copy.deepcopy(b) for b in turn or () if not _is_client_call_item(api, b, name)]
        messages = list(body.get("messages") or ())
        if messages and isinstance(messages[-1], Mapping) and messages[-1].get("role") == "assistant":
            # the client prefilled the assistant's turn: the model continued that message
            last = messages.pop()
            content = last.get("content")
            head = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
            blocks = head + blocks
        out["messages"] = [
            *messages,
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results]},
        ]
        return out
    given = body.get("input")
    items: list[Any] = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or ())
    stateless = body.get("store") is False
    for item in turn or ():
        if _is_client_call_item(api, item, name):
            continue
        if stateless and isinstance(item, Mapping) and item.get("type") == "reasoning" and not item.get("encrypted_content"):
            continue  # not stored upstream and not carried: it could not be referred to
        items.append(copy.deepcopy(item))
    items.extend({"type": "function_call_output", "call_id": cid, "output": text} for cid, text in results)
    out["input"] = items
    return out


# --------------------------------------------------------------------------- final answer


def without_tool(tools: Any, name: str) -> Any:
    """A tools list (as echoed in a Responses body) without the recall tool."""
    if not isinstance(tools, list):
        return tools
    return [t for t in tools if not (isinstance(t, Mapping) and t.get("name") == name)]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def sum_usage(usages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Usage objects summed field by field (nested detail objects too); fields that are
    not counts keep the last round's value."""
    out: dict[str, Any] = {}
    for u in usages:
        for k, v in u.items():
            have = out.get(k)
            if _is_int(v):
                out[k] = (have if _is_int(have) else 0) + v
            elif isinstance(v, Mapping):
                out[k] = sum_usage([have, v]) if isinstance(have, Mapping) else sum_usage([v])
            elif v is not None or k not in out:
                out[k] = v
    return out


def final_json(api: RecallApi, body: Mapping[str, Any], usages: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The last round's body as the client's answer: ``usage`` summed over ``usages``
    (every round's), and a Responses body's echoed ``tools`` without the recall tool."""
    out = dict(body)
    if len(usages) > 1:
        out["usage"] = sum_usage(usages)
    if api == "responses" and "tools" in out:
        out["tools"] = without_tool(out["tools"], name)
    return out


def strip_json(api: RecallApi, body: Mapping[str, Any], name: str, note: str) -> dict[str, Any]:
    """The body without its recall calls (the rounds ran out); ``note`` becomes the
    assistant's text when nothing else is left, and the stop reason says the turn ended."""
    out = copy.deepcopy(dict(body))
    if api == "chat":
        for ch in out.get("choices") or ():
            msg = ch.get("message") if isinstance(ch, dict) else None
            if not isinstance(msg, dict):
                continue
            kept = [tc for tc in msg.get("tool_calls") or () if (tc.get("function") or {}).get("name") != name]
            if kept:
                msg["tool_calls"] = kept
                continue
            msg.pop("tool_calls", None)
            if not msg.get("content"):
                msg["content"] = note
            if ch.get("finish_reason") == "tool_calls":
                ch["finish_reason"] = "stop"
        return out
    key = "content" if api == "messages" else "output"
    items = [i for i in out.get(key) or () if not _is_recall_item(api, i, name)]
    if not any(_is_client_call_item(api, i, name) for i in items):
        if api == "messages":
            if not any(isinstance(i, dict) and i.get("type") == "text" and i.get("text") for i in items):
                items.append({"type": "text", "text": note})
            if out.get("stop_reason") == "tool_use":
                out["stop_reason"] = "end_turn"
        elif not any(isinstance(i, dict) and i.get("type") == "message" for i in items):
            items.append(note_item(note))
    out[key] = items
    if api == "responses" and "tools" in out:
        out["tools"] = without_tool(out["tools"], name)
    return out


def note_item(text: str, item_id: str = "msg_compaction_gate_recall") -> dict[str, Any]:
    """A Responses API assistant message item holding ``text``."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}


def rounds_exhausted_note(limit: int) -> str:
    return (
        "[compaction-gate] The model asked to recall more of the compacted context than this request's "
        f"recall limit allows ({limit} round(s), or the conversation's recall budget is spent); "
        "ask it to continue with what it has."
    )


# --------------------------------------------------------------------------- results


def passages(text: str) -> list[str]:
    """The stored region split into its messages (see :func:`.spill.render_region`)."""
    out: list[str] = []
    cur: list[str] = []
    for line in text.split("\n"):
        if line.startswith(PASSAGE_HEAD) and cur:
            out.append("\n".join(cur))
            cur = []
        cur.append(line)
    if cur:
        out.append("\n".join(cur))
    return out


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, limit: int) -> tuple[str, int]:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text, 0
    kept = raw[: max(limit, 0)].decode("utf-8", "ignore")
    return kept, len(raw) - _size(kept)


CUT_NOTE = "\n[… {rest} more byte(s) not returned (recall limit); call again with a narrower `query`]"


def recall_result(handle: str, text: str, query: str | None, limit: int) -> str:
    """What a call returns for a stored region: all of it, or only the passages that
    mention ``query`` (case-insensitive), cut so that the whole result — its head line
    and the line saying what was cut included — fits in ``limit`` bytes."""
    head = f"[compaction-gate recall of {handle}: the region a compaction removed, verbatim]"
    body = text
    if query is not None:
        q = query.casefold()
        hits = [p for p in passages(text) if q in p.casefold()]
        if not hits:
            return (
                f"{head}\nNo passage of this region mentions {query!r}. "
                "Call again without `query` to read the whole region."
            )
        head = f"[compaction-gate recall of {handle}: the {len(hits)} passage(s) that mention {query!r}, verbatim]"
        body = "\n".join(hits)
    out = f"{head}\n{body}"
    if _size(out) <= limit:
        return out
    # room for the body once the head and the (longest possible) cut note are counted
    room = limit - _size(head) - 1 - _size(CUT_NOTE.format(rest=_size(body)))
    body, rest = _cut(body, room)
    return f"{head}\n{body}" + CUT_NOTE.format(rest=rest)


def not_found_result(handle: str | None) -> str:
    return (
        f"compaction-gate has no stored context under handle {handle!r} for this API key: it is unknown, "
        "expired or not yours. Do not guess the values it held: re-read them with a read-only command "
        "or ask the user."
    )


def invalid_result(problem: str, handles: Sequence[str]) -> str:
    known = ", ".join(f"`{h}`" for h in handles) or "none"
    return f"compaction-gate could not run this recall: {problem}. Known handles: {known}."


def budget_result(handle: str | None) -> str:
    return (
        f"compaction-gate did not return {handle!r}: this conversation's recall budget (bytes or rounds) "
        "is spent. Continue with what you have; do not guess values."
    )


DEFERRED_CALLS = (
    "(Your other tool call(s) of that turn were not run: {names}. Call them again if you still need "
    "them, now that you have this.)"
)


def with_deferred(result: str, deferred: Sequence[TurnCall]) -> str:
    """A recall result that also tells the model which client calls of its turn were not
    run (they were held back with the recall; it makes them again)."""
    if not deferred:
        return result
    names = ", ".join(sorted({c.name for c in deferred}))
    return result + "\n" + DEFERRED_CALLS.format(names=names)
