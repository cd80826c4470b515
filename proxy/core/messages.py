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

The parsers of each dialect's bodies into this model are :mod:`proxy.core.dialects`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
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
