"""Scanning one text for identifiers: :func:`scan_text` and the :class:`Match` it returns
(pure, no I/O, uncached).

Pipeline for one text:

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

A :class:`Match` is source-independent, so one scan serves every place the same text
occurs; binding matches to where the text was seen (sources, tool calls, the cache) is
:mod:`.extract`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from .catalog import Catalog
from .model import redact
from .normalize import normalize
from .scanner import Cand, candidates

__all__ = ["Match", "scan_text"]

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
