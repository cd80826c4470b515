"""The wire dialects' parsers: request bodies into the normalised model (pure, no I/O).

OpenAI chat completions (``messages``), OpenAI Responses API input items (``input``)
and Anthropic messages (content blocks, ``system``) each become a
:class:`~.messages.Snapshot` of :class:`~.messages.Message` built with
:func:`~.messages.make_message`; :func:`from_body` picks the parser by the proxied API
kind, :func:`from_any` guesses it from the body's shapes, and the ``*_tail`` functions
normalise the messages an incremental normaliser appends. Input bodies are never
mutated; an unparsable body raises :class:`~.messages.MessageFormatError`.

Separate from :mod:`proxy.core.messages` because that is the model every module reads
(its types, digests and helpers) while only the request's entry points parse: the
dialects' JSON shapes change here without touching it, and the model imports none of
this.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .messages import (
    Message,
    MessageFormatError,
    Part,
    Snapshot,
    ToolDef,
    make_message,
    text_message,
)

__all__ = [
    "from_anthropic",
    "from_any",
    "from_body",
    "from_openai_chat",
    "from_openai_responses",
    "openai_chat_tail",
    "openai_responses_tail",
]


def _canonical_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _payload_digest(value: Any) -> str:
    raw = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


# --------------------------------------------------------------------------- OpenAI chat


def _openai_content_parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    if not isinstance(content, list):
        raise MessageFormatError(f"message content must be a string or a list, got {type(content).__name__}")
    parts: list[Part] = []
    for item in content:
        if isinstance(item, str):
            parts.append(Part("text", item))
            continue
        if not isinstance(item, Mapping):
            raise MessageFormatError("content parts must be objects")
        kind = item.get("type")
        if kind in ("text", "input_text", "output_text"):
            parts.append(Part("text", str(item.get("text", ""))))
        elif kind == "refusal":
            parts.append(Part("text", str(item.get("refusal", ""))))
        else:  # image_url, input_audio, file, input_image, ...
            parts.append(Part("binary", payload_digest=_payload_digest(item)))
    return parts


def _openai_chat_message(raw: Any) -> tuple[str, Message]:
    """Returns ("system", msg) for system/developer messages, else ("msg", msg)."""
    if not isinstance(raw, Mapping):
        raise MessageFormatError("each message must be an object")
    role = raw.get("role")
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    if role in ("system", "developer"):
        return "system", make_message("system", _openai_content_parts(raw.get("content")), name)
    if role == "user":
        return "msg", make_message("user", _openai_content_parts(raw.get("content")), name)
    if role == "assistant":
        parts = _openai_content_parts(raw.get("content"))
        for tc in raw.get("tool_calls") or ():
            fn = tc.get("function") or {}
            parts.append(
                Part(
                    "tool_call",
                    _canonical_json(fn.get("arguments", "")),
                    tool_name=fn.get("name"),
                    tool_call_id=tc.get("id"),
                )
            )
        fc = raw.get("function_call")
        if isinstance(fc, Mapping):
            parts.append(Part("tool_call", _canonical_json(fc.get("arguments", "")), tool_name=fc.get("name")))
        return "msg", make_message("assistant", parts, name)
    if role == "tool":
        body = _openai_content_parts(raw.get("content"))
        text = "\n".join(p.text for p in body if p.kind == "text")
        return "msg", make_message("tool", (Part("tool_result", text, tool_call_id=raw.get("tool_call_id")),))
    if role == "function":  # legacy function-calling result
        legacy = raw.get("content")
        return "msg", make_message(
            "tool", (Part("tool_result", legacy if isinstance(legacy, str) else "", tool_name=name),)
        )
    raise MessageFormatError(f"unknown message role {role!r}")


def _openai_tools(tools: Any) -> tuple[ToolDef, ...]:
    out: list[ToolDef] = []
    for t in tools or ():
        if not isinstance(t, Mapping):
            continue
        inner = t.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else t
        out.append(
            ToolDef(
                name=str(fn.get("name", t.get("type", ""))),
                description=str(fn.get("description", "") or ""),
                schema=_canonical_json(fn.get("parameters", fn.get("input_schema", ""))),
            )
        )
    return tuple(out)


def from_openai_chat(body: Mapping[str, Any]) -> Snapshot:
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise MessageFormatError("'messages' must be a list")
    system: list[str] = []
    out: list[Message] = []
    for raw in msgs:
        where, m = _openai_chat_message(raw)
        if where == "system" and not out:
            system.append(m.text)
        else:
            out.append(m)
    return Snapshot(
        dialect="openai_chat",
        system="\n".join(system),
        messages=tuple(out),
        tools=_openai_tools(body.get("tools") or body.get("functions")),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )


def openai_chat_tail(items: Iterable[Any]) -> tuple[Message, ...]:
    """Normalise OpenAI chat messages that follow at least one non-system message (a
    system or developer message there is part of the history, not the system prompt):
    what ``from_openai_chat`` gives for them after a leading user message."""
    return tuple(_openai_chat_message(raw)[1] for raw in items)


# --------------------------------------------------------------------------- Anthropic


def _anthropic_tool_result_text(content: Any) -> tuple[str, list[Part]]:
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    extra: list[Part] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, Mapping) and block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        else:
            extra.append(Part("binary", payload_digest=_payload_digest(block)))
    return "\n".join(texts), extra


def _anthropic_blocks(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [Part("text", content)] if content else []
    if not isinstance(content, list):
        raise MessageFormatError("Anthropic message content must be a string or a list of blocks")
    parts: list[Part] = []
    for block in content:
        if not isinstance(block, Mapping):
            raise MessageFormatError("content blocks must be objects")
        kind = block.get("type")
        if kind == "text":
            parts.append(Part("text", str(block.get("text", ""))))
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            parts.append(
                Part(
                    "tool_call",
                    _canonical_json(block.get("input", {})),
                    tool_name=block.get("name"),
                    tool_call_id=block.get("id"),
                )
            )
        elif kind in ("tool_result", "mcp_tool_result") or (
            isinstance(kind, str) and kind.endswith("_tool_result")
        ):
            text, extra = _anthropic_tool_result_text(block.get("content"))
            parts.append(
                Part(
                    "tool_result",
                    text,
                    tool_call_id=block.get("tool_use_id"),
                    is_error=bool(block.get("is_error", False)),
                )
            )
            parts.extend(extra)
        elif kind == "thinking":
            parts.append(Part("thinking", str(block.get("thinking", ""))))
        elif kind in ("redacted_thinking", "compaction", "container_upload"):
            parts.append(Part("opaque", payload_digest=_payload_digest(block), item_type=kind))
        else:  # image, document, search_result, ...
            parts.append(Part("binary", payload_digest=_payload_digest(block)))
    return parts


def _anthropic_system(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
    raise MessageFormatError("'system' must be a string or a list of text blocks")


def from_anthropic(body: Mapping[str, Any]) -> Snapshot:
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise MessageFormatError("'messages' must be a list")
    out: list[Message] = []
    for raw in msgs:
        if not isinstance(raw, Mapping):
            raise MessageFormatError("each message must be an object")
        role = raw.get("role")
        if role not in ("user", "assistant"):
            raise MessageFormatError(f"Anthropic message role must be user or assistant, got {role!r}")
        parts = _anthropic_blocks(raw.get("content"))
        if role == "user" and parts and all(p.kind in ("tool_result", "binary") for p in parts) and any(
            p.kind == "tool_result" for p in parts
        ):
            out.append(make_message("tool", parts))
        else:
            out.append(make_message(role, parts))
    return Snapshot(
        dialect="anthropic",
        system=_anthropic_system(body.get("system")),
        messages=tuple(out),
        tools=_openai_tools(body.get("tools")),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )


# --------------------------------------------------------------------------- Responses API


def _responses_item(item: Any) -> tuple[str, Message | None]:
    if isinstance(item, str):
        return "msg", text_message("user", item)
    if not isinstance(item, Mapping):
        raise MessageFormatError("each input item must be an object")
    kind = item.get("type", "message")
    if kind == "message" or ("role" in item and kind not in ("function_call", "function_call_output")):
        role = item.get("role")
        parts = _openai_content_parts(item.get("content"))
        if role in ("system", "developer"):
            return "system", make_message("system", parts)
        if role not in ("user", "assistant"):
            raise MessageFormatError(f"unknown input item role {role!r}")
        return "msg", make_message(role, parts)
    if kind in ("function_call", "custom_tool_call", "local_shell_call", "mcp_call"):
        args = item.get("arguments", item.get("input", item.get("action", "")))
        return "msg", make_message(
            "assistant",
            # a local shell call has no name: its type names the tool
            (Part("tool_call", _canonical_json(args), tool_name=item.get("name") or (kind if kind == "local_shell_call" else None), tool_call_id=item.get("call_id")),),
        )
    if kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        out = item.get("output", "")
        text = out if isinstance(out, str) else "\n".join(p.text for p in _openai_content_parts(out))
        return "msg", make_message("tool", (Part("tool_result", text, tool_call_id=item.get("call_id")),))
    # reasoning, compaction (encrypted), item_reference, web_search_call, ...: not visible as text
    opaque = Part("opaque", payload_digest=_payload_digest(item), item_type=str(kind))
    return "msg", make_message("assistant", (opaque,))


def from_openai_responses(body: Mapping[str, Any]) -> Snapshot:
    raw_input = body.get("input")
    items: list[Any]
    if isinstance(raw_input, str):
        items = [raw_input]
    elif isinstance(raw_input, list):
        items = raw_input
    elif raw_input is None:
        items = []
    else:
        raise MessageFormatError("'input' must be a string or a list of items")
    system = [str(body["instructions"])] if isinstance(body.get("instructions"), str) else []
    out: list[Message] = []
    for item in items:
        where, m = _responses_item(item)
        if m is None:
            continue
        if where == "system" and not out:
            system.append(m.text)
        else:
            out.append(m)
    return Snapshot(
        dialect="openai_responses",
        system="\n".join(s for s in system if s),
        messages=tuple(out),
        tools=_openai_tools(body.get("tools")),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )


def openai_responses_tail(items: Iterable[Any]) -> tuple[Message, ...]:
    """Normalise Responses input items that follow at least one message (as
    :func:`openai_chat_tail` does for chat)."""
    out: list[Message] = []
    for item in items:
        _, m = _responses_item(item)
        if m is not None:
            out.append(m)
    return tuple(out)


# --------------------------------------------------------------------------- detection


def _looks_anthropic(msgs: Sequence[Any]) -> bool:
    for m in msgs:
        if isinstance(m, Mapping) and isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result", "thinking"):
                    return True
    return False


def from_any(obj: Any) -> Snapshot:
    """Normalise an OpenAI chat body, Responses body, Anthropic messages body or a bare
    list of messages (dialect guessed from its shapes)."""
    if isinstance(obj, list):
        if _looks_anthropic(obj) and not any(isinstance(m, Mapping) and m.get("role") in ("system", "tool") for m in obj):
            return from_anthropic({"messages": obj})
        if any(isinstance(m, Mapping) and m.get("type") in ("function_call", "function_call_output") for m in obj):
            return from_openai_responses({"input": obj})
        snap = from_openai_chat({"messages": obj})
        return Snapshot("plain", snap.system, snap.messages, snap.tools, snap.model)
    if not isinstance(obj, Mapping):
        raise MessageFormatError("expected a JSON object with messages/input, or a list of messages")
    if "input" in obj and "messages" not in obj:
        return from_openai_responses(obj)
    if "messages" not in obj:
        raise MessageFormatError("body has neither 'messages' nor 'input'")
    msgs = obj["messages"]
    if "system" in obj or (isinstance(msgs, list) and _looks_anthropic(msgs)):
        return from_anthropic(obj)
    return from_openai_chat(obj)


def from_body(api: str, body: Mapping[str, Any]) -> Snapshot:
    """Normalise a request body given the proxied API kind (``chat``, ``messages``,
    ``responses``, ``count_tokens``)."""
    if api == "chat":
        return from_openai_chat(body)
    if api in ("messages", "count_tokens"):
        return from_anthropic(body)
    if api == "responses":
        return from_openai_responses(body)
    raise MessageFormatError(f"API kind {api!r} carries no message history")
