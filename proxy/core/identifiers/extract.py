"""Identifier extraction over text and whole snapshots (pure, no I/O).

One text is scanned by :func:`.textscan.scan_text` (find, exclude, resolve overlaps,
allowlist, normalise: the pipeline is described there); this module binds its matches to
where the text was seen (:class:`~.model.Source`) and caches the scans.

:func:`extract_snapshot` scans the system prompt, every textual part and the tool
definitions, links each tool result to its call (by ``tool_call_id``, else the nearest
preceding unanswered call with the same tool name, else the oldest unanswered call), and
applies :func:`.regen.mark_regenerability` (source rule, read-before-write, overrides).

Scans are cached (LRU, :class:`ScanCache`) by (message digest, part index, source context,
catalog fingerprint), so every message is scanned once across requests; offsets are
within the part text and message indices are re-bound on every call.

Cost: 200 KB of tool output takes ~15–45 ms on one core depending on identifier density
(see tests/core/identifiers/test_ident_perf.py); a cached part costs microseconds.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from proxy.core.messages import TEXTUAL_KINDS, Message, Part, Snapshot

from .catalog import Catalog
from .commands import CallClass, classify_call
from .model import SYSTEM_INDEX, TOOLS_INDEX, Identifier, Origin, Source
from .provenance import CallRef, judge
from .regen import CallRecord, RegenPolicy, apply_overrides, default_regenerable
from .steps import TextStep, text_steps
from .textscan import Match, scan_text

__all__ = [
    "DEFAULT_CACHE",
    "TEXT_KEY_CHARS",
    "ScanCache",
    "extract_messages",
    "extract_snapshot",
    "extract_text",
    "link_calls",
    "scan_snapshot",
    "snapshot_calls",
]


class ScanCache:
    """A small thread-safe LRU of scan results (bounded number of entries)."""

    def __init__(self, max_entries: int = 8192) -> None:
        self._max = max_entries
        self._data: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> object | None:
        with self._lock:
            v = self._data.get(key)
            if v is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return v

    def put(self, key: Hashable, value: object) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


#: Texts up to this many characters are cached by their own value (a scan depends on the
#: text, the producing command and the catalogue only), longer ones by their message's
#: digest or a hash: at most a few MB of keys in a full cache.
TEXT_KEY_CHARS = 512

#: Process-wide default cache (pure memoisation; safe to share).
DEFAULT_CACHE = ScanCache()


# --------------------------------------------------------------------------- scanning


def _src_ctx(source: Source) -> str:
    return " ".join(x for x in (source.tool_name, source.command) if x)


def _cached_scan(
    key: Hashable | None, text: str, catalog: Catalog, src_ctx: str, cache: ScanCache | None
) -> tuple[Match, ...]:
    if cache is None:
        return scan_text(text, catalog, src_ctx)
    if key is None:
        # a short text is its own key: the same tool call or result text in another
        # message (a regenerated reply, a repeated command) is scanned once
        key = text if len(text) <= TEXT_KEY_CHARS else hashlib.blake2b(
            text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    full = ("scan", key, src_ctx, catalog.fingerprint)
    hit = cache.get(full)
    if hit is not None:
        return hit  # type: ignore[return-value]
    res = scan_text(text, catalog, src_ctx)
    cache.put(full, res)
    return res


def _to_identifiers(matches: Iterable[Match], source: Source) -> list[Identifier]:
    return [
        Identifier(
            value=m.value,
            norm=m.norm,
            kind=m.kind,
            detector=m.rule_id,
            sensitive=m.sensitive,
            regenerable=default_regenerable(m.rule_regenerable, m.kind, source),
            source=source,
            start=m.start,
            end=m.end,
            context=m.context,
        )
        for m in matches
    ]


def extract_text(
    text: str, source: Source, catalog: Catalog | None = None, *, cache: ScanCache | None = DEFAULT_CACHE
) -> list[Identifier]:
    """Identifiers in one text seen at ``source``, in order of position.

    Regenerability is the source/kind default (rule 1 of :mod:`.regen`); read-before-write
    needs the whole snapshot (:func:`extract_snapshot`). Invariant: for every result,
    ``text[i.start:i.end] == i.value``.
    """
    cat = catalog or Catalog.load_default()
    return _to_identifiers(_cached_scan(None, text, cat, _src_ctx(source), cache), source)


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class _CallInfo:
    message_index: int
    part_index: int
    tool_name: str | None
    tool_call_id: str | None
    cls: CallClass


def _classify_cached(m: Message, pi: int, part: Part, cache: ScanCache | None) -> CallClass:
    short = len(part.text) <= TEXT_KEY_CHARS
    if cache is None or not (m.digest or short):
        return classify_call(part.tool_name, part.text)
    # a short call is its own key: the same command in another message (a regenerated
    # reply, a command the agent runs every turn) is classified once
    key = ("call", part.tool_name, part.text) if short else ("call", m.digest, pi)
    hit = cache.get(key)
    if isinstance(hit, CallClass):
        return hit
    cls = classify_call(part.tool_name, part.text)
    cache.put(key, cls)
    return cls


def link_calls(
    snapshot: Snapshot, cache: ScanCache | None
) -> tuple[list[_CallInfo], dict[tuple[int, int], _CallInfo]]:
    """All tool calls in order, and for each tool-result part (msg, part) its call."""
    calls: list[_CallInfo] = []
    by_id: dict[str, _CallInfo] = {}
    pending: list[_CallInfo] = []
    links: dict[tuple[int, int], _CallInfo] = {}
    for mi, m in enumerate(snapshot.messages):
        for pi, p in enumerate(m.parts):
            if p.kind == "tool_call":
                info = _CallInfo(mi, pi, p.tool_name, p.tool_call_id, _classify_cached(m, pi, p, cache))
                calls.append(info)
                pending.append(info)
                if p.tool_call_id:
                    by_id[p.tool_call_id] = info
            elif p.kind == "tool_result":
                call: _CallInfo | None = None
                if p.tool_call_id and p.tool_call_id in by_id:
                    call = by_id[p.tool_call_id]
                elif p.tool_name:
                    for c in reversed(pending):
                        if c.tool_name == p.tool_name:
                            call = c
                            break
                if call is None and pending and not (p.tool_call_id and p.tool_call_id in by_id):
                    call = pending[0]
                if call is not None:
                    links[(mi, pi)] = call
                    if call in pending:
                        pending.remove(call)
    return calls, links


def snapshot_calls(snapshot: Snapshot, cache: ScanCache | None = DEFAULT_CACHE) -> list[CallRecord]:
    """The snapshot's tool calls, classified (read-only / mutating, domains), in order."""
    calls, _ = link_calls(snapshot, cache)
    return [
        CallRecord(c.message_index, c.tool_name, c.cls.mutating, c.cls.domains, c.cls.command, c.tool_call_id)
        for c in calls
    ]


_PART_ORIGIN: dict[str, Origin] = {"tool_call": "tool_call", "tool_result": "tool_result", "thinking": "thinking"}


def _text_origin(role: str) -> Origin:
    if role == "system":
        return "system"
    if role == "user":
        return "user"
    if role == "tool":
        return "tool_result"
    return "assistant"


def scan_snapshot(
    snapshot: Snapshot,
    cat: Catalog,
    cache: ScanCache | None,
    calls: Sequence[_CallInfo],
    links: dict[tuple[int, int], _CallInfo],
    only: frozenset[int] | None = None,
) -> list[Identifier]:
    """The identifiers extraction finds in ``snapshot`` before provenance judges them:
    of every message, or of the messages whose index is in ``only`` (the system prompt
    is index :data:`SYSTEM_INDEX`, tool definitions :data:`TOOLS_INDEX`)."""
    out: list[Identifier] = []
    if snapshot.system and (only is None or SYSTEM_INDEX in only):
        src = Source(SYSTEM_INDEX, "system", "system")
        out.extend(_to_identifiers(_cached_scan(None, snapshot.system, cat, "", cache), src))
    call_by_pos = {(c.message_index, c.part_index): c for c in calls}
    indexes = range(len(snapshot.messages)) if only is None else sorted(i for i in only if 0 <= i < len(snapshot.messages))
    for mi in indexes:
        m = snapshot.messages[mi]
        for pi, p in enumerate(m.parts):
            if p.kind not in TEXTUAL_KINDS or not p.text:
                continue
            info: _CallInfo | None = None
            if p.kind == "tool_call":
                info = call_by_pos.get((mi, pi))
                origin: Origin = "tool_call"
            elif p.kind == "tool_result":
                info = links.get((mi, pi))
                origin = "tool_result"
            elif p.kind == "thinking":
                origin = "thinking"
            else:
                origin = _text_origin(m.role)
            if info is not None:
                src = Source(
                    mi,
                    m.role,
                    origin,
                    tool_name=info.tool_name or p.tool_name,
                    command=info.cls.command,
                    mutating=info.cls.mutating,
                    part_index=pi,
                    tool_call_id=info.tool_call_id or p.tool_call_id,
                    domains=info.cls.domains,
                    call_index=info.message_index,
                )
            else:
                src = Source(mi, m.role, origin, tool_name=p.tool_name, part_index=pi, tool_call_id=p.tool_call_id)
            key: Hashable | None = (m.digest, pi) if m.digest and len(p.text) > TEXT_KEY_CHARS else None
            out.extend(_to_identifiers(_cached_scan(key, p.text, cat, _src_ctx(src), cache), src))
    if only is None or TOOLS_INDEX in only:
        for ti, t in enumerate(snapshot.tools):
            text = "\n".join(x for x in (t.name, t.description, t.schema) if x)
            src = Source(TOOLS_INDEX, "tool", "tool_def", tool_name=t.name, part_index=ti)
            out.extend(_to_identifiers(_cached_scan(None, text, cat, "", cache), src))
    return out


def extract_messages(
    snapshot: Snapshot,
    indexes: Iterable[int],
    catalog: Catalog | None = None,
    *,
    cache: ScanCache | None = DEFAULT_CACHE,
) -> list[Identifier]:
    """The identifiers of the messages ``indexes`` of ``snapshot`` (with
    :data:`SYSTEM_INDEX` for the system prompt), as :func:`extract_snapshot` finds them
    there — the same values at the same places, linked to the same tool calls — but not
    judged by provenance (which needs the whole history): regenerability is the
    source/kind default. Only those messages' texts are read."""
    cat = catalog or Catalog.load_default()
    only = frozenset(indexes)
    msgs = snapshot.messages
    if any(p.kind == "tool_result" for i in only if 0 <= i < len(msgs) for p in msgs[i].parts):
        calls, links = link_calls(snapshot, cache)  # a result's call may be anywhere before it
    else:  # a call's own class is all its part needs
        calls = [_CallInfo(mi, pi, p.tool_name, p.tool_call_id, _classify_cached(msgs[mi], pi, p, cache))
                 for mi in sorted(i for i in only if 0 <= i < len(msgs))
                 for pi, p in enumerate(msgs[mi].parts) if p.kind == "tool_call"]
        links = {}
    return scan_snapshot(snapshot, cat, cache, calls, links, only)


def extract_snapshot(
    snapshot: Snapshot,
    catalog: Catalog | None = None,
    *,
    cache: ScanCache | None = DEFAULT_CACHE,
    policy: RegenPolicy | None = None,
) -> list[Identifier]:
    """Every identifier the model sees in ``snapshot``: system prompt
    (``message_index == -1``), each textual part of each message, tool definitions
    (``-2``); with sources linked to their tool calls and regenerability marked
    (source rule, read-before-write, policy overrides). Ordered by message, part, offset.
    Binary/opaque parts are never scanned."""
    cat = catalog or Catalog.load_default()
    calls, links = link_calls(snapshot, cache)
    out = scan_snapshot(snapshot, cat, cache, calls, links)
    refs = {id(c): CallRef(c.message_index, c.part_index, c.tool_name, c.cls) for c in calls}
    judged = judge(
        snapshot,
        out,
        list(refs.values()),
        {k: refs[id(c)] for k, c in links.items()},
        cat.binding_of,
        lambda mi, pi, text: _cached_text_steps(snapshot, mi, pi, text, cache),
    )
    return apply_overrides(judged, policy)


def _cached_text_steps(snapshot: Snapshot, mi: int, pi: int, text: str, cache: ScanCache | None) -> tuple[TextStep, ...]:
    digest = snapshot.messages[mi].digest if 0 <= mi < len(snapshot.messages) else None
    if cache is None or not digest:
        return text_steps(text)
    key = ("steps", digest, pi)
    hit = cache.get(key)
    if isinstance(hit, tuple):
        return hit
    res = text_steps(text)
    cache.put(key, res)
    return res
