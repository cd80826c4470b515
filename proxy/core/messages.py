"""One normalised message model for every wire dialect.

OpenAI chat completions, OpenAI Responses API input items and Anthropic messages
(with content blocks) all become a :class:`Snapshot`: the system prompt, an ordered
tuple of :class:`Message`, and the tool definitions — everything the model will see.

Contracts:
- Pure functions, no I/O. Input bodies are never mutated.
- Every :class:`Message` carries a content ``digest`` (stable across dialects for the
  same role and parts) used for lineage matching and as a cache key, so each message is
  hashed, tokenised and scanned once.
- Binary data (images, audio, documents, encrypted items) becomes a part of kind
  ``binary`` or ``opaque`` whose ``text`` is empty: it is never tokenised as text nor
  scanned for identifiers. Its digest still covers the payload so lineage sees changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
PartKind = Literal["text", "tool_call", "tool_result", "thinking", "binary", "opaque"]
Dialect = Literal["openai_chat", "openai_responses", "anthropic", "plain"]

#: Part kinds whose ``text`` is visible to the model and worth scanning.
TEXTUAL_KINDS: frozenset[str] = frozenset({"text", "tool_call", "tool_result", "thinking"})


class MessageFormatError(ValueError):
    """The body is not a message list of any dialect we understand."""


@dataclass(frozen=True, slots=True)
class Part:
    """One piece of a message.

    - ``text``: plain text.
    - ``tool_call``: the model calls a tool; ``text`` is the arguments as JSON text,
      ``tool_name`` and ``tool_call_id`` identify it.
    - ``tool_result``: output of a tool call; ``text`` is its textual content.
    - ``thinking``: visible reasoning text.
    - ``binary`` / ``opaque``: images, files, encrypted or unknown items; no text.
    """

    kind: PartKind
    text: str = ""
    tool_name: str | None = None
    tool_call_id: str | None = None
    is_error: bool = False
    #: Hash of the payload for binary/opaque parts (the payload itself is not kept).
    payload_digest: str | None = None
    #: The API's type of an opaque item (``compaction``, ``reasoning``, ``redacted_thinking`` …).
    item_type: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    parts: tuple[Part, ...]
    name: str | None = None
    digest: str = field(default="", compare=False)

    @property
    def text(self) -> str:
        """All model-visible text of the message, parts joined by newlines."""
        parts = self.parts
        if len(parts) == 1:  # most messages: no generator, no join (read per message, often)
            p = parts[0]
            return p.text if p.kind in TEXTUAL_KINDS else ""
        return "\n".join(p.text for p in parts if p.kind in TEXTUAL_KINDS and p.text)

    @property
    def tool_calls(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.kind == "tool_call")

    @property
    def tool_results(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.kind == "tool_result")


@dataclass(frozen=True, slots=True)
class ToolDef:
    name: str
    description: str = ""
    #: The parameter schema as canonical JSON text (model-visible).
    schema: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the model sees for one request, dialect-independent."""

    dialect: Dialect
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    model: str | None = None
    _digests: tuple[str, ...] | None = field(default=None, init=False, repr=False, compare=False)
    #: Index of the last user message (``-1``: none; ``-2``: not known yet).
    _last_user: int = field(default=-2, init=False, repr=False, compare=False)

    @property
    def digests(self) -> tuple[str, ...]:
        """The messages' digests (computed once per snapshot: the policy layer asks for
        them several times per request, on histories of thousands of messages)."""
        d = self._digests
        if d is None:
            d = tuple(m.digest for m in self.messages)
            object.__setattr__(self, "_digests", d)
        return d

    def last_user(self) -> int | None:
        """Index of the last user message (``None`` without one), found once per
        snapshot — or not at all when it was told how it extends another
        (:meth:`extending`)."""
        i = self._last_user
        if i == -2:
            msgs = self.messages
            # a tool loop's last user message is far back: one comprehension and a C search
            # (~0.6x the cost of an index loop at 1,000 messages)
            try:
                i = len(msgs) - 1 - [m.role for m in reversed(msgs)].index("user")
            except ValueError:
                i = -1
            object.__setattr__(self, "_last_user", i)
        return i if i >= 0 else None

    def extending(self, prev: Snapshot) -> Snapshot:
        """This snapshot, told that its messages start with all of ``prev``'s (an
        incremental normaliser built it so): its last user message follows from
        ``prev``'s and its own new messages, without a pass over the history. Returns
        ``self``."""
        known = prev._last_user
        if known != -2:
            k = len(prev.messages)
            msgs = self.messages
            for j in range(len(msgs) - 1, k - 1, -1):
                if msgs[j].role == "user":
                    known = j
                    break
            object.__setattr__(self, "_last_user", known)
        return self

    def with_digests(self, digests: tuple[str, ...]) -> Snapshot:
        """This snapshot, told its messages' digests (a caller that built it from known
        messages has them already); returns ``self``."""
        object.__setattr__(self, "_digests", digests)
        return self

    def visible_text(self) -> str:
        """System prompt, every message and every tool definition, as one text."""
        chunks = [self.system]
        chunks.extend(m.text for m in self.messages)
        chunks.append(tools_text(self.tools))
        return "\n".join(c for c in chunks if c)


def tools_text(tools: tuple[ToolDef, ...]) -> str:
    """Tool definitions as one text (what they cost in tokens, and their content hash)."""
    return "\n".join(f"{t.name}\n{t.description}\n{t.schema}" for t in tools)


# --------------------------------------------------------------------------- hashing


#: Above this many characters a part's text is hashed by itself rather than copied into
#: one joined buffer (hashlib releases the GIL while it hashes a large buffer).
_HASH_ALONE = 1 << 16


def _digest_of(role: str, parts: Sequence[Part], name: str | None) -> str:
    # one update of the joined fields: the same digest as feeding them one by one
    if any(len(p.text) > _HASH_ALONE for p in parts):
        return _digest_of_large(role, parts, name)
    # the fields joined as text and encoded once: UTF-8 (surrogatepass too) encodes a
    # concatenation as the concatenation of the encodings, and every field is followed by
    # an ASCII separator, so these are the bytes of encoding each field by itself
    fields = [name or ""]
    for p in parts:
        fields += (
            "\x01",
            p.kind,
            "\x00",
            p.text,
            "\x00",
            p.tool_name or "",
            "\x00",
            p.tool_call_id or "",
            "\x00",
            p.payload_digest or "",
            "\x01" if p.is_error else "\x00",
        )
    raw = role.encode() + b"\x00" + "".join(fields).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


#: Digests of messages with a long text computed ahead of time, elsewhere (a worker
#: process that decoded a large request body made them from the same text objects: see
#: :func:`remember_digests`), by the identity of the fields the digest is made of. The
#: value keeps the texts alive, so their ids stay theirs. Bounded in entries and in the
#: characters it keeps alive (oldest out first).
_AHEAD: dict[tuple[Any, ...], tuple[str, tuple[str, ...]]] = {}
_AHEAD_MAX = 64
_AHEAD_MAX_CHARS = 64 << 20
_ahead_chars = 0


def _ahead_key(role: str, parts: Sequence[Part], name: str | None) -> tuple[Any, ...]:
    return (role, name, *((p.kind, id(p.text), p.tool_name, p.tool_call_id, p.payload_digest, p.is_error) for p in parts))


def has_long_text(m: Message) -> bool:
    """Whether hashing ``m`` takes the long path (a text over 64 KiB)."""
    return any(len(p.text) > _HASH_ALONE for p in m.parts)


def remember_digests(messages: Iterable[Message]) -> None:
    """Remember the digests of ``messages`` that have a long text, so that building the
    same message again — the same fields, the very same text objects — does not hash
    it again (on the event loop: ~16 ms for 10 MB). A message built from other text
    objects, or with any other field, is hashed as always."""
    global _ahead_chars
    for m in messages:
        if not has_long_text(m):
            continue
        texts = tuple(p.text for p in m.parts)
        size = sum(map(len, texts))
        if size > _AHEAD_MAX_CHARS:
            continue
        while _AHEAD and (len(_AHEAD) >= _AHEAD_MAX or _ahead_chars + size > _AHEAD_MAX_CHARS):
            _ahead_chars -= sum(map(len, _AHEAD.pop(next(iter(_AHEAD)))[1]))
        key = _ahead_key(m.role, m.parts, m.name)
        old = _AHEAD.pop(key, None)
        if old is not None:
            _ahead_chars -= sum(map(len, old[1]))
        _AHEAD[key] = (m.digest, texts)
        _ahead_chars += size


def _digest_of_large(role: str, parts: Sequence[Part], name: str | None) -> str:
    """:func:`_digest_of` fed field by field (no copy of a large text into a joined
    buffer): the same digest."""
    ahead = _AHEAD.get(_ahead_key(role, parts, name)) if _AHEAD else None
    if ahead is not None:
        return ahead[0]
    h = hashlib.blake2b(digest_size=16)
    h.update(role.encode() + b"\x00" + (name or "").encode("utf-8", "surrogatepass"))
    for p in parts:
        h.update(b"\x01" + p.kind.encode() + b"\x00")
        h.update(p.text.encode("utf-8", "surrogatepass"))
        h.update(
            b"\x00"
            + (p.tool_name or "").encode("utf-8", "surrogatepass")
            + b"\x00"
            + (p.tool_call_id or "").encode("utf-8", "surrogatepass")
            + b"\x00"
            + (p.payload_digest or "").encode("utf-8", "surrogatepass")
            + (b"\x01" if p.is_error else b"\x00")
        )
    return h.hexdigest()


def make_message(role: Role, parts: Iterable[Part], name: str | None = None) -> Message:
    """Build a message with its content digest (the only way messages should be built)."""
    ps = tuple(parts)
    return Message(role=role, parts=ps, name=name, digest=_digest_of(role, ps, name))


#: Opaque items that are the API's own summary of the conversation before them (OpenAI
#: Responses remote compaction, Anthropic context-management compaction): encrypted, so
#: the gate cannot read them, but a summary all the same.
OPAQUE_SUMMARIES = frozenset({"compaction"})


def is_opaque_summary(m: Message) -> bool:
    """Whether ``m`` is (only) an API-made summary of what came before it."""
    return bool(m.parts) and all(p.kind == "opaque" and p.item_type in OPAQUE_SUMMARIES for p in m.parts)


def text_message(role: Role, text: str) -> Message:
    return make_message(role, (Part("text", text),))


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
