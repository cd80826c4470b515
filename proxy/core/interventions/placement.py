"""Where and how a gate note goes into a request body, per dialect.

A *note* is one block of text the proxy adds to what the model sees. It is placed right
after an anchor (the summary message) without making the body invalid:

- OpenAI chat: a new message (role ``user``, ``system`` or ``developer``) inserted after
  the anchor, moved past any ``tool`` messages that answer an assistant's ``tool_calls``
  so call/result pairing is never split; never between leading system messages.
- OpenAI Responses: a new ``message`` input item, moved past ``function_call`` /
  ``*_output`` groups and never right after a ``reasoning`` item.
- Anthropic: a ``text`` block merged into a user message (the summary itself, or the
  user turn right after an assistant summary, after its leading ``tool_result`` blocks),
  so user/assistant alternation and tool_use/tool_result adjacency are untouched.

Anchors are indices into the *raw* list (``messages`` or ``input``); use
:func:`raw_index` to map a :class:`~proxy.core.messages.Snapshot` message index.
Input bodies are never mutated: the returned body is a shallow copy with a new list.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

NoteDialect = Literal["openai_chat", "openai_responses", "anthropic"]
NoteRole = Literal["user", "system", "developer"]

#: Responses API item types that call a tool / answer such a call.
_RESP_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "computer_call", "mcp_call"})
_RESP_OUTPUTS = frozenset(
    {"function_call_output", "custom_tool_call_output", "local_shell_call_output", "computer_call_output"}
)


class PlacementError(ValueError):
    """The body has no list the note could go into."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the note went: the raw index of the message that now holds it, and whether it
    was merged into an existing message (Anthropic) or inserted as a new one."""

    index: int
    merged: bool


def _is_system(m: Any) -> bool:
    return isinstance(m, Mapping) and m.get("role") in ("system", "developer")


def leading_system_count(dialect: NoteDialect, items: list[Any]) -> int:
    if dialect == "anthropic":
        return 0
    n = 0
    for m in items:
        if _is_system(m):
            n += 1
        else:
            break
    return n


def raw_index(dialect: NoteDialect, body: Mapping[str, Any], snapshot_index: int) -> int:
    """Map an index in ``Snapshot.messages`` to an index in the raw list (the snapshot
    folds leading system/developer messages into ``system``)."""
    key = "messages" if dialect != "openai_responses" else "input"
    items = body.get(key)
    if not isinstance(items, list):
        return snapshot_index
    return snapshot_index + leading_system_count(dialect, items)


# --------------------------------------------------------------------------- OpenAI chat


def _chat_has_tool_calls(m: Any) -> bool:
    return isinstance(m, Mapping) and m.get("role") == "assistant" and bool(
        m.get("tool_calls") or m.get("function_call")
    )


def chat_insert_position(msgs: list[Any], anchor: int | None) -> int:
    lead = leading_system_count("openai_chat", msgs)
    p = lead if anchor is None else max(anchor + 1, lead)
    p = min(p, len(msgs))
    while p < len(msgs) and (
        (isinstance(msgs[p], Mapping) and msgs[p].get("role") in ("tool", "function"))
        or (p > 0 and _chat_has_tool_calls(msgs[p - 1]))
    ):
        p += 1
    return p


def _insert_chat(body: dict[str, Any], text: str, anchor: int | None, role: NoteRole) -> Placement:
    msgs = list(body.get("messages") or [])
    p = chat_insert_position(msgs, anchor)
    msgs.insert(p, {"role": role, "content": text})
    body["messages"] = msgs
    return Placement(p, merged=False)


# --------------------------------------------------------------------------- Responses


def _item_type(item: Any) -> str:
    if isinstance(item, Mapping):
        return str(item.get("type") or ("message" if "role" in item else ""))
    return "message"


def responses_insert_position(items: list[Any], anchor: int | None) -> int:
    lead = leading_system_count("openai_responses", items)
    p = lead if anchor is None else max(anchor + 1, lead)
    p = min(p, len(items))
    while p < len(items) and (
        _item_type(items[p]) in _RESP_OUTPUTS
        or (p > 0 and _item_type(items[p - 1]) in _RESP_CALLS | {"reasoning"})
    ):
        p += 1
    return p


def _insert_responses(body: dict[str, Any], text: str, anchor: int | None, role: NoteRole) -> Placement:
    raw = body.get("input")
    if isinstance(raw, str):
        items: list[Any] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": raw}]}]
        anchor = 0
    elif isinstance(raw, list):
        items = list(raw)
    elif raw is None:
        items = []
    else:
        raise PlacementError("'input' must be a string or a list")
    p = responses_insert_position(items, anchor)
    items.insert(p, {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})
    body["input"] = items
    return Placement(p, merged=False)


# --------------------------------------------------------------------------- Anthropic


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return list(content)
    return []


def _leading_tool_results(blocks: list[Any]) -> int:
    n = 0
    for b in blocks:
        if isinstance(b, Mapping) and str(b.get("type", "")).endswith("tool_result"):
            n += 1
        else:
            break
    return n


def _role(m: Any) -> str | None:
    return m.get("role") if isinstance(m, Mapping) else None


def _block_index(blocks: list[Any], after_text: str | None) -> int | None:
    """Index of the first text block whose text is ``after_text``."""
    if after_text is None:
        return None
    for i, b in enumerate(blocks):
        if isinstance(b, Mapping) and b.get("type") == "text" and b.get("text") == after_text:
            return i
    return None


def _insert_anthropic(body: dict[str, Any], text: str, anchor: int | None, after_text: str | None = None) -> Placement:
    msgs = list(body.get("messages") or [])
    block = {"type": "text", "text": text}
    target: int | None = None
    at_front = False  # after leading tool_results instead of at the end
    if anchor is None:
        target = next((i for i, m in enumerate(msgs) if _role(m) == "user"), None)
        at_front = True
    elif 0 <= anchor < len(msgs) and _role(msgs[anchor]) == "user":
        target = anchor
    elif 0 <= anchor < len(msgs):
        nxt = anchor + 1
        if nxt < len(msgs) and _role(msgs[nxt]) == "user":
            target, at_front = nxt, True
        else:
            target = next((i for i in range(anchor - 1, -1, -1) if _role(msgs[i]) == "user"), None)
    else:
        target = next((i for i in range(len(msgs) - 1, -1, -1) if _role(msgs[i]) == "user"), None)
    if target is None:
        msgs.insert(0, {"role": "user", "content": [block]})
        body["messages"] = msgs
        return Placement(0, merged=False)
    msg = dict(msgs[target])
    blocks = _blocks(msg.get("content"))
    pos = _leading_tool_results(blocks) if at_front else len(blocks)
    if target == anchor:
        # the summary is a block of this user message, which may also hold the user's
        # latest text (one merged turn): the note goes right after the summary block
        found = _block_index(blocks, after_text)
        if found is not None:
            pos = found + 1
    blocks.insert(pos, block)
    msg["content"] = blocks
    msgs[target] = msg
    body["messages"] = msgs
    return Placement(target, merged=True)


# --------------------------------------------------------------------------- entry point


def insert_note(
    dialect: NoteDialect,
    body: Mapping[str, Any],
    text: str,
    *,
    anchor: int | None,
    role: NoteRole = "user",
    after_text: str | None = None,
) -> tuple[dict[str, Any], Placement]:
    """Return a copy of ``body`` with ``text`` placed right after raw index ``anchor``
    (``None``: at the start of the conversation, after leading system messages).
    ``after_text``: the text of the summary itself, when the anchor message may hold more
    than the summary (Anthropic merges a turn's text blocks into one user message): the
    note then follows that block, not the message's last one."""
    out = dict(body)
    if dialect == "openai_chat":
        return out, _insert_chat(out, text, anchor, role)
    if dialect == "openai_responses":
        return out, _insert_responses(out, text, anchor, role)
    if dialect == "anthropic":
        return out, _insert_anthropic(out, text, anchor, after_text)
    raise PlacementError(f"cannot place a note in dialect {dialect!r}")


#: Responses input items that ask the server to compact everything before them (the
#: answer is an encrypted ``compaction`` item no proxy can read).
OPAQUE_TRIGGERS = frozenset({"compaction_trigger"})


def is_opaque_summary_request(body: Mapping[str, Any]) -> bool:
    """Whether a Responses body asks for a server-side compaction (its input ends with a
    trigger item): the summary it gets back is encrypted."""
    raw = body.get("input")
    return isinstance(raw, list) and bool(raw) and _item_type(raw[-1]) in OPAQUE_TRIGGERS


def append_to_last_user(dialect: NoteDialect, body: Mapping[str, Any], text: str) -> dict[str, Any]:
    """Return a copy of ``body`` whose final user turn ends with ``text`` (used for the
    summarization contract: it belongs next to the summarize instruction).

    If the last message is a user message its content gets the text appended (string
    content is extended, list content gets a text block); otherwise a new user message is
    appended (OpenAI; before a trailing compaction trigger item, which must stay last) or
    the text is merged into the last user message (Anthropic, where a trailing assistant
    message is a prefill that must stay last)."""
    out = dict(body)
    key = "input" if dialect == "openai_responses" else "messages"
    raw = out.get(key)
    if dialect == "openai_responses" and isinstance(raw, str):
        out[key] = raw + "\n\n" + text
        return out
    items = list(raw or [])
    last = items[-1] if items else None
    if isinstance(last, Mapping) and last.get("role") == "user" and _item_type(last) == "message":
        msg = dict(last)
        content = msg.get("content")
        if isinstance(content, str):
            msg["content"] = content + "\n\n" + text
        else:
            part_type = "input_text" if dialect == "openai_responses" else "text"
            msg["content"] = list(content or []) + [{"type": part_type, "text": text}]
        items[-1] = msg
    elif dialect == "anthropic":
        idx = next((i for i in range(len(items) - 1, -1, -1) if _role(items[i]) == "user"), None)
        if idx is None:
            items.insert(0, {"role": "user", "content": [{"type": "text", "text": text}]})
        else:
            msg = dict(items[idx])
            msg["content"] = _blocks(msg.get("content")) + [{"type": "text", "text": text}]
            items[idx] = msg
    elif dialect == "openai_responses":
        note = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        # a server-side compaction request must keep its trigger item last
        at = len(items) - 1 if isinstance(last, Mapping) and _item_type(last) in OPAQUE_TRIGGERS else len(items)
        items.insert(at, note)
    else:
        items.append({"role": "user", "content": text})
    out[key] = items
    return out


def deep_copy_body(body: Mapping[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(dict(body))
