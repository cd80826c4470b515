"""Identifier extraction over text and whole snapshots (pure, no I/O).

Pipeline for one text (:func:`scan_text`):

1. **Find** (:mod:`.scanner`): every rule of the catalog, gated and positioned by cheap
   shared prefilters (words, substrings, character runs) so that no pattern is tried at
   every position of a large text; values are the rule's value group, trimmed of
   trailing punctuation and quotes.
2. **Exclude**: required context keywords near the match (or in the producing command /
   tool name), the rule's validators, its filters.
3. **Resolve overlaps**: higher ``priority`` wins, then the longer match; a locator rule
   (``nests: true``: paths, URLs, S3 URIs) may strictly contain more specific matches and
   both are kept (a composite such as a Kafka topic-partition-offset, a GTID or an ARN
   swallows its parts). A locator containing a secret becomes sensitive.
4. **Allowlist**, then **normalise** (:func:`.normalize.normalize`, or the rule's
   ``norm`` template) and cut a one-line context snippet with every secret redacted.

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

import bisect
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from proxy.core.messages import TEXTUAL_KINDS, Message, Part, Snapshot

from .catalog import Catalog
from .commands import CallClass, classify_call
from .model import SYSTEM_INDEX, TOOLS_INDEX, Identifier, Origin, Source, redact
from .normalize import normalize
from .provenance import CallRef, judge
from .regen import CallRecord, RegenPolicy, apply_overrides, default_regenerable
from .scanner import Cand, candidates
from .steps import TextStep, text_steps

__all__ = [
    "DEFAULT_CACHE",
    "Match",
    "ScanCache",
    "extract_messages",
    "extract_snapshot",
    "extract_text",
    "scan_text",
    "snapshot_calls",
]

_SNIPPET = 40
#: A value's line up to this long is its snippet, whole.
_LINE = 160


def _oneline(s: str) -> str:
    return s.replace("\n", " ").replace("\r", " ").replace("\t", " ")


@dataclass(frozen=True, slots=True)
class Match:
    """A source-independent detection inside one text (what the cache stores)."""

    rule_id: str
    kind: str
    value: str
    norm: str
    start: int
    end: int
    sensitive: bool
    rule_regenerable: bool
    context: str


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


class _Intervals:
    """Disjoint half-open intervals sorted by start, with overlap queries."""

    __slots__ = ("items", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.items: list[Cand] = []

    def overlapping(self, s: int, e: int) -> list[Cand]:
        i = bisect.bisect_right(self.starts, s) - 1
        if i < 0:
            i = 0
        out: list[Cand] = []
        n = len(self.items)
        while i < n and self.starts[i] < e:
            c = self.items[i]
            if c.end > s:
                out.append(c)
            i += 1
        return out

    def add(self, c: Cand) -> None:
        i = bisect.bisect_left(self.starts, c.start)
        self.starts.insert(i, c.start)
        self.items.insert(i, c)


def _strictly_contains(outer: Cand, inner: Cand) -> bool:
    return outer.start <= inner.start and inner.end <= outer.end and (outer.end - outer.start) > (inner.end - inner.start)


def _resolve(cands: list[Cand]) -> list[Cand]:
    """Overlap resolution (see the module docstring). Candidates are split into clusters
    of transitively overlapping spans; a lone candidate is kept as is, a cluster is
    resolved greedily by priority, then length, then position."""
    cands.sort(key=lambda c: (c.start, -(c.end - c.start)))
    out: list[Cand] = []
    cluster: list[Cand] = []
    cluster_end = -1
    for c in cands:
        if c.start >= cluster_end:
            if len(cluster) == 1:
                out.append(cluster[0])
            elif cluster:
                out.extend(_resolve_cluster(cluster))
            cluster = [c]
            cluster_end = c.end
        else:
            cluster.append(c)
            if c.end > cluster_end:
                cluster_end = c.end
    if len(cluster) == 1:
        out.append(cluster[0])
    elif cluster:
        out.extend(_resolve_cluster(cluster))
    return out


def _resolve_cluster(cands: list[Cand]) -> list[Cand]:
    cands.sort(key=lambda c: (-c.rule.priority, -(c.end - c.start), c.start))
    atoms = _Intervals()
    containers = _Intervals()
    for c in cands:
        if c.rule.nests:
            if containers.overlapping(c.start, c.end):
                continue
            if any(not _strictly_contains(c, a) for a in atoms.overlapping(c.start, c.end)):
                continue
            containers.add(c)
        else:
            if atoms.overlapping(c.start, c.end):
                continue
            if any(not _strictly_contains(k, c) for k in containers.overlapping(c.start, c.end)):
                continue
            atoms.add(c)
    out = atoms.items + containers.items
    out.sort(key=lambda c: (c.start, -(c.end - c.start)))
    return out


def _snippet(text: str, s: int, e: int, secrets: Sequence[tuple[int, int]]) -> str:
    """One-line snippet around ``[s:e]`` with every secret span replaced by its redacted
    form (window edges are widened so that no secret is ever cut in half)."""
    ls = text.rfind("\n", 0, s) + 1
    le = text.find("\n", e)
    le = len(text) if le < 0 else le
    whole = le - ls <= _LINE
    if whole:  # the value's own line, whole: it shows what the value is (from -> to)
        cs, ce = ls, le
        while cs < s and text[cs] in " \t\r":
            cs += 1
        while ce > e and text[ce - 1] in " \t\r":
            ce -= 1
    else:
        cs = max(ls, s - _SNIPPET)
        ce = min(le, e + _SNIPPET)
    if e - s > 200:  # long values (PEM blocks, long URLs): show the head only
        ce, whole = min(len(text), s + 200), False
    pre = "…" if cs > 0 and not whole else ""
    post = "…" if ce < len(text) and not whole else ""
    if not secrets:
        return pre + _oneline(text[cs:ce]) + post
    for ss, se in secrets:
        if ss < cs < se:
            cs = ss
        if ss < ce < se:
            ce = se
    pieces: list[str] = []
    pos = cs
    for ss, se in secrets:
        if se <= cs or ss >= ce or ss < pos:
            continue
        pieces.append(text[pos:ss])
        pieces.append(redact(text[ss:se]))
        pos = se
    pieces.append(text[pos:ce])
    snip = _oneline("".join(pieces))
    return ("…" if cs > 0 and not whole else "") + snip + ("…" if ce < len(text) and not whole else "")


def _norm_of(c: Cand, sensitive: bool) -> str:
    if sensitive:
        return normalize(c.value, c.rule.kind, sensitive=True)
    if c.rule.norm is not None and c.norm_groups is not None:
        try:
            return normalize(c.rule.norm.format(**c.norm_groups), c.rule.kind)
        except (KeyError, IndexError, ValueError):
            pass
    return normalize(c.value, c.rule.kind)


def _memo_norm(memo: dict[tuple[str, str], str], c: Cand) -> str:
    key = (c.rule.kind, c.value)
    n = memo.get(key)
    if n is None:
        n = memo[key] = normalize(c.value, c.rule.kind)
    return n


def scan_text(text: str, catalog: Catalog | None = None, src_ctx: str = "") -> tuple[Match, ...]:
    """Detect identifiers in ``text`` (uncached). ``src_ctx`` is the producing tool name
    and command line, which counts as context for rules with required keywords."""
    if not text:
        return ()
    cat = catalog or Catalog.load_default()
    cands = candidates(text, cat, src_ctx)
    if not cands:
        return ()
    kept = _resolve(cands)
    if cat.allowlist:
        kept = [c for c in kept if not cat.is_allowed(c.value, _norm_of(c, False))]
    secret_spans = sorted((c.start, c.end) for c in kept if c.rule.sensitive)
    norms: dict[tuple[str, str], str] = {}
    out: list[Match] = []
    for c in kept:
        sensitive = c.rule.sensitive or (
            c.rule.nests and any(c.start <= ss and se <= c.end for ss, se in secret_spans)
        )
        ctx_secrets = secret_spans
        if sensitive and not c.rule.sensitive:
            ctx_secrets = sorted(set(secret_spans) | {(c.start, c.end)})
        elif sensitive:
            ctx_secrets = secret_spans
        out.append(
            Match(
                rule_id=c.rule.id,
                kind=c.rule.kind,
                value=c.value,
                norm=_norm_of(c, sensitive) if (sensitive or c.norm_groups is not None) else _memo_norm(norms, c),
                start=c.start,
                end=c.end,
                sensitive=sensitive,
                rule_regenerable=c.rule.regenerable,
                context=_snippet(text, c.start, c.end, _outermost(ctx_secrets)),
            )
        )
    return tuple(out)


def _outermost(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
        if out and s < out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
            continue
        out.append((s, e))
    return out


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


def _link_calls(
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
    calls, _ = _link_calls(snapshot, cache)
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


def _scan_snapshot(
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
        calls, links = _link_calls(snapshot, cache)  # a result's call may be anywhere before it
    else:  # a call's own class is all its part needs
        calls = [_CallInfo(mi, pi, p.tool_name, p.tool_call_id, _classify_cached(msgs[mi], pi, p, cache))
                 for mi in sorted(i for i in only if 0 <= i < len(msgs))
                 for pi, p in enumerate(msgs[mi].parts) if p.kind == "tool_call"]
        links = {}
    return _scan_snapshot(snapshot, cat, cache, calls, links, only)


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
    calls, links = _link_calls(snapshot, cache)
    out = _scan_snapshot(snapshot, cat, cache, calls, links)
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
