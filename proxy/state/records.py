"""Persistent records of the conversation tracker, and their (de)serialisation.

Records hold no secrets: the tenant is a hash prefix of the API key and no request
header is stored. Message content is stored once per digest (deduplicated across
conversations and requests); a conversation refers to its messages by digest.

At rest, every secret the gate's detectors find (:mod:`proxy.core.redaction`: the
catalog's ``sensitive`` rules, one list) is replaced by ``[redacted:KIND]`` in what the
serialisers below produce — message texts, text blobs (system prompts, tool
definitions), event details — so a store writes none. A redacted message keeps its
original digest (stored beside it), so lineage still matches the client's next request
after a restart; what is lost is the secret itself: a compaction of a history restored
from disk is judged without the secrets it held (in a running process the history is in
memory, in clear, and nothing changes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.messages import Message, Part, make_message
from proxy.core.redaction import apply_spans, redact_secrets
from proxy.state.offload import OFFLOAD_CHARS, in_store_worker, spans_of

__all__ = [
    "COMPACTION_KINDS",
    "ConversationRecord",
    "GateEvent",
    "StoredMessages",
    "TimelineEntry",
    "message_from_json",
    "message_to_json",
    "stored_text",
]


#: Timeline transitions that rewrote the history (the relation ``compacted`` until the
#: policy layer classifies it).
COMPACTION_KINDS = frozenset({"compacted", "summarize", "truncate", "mask", "edit", "reset"})


def stored_text(text: str) -> str:
    """``text`` as it may be written to a store: its secrets redacted (a very long text
    scanned in a process of its own, :mod:`proxy.state.offload`)."""
    return apply_spans(text, spans_of(text))


#: ``json.dumps(x, separators=(",", ":"))`` without building an encoder per call (a
#: shared store encodes a record and a timeline entry at every commit).
_compact = json.JSONEncoder(separators=(",", ":")).encode

#: Metadata fields that are numbers (or ``None``): never redacted.
_NUMERIC_META = frozenset(
    {"created", "last_seen", "request_len", "tokens", "window", "exact", "seq", "event_seq", "compactions", "side_requests"}
)

#: :func:`stored_text` of metadata JSON, remembered (pure; thread-safe).
_stored_json = functools.lru_cache(maxsize=1024)(stored_text)


@dataclass(slots=True)
class TimelineEntry:
    """One request of a conversation.

    ``relation`` is the lineage relation (extend, compacted, side_request, fork, new);
    ``transition`` the transition kind once classified (the policy layer may refine it;
    defaults to the relation). ``tokens`` is the local estimate of the prompt (``exact``
    false when the tokenizer is not the model's own), ``share`` = tokens / ``window``.
    ``usage`` is upstream's own count (ground truth), filled when the response ends.
    """

    seq: int
    at: float
    relation: str
    transition: str
    messages: int
    new_messages: int
    dropped: int
    tokens: int
    window: int | None
    share: float | None
    exact: bool
    model: str | None
    stream: bool
    request_id: str = ""
    usage: dict[str, int | None] | None = None
    reply_messages: int = 0
    reply_tokens: int | None = None
    reply_digests: list[str] = field(default_factory=list)
    status: str = "pending"
    #: ``tokens`` / ``reply_tokens`` include estimates: a text too long to tokenise whole
    #: on the event loop that was not counted beforehand (see :mod:`proxy.accounting`)
    estimated: bool = False
    reply_estimated: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Shallow field dict (``dataclasses.asdict`` deep-copies: too slow per request)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def to_json(self) -> str:
        return self.dict_to_json(self.as_dict())

    @staticmethod
    def dict_to_json(d: dict[str, Any]) -> str:
        """``to_json`` of an :meth:`as_dict` snapshot (stores serialise off the loop)."""
        return _compact(d)

    @classmethod
    def from_json(cls, text: str) -> TimelineEntry:
        d = json.loads(text)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass(slots=True)
class GateEvent:
    """Something the gate noticed or did in a conversation (compaction detected,
    bindings dropped, warn/reinject/reject/spill/gate, tripwire...). Appended by the
    policy layer via :meth:`proxy.gate.tracker.Tracker.add_event`.

    ``details`` must be JSON-serialisable and must never carry secrets."""

    seq: int
    at: float
    kind: str
    action: str = "none"
    request_seq: int | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def to_json(self) -> str:
        """The stored form (any secret a detail still quotes is redacted)."""
        return stored_text(json.dumps(self.as_dict(), separators=(",", ":"), default=str))

    @classmethod
    def from_json(cls, text: str) -> GateEvent:
        d = json.loads(text)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class ConversationRecord:
    """The tracker's state of one conversation.

    ``digests``: its current history (the last request's messages, then the recorded
    reply); ``request_len``: how many of them the last request sent. ``system_hash`` and
    ``tools_hash`` key the system prompt and tool definitions in the blob store.
    ``side_digests``: replies of side requests (summaries), kept for the gate.
    """

    id: str
    tenant: str
    namespace: str
    created: float
    last_seen: float
    model: str | None = None
    dialect: str = "plain"
    explicit_id: str | None = None
    explicit_source: str | None = None
    parent_id: str | None = None
    system_hash: str = ""
    tools_hash: str = ""
    digests: tuple[str, ...] = ()
    request_len: int = 0
    tokens: int = 0
    window: int | None = None
    exact: bool = False
    seq: int = 0
    event_seq: int = 0
    side_digests: tuple[str, ...] = ()
    #: The gate's state of the conversation (sticky repair, armed tripwire, the bindings
    #: it lost), as :meth:`proxy.gate.convstate.ConversationState.to_dict`; never secrets.
    gate_state: dict[str, Any] | None = None
    #: Counters of the whole timeline (kept with the record, so a listing needs no
    #: timeline): requests whose transition rewrote the history, side requests, and the
    #: relation of the latest request.
    compactions: int = 0
    side_requests: int = 0
    last_relation: str | None = None
    #: The version of the record in a shared store (a new random token per committed
    #: change; :mod:`proxy.state.protocol`); "" when not stored there.
    etag: str = ""
    timeline: list[TimelineEntry] = field(default_factory=list)
    events: list[GateEvent] = field(default_factory=list)

    _META = (
        "id", "tenant", "namespace", "created", "last_seen", "model", "dialect", "explicit_id",
        "explicit_source", "parent_id", "system_hash", "tools_hash", "request_len", "tokens",
        "window", "exact", "seq", "event_seq", "compactions", "side_requests", "last_relation",
    )  # fmt: skip

    @property
    def share(self) -> float | None:
        return round(self.tokens / self.window, 4) if self.window else None

    def count_from_timeline(self) -> None:
        """Set the timeline counters from the timeline itself (records stored before
        they existed)."""
        self.compactions = sum(1 for t in self.timeline if t.transition in COMPACTION_KINDS)
        self.side_requests = sum(1 for t in self.timeline if t.relation == "side_request")
        self.last_relation = self.timeline[-1].relation if self.timeline else None

    def meta_dict(self) -> dict[str, Any]:
        """A snapshot of the metadata (cheap; stores serialise it off the loop)."""
        d = {k: getattr(self, k) for k in self._META}
        d["side_digests"] = list(self.side_digests)
        if self.gate_state is not None:
            d["gate_state"] = self.gate_state
        return d

    def meta_json(self) -> str:
        return self.meta_dict_to_json(self.meta_dict())

    @staticmethod
    def meta_dict_to_json(d: dict[str, Any]) -> str:
        """The stored JSON of :meth:`meta_dict`. The counters and times (numbers, which
        change at every commit and hold no text) are written as they are; the rest —
        ids, model, gate state, side digests, which seldom change — is redacted as one
        JSON text, remembered (a shared store writes the metadata at every commit)."""
        numbers = {k: v for k, v in d.items() if k in _NUMERIC_META and (v is None or isinstance(v, (int, float)))}
        text = _stored_json(_compact({k: v for k, v in d.items() if k not in numbers}))
        if not numbers:
            return text
        plain = _compact(numbers)
        return plain if text == "{}" else plain[:-1] + "," + text[1:]

    def digests_text(self) -> str:
        return ",".join(self.digests)

    @classmethod
    def from_row(cls, meta: str, digests: str) -> ConversationRecord:
        d = json.loads(meta)
        kwargs = {k: d[k] for k in cls._META if k in d}
        rec = cls(**kwargs)
        rec.digests = tuple(digests.split(",")) if digests else ()
        rec.side_digests = tuple(d.get("side_digests") or ())
        gs = d.get("gate_state")
        rec.gate_state = gs if isinstance(gs, dict) else None
        return rec


#: Texts longer than this are JSON-encoded a slice of this many characters at a time.
JSON_SLICE = 1 << 18

#: ``json.dumps`` of a string, with and without ``ensure_ascii``: the encoder's own
#: functions (``json.dumps`` with any keyword builds an encoder per call, which cost
#: more than the encoding of a short text; a row has seven literals a part).
_ascii_literal: Callable[[str], str] = json.encoder.encode_basestring_ascii
_utf8_literal: Callable[[str], str] = json.encoder.encode_basestring
#: ``json.dumps(v, ensure_ascii=False)`` of the values a row holds besides its texts.
_PLAIN = {None: "null", True: "true", False: "false"}


def _text_json(text: str, ensure_ascii: bool) -> str:
    """``json.dumps(text)``, a slice at a time for a long text (JSON escapes each
    character on its own, so the result is the same): one ``json.dumps`` of 10 MB holds
    the GIL, and so the event loop, for tens of milliseconds."""
    literal = _ascii_literal if ensure_ascii else _utf8_literal
    if len(text) <= JSON_SLICE:
        return literal(text)
    return '"' + "".join(literal(text[at : at + JSON_SLICE])[1:-1] for at in range(0, len(text), JSON_SLICE)) + '"'


def _utf8_safe(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate), a slice at a time."""
    if text.isascii():  # known without a scan
        return True
    try:
        for at in range(0, len(text), JSON_SLICE):
            text[at : at + JSON_SLICE].encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_str(text: str) -> str:
    """``text`` as a JSON string literal that encodes as UTF-8: raw where it can be,
    with ASCII escapes where it has lone surrogates (valid JSON escapes in a request,
    which load back to the same text). Each literal decides alone: a row may mix both."""
    return _text_json(text, ensure_ascii=not _utf8_safe(text))


#: A stored message row: JSON text, or its UTF-8 bytes (a row built in the store's worker).
Row = str | bytes | bytearray

#: A message's fields as the store's worker gets them: plain tuples, so the long texts
#: among them travel through shared memory (:mod:`proxy.state.sharedmem`).
_Fields = tuple[str, str | None, tuple[tuple[str, str, str | None, str | None, bool, str | None], ...], str]


def _row(fields: _Fields, stored: Callable[[str], str]) -> list[str]:
    """The pieces of a row's JSON, each part's text stored by ``stored`` (its secrets
    redacted), plus the original digest when that changed a text."""
    role, name, parts, digest = fields

    def dumps(v: object) -> str:
        if isinstance(v, str):
            return _json_str(v)
        if v is None or isinstance(v, bool):
            return _PLAIN[v]
        return json.dumps(v, ensure_ascii=False)

    pieces = [f"[{dumps(role)},{dumps(name)},["]
    redacted = False
    for i, (kind, text, *tail) in enumerate(parts):
        kept = stored(text) if text else text
        redacted = redacted or kept is not text
        pieces += ["," if i else "", f"[{dumps(kind)},", _json_str(kept), "," + ",".join(map(dumps, tail)) + "]"]
    pieces.append(f"],{dumps(digest)}]" if redacted else "]]")
    return pieces


def _worker_row(fields: _Fields) -> tuple[bytes]:
    """The row's UTF-8 bytes, built in the store's worker process (scanned and encoded
    there, neither holds the server's GIL). Its texts are redacted right here: through
    :func:`stored_text`, a long one would be handed to the store's worker — this one."""
    return (b"".join(p.encode("utf-8") for p in _row(fields, redact_secrets)),)


def message_to_json(m: Message) -> Row:
    """Compact JSON of a message as stored: parts with their secrets redacted, plus the
    original digest when redaction changed a text (else it is recomputed on load).
    Always encodable as UTF-8 (:func:`_json_str`). A message with a text over
    :data:`~proxy.state.offload.OFFLOAD_CHARS` is redacted and encoded in the store's
    worker process (a 10 MB text's encoding alone held the GIL — and so the event loop —
    for ~20% of the time under ``bench.stall``'s load; issue 16); the row is then its
    UTF-8 bytes, which load the same (:func:`message_from_json`)."""
    fields: _Fields = (m.role, m.name, tuple((p.kind, p.text, p.tool_name, p.tool_call_id, p.is_error,
                                              p.payload_digest) for p in m.parts), m.digest)
    chars = sum(len(p.text) for p in m.parts)
    if any(len(p.text) > OFFLOAD_CHARS for p in m.parts):
        # at most 12 bytes a character (a non-BMP one as two \\u escapes), plus the rest
        (row,) = in_store_worker(_worker_row, fields, out=12 * chars + 4096)
        return row
    return "".join(_row(fields, stored_text))


def message_from_json(text: Row) -> Message:
    """The message of a stored row (:func:`message_to_json`): its JSON text or the
    UTF-8 bytes of it."""
    row = json.loads(text)
    role, name, parts = row[0], row[1], row[2]
    msg = make_message(role, (Part(k, t, tn, tc, bool(e), pd) for k, t, tn, tc, e, pd in parts), name)
    if len(row) > 3 and row[3]:  # redacted at rest: the digest of the text as it was sent
        msg = Message(msg.role, msg.parts, msg.name, digest=row[3])
    return msg


class StoredMessages(Mapping[str, Message]):
    """Messages by digest as a store returned them (their stored JSON, text or UTF-8
    bytes), each parsed when first read: a replica syncing what other processes changed
    gets every changed tail's messages, and most of them it never reads (conversations
    it does not serve)."""

    __slots__ = ("_parsed", "_raw")

    def __init__(self, raw: dict[str, str | bytes]) -> None:
        self._raw = raw
        self._parsed: dict[str, Message] = {}

    def __getitem__(self, digest: str) -> Message:
        msg = self._parsed.get(digest)
        if msg is None:
            raw = self._raw[digest]
            msg = self._parsed[digest] = message_from_json(raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw)
        return msg

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, digest: object) -> bool:
        return digest in self._raw
