"""Running one rule over one text: the rule's own gates (anchors/tokens, required
context keywords, prefilter runs), the windows around hits and keyword occurrences, the
matching of its pattern where an identifier must start (the strategy is described in
:mod:`.scanner`), and the context and boundary checks of a match.

Separate from :mod:`.scanner`, which decides which rules of a catalogue run on a text
(the catalogue-wide gate) and turns their matches into candidates: this module yields one
rule's matches, from the text's :class:`~.textindex.TextIndex` and, when the catalogue-wide
gate prepared it, the rule's :data:`Gate` — the matches of its pattern run over the whole
text with ``finditer``.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .rules import Rule
from .textindex import TextIndex, Window

__all__ = ["Gate", "RuleGate", "boundary_ok", "context_ok", "rule_matches"]


# --------------------------------------------------------------------------- windows


def _merge(wins: list[Window]) -> list[Window]:
    if not wins:
        return wins
    wins.sort()
    out = [wins[0]]
    for s, e in wins[1:]:
        ls, le = out[-1]
        if s <= le:
            if e > le:
                out[-1] = (ls, e)
        else:
            out.append((s, e))
    return out


def _in_windows(pos: int, starts: Sequence[int], wins: Sequence[Window]) -> bool:
    i = bisect.bisect_right(starts, pos) - 1
    return i >= 0 and wins[i][0] <= pos < wins[i][1]


def _context_windows(rule: Rule, idx: TextIndex, present: Iterable[tuple[str, bool]]) -> list[Window]:
    span = rule.max_len or rule.reach[1]
    before = span + max(rule.window // 2, 10) + 1
    after = rule.window + span + 1
    n = idx.n
    wins: list[Window] = []
    for lit, word in present:
        ln = len(lit)
        for i in idx.word_positions(lit) if word else idx.positions(lit):
            wins.append((i - before if i > before else 0, min(n, i + ln + after)))
    return _merge(wins)


# --------------------------------------------------------------------------- matching


def context_ok(rule: Rule, text: str, start: int, end: int, src_ctx: str) -> bool:
    rx = rule.context_required
    if rx is None:
        return True
    if src_ctx and rx.search(src_ctx):
        return True
    if rule.scope == "text":
        return rx.search(text) is not None
    if rule.scope == "line":
        ls = text.rfind("\n", 0, start) + 1
        le = text.find("\n", end)
        return rx.search(text, ls, le if le >= 0 else len(text)) is not None
    ws = max(0, start - rule.window)
    we = min(len(text), end + max(rule.window // 2, 10))
    return rx.search(text[ws:we]) is not None


def boundary_ok(rule: Rule, text: str, pos: int) -> bool:
    if rule.boundary is None or pos == 0:
        return True
    prev = text[pos - 1]
    if not prev.isalnum():
        return True
    if rule.boundary == "camel":
        return text[pos].isupper() and (prev.islower() or prev.isdigit())
    return False


def _matches_at(rule: Rule, text: str, hits: Iterable[int]) -> Iterator[Any]:
    """Match where identifiers must start: at each hit (sorted)."""
    pat = rule.pattern
    last_end = -1
    for p in hits:
        if p < last_end:
            continue
        m = pat.match(text, p)
        if m is not None:
            last_end = m.end()
            yield m


def _matches_expand(rule: Rule, idx: TextIndex, hits: Iterable[int]) -> Iterator[Any]:
    """For anchors inside identifiers (``/`` in a path, ``://`` in a URL, the provider in
    ``module.x.aws_y.z``): try the pattern at the left end of the run of ``expand``
    characters ending at the hit, then after each separator inside that run, then at the
    hit; the first match that covers the hit wins."""
    assert rule.expand is not None
    pat, text = rule.pattern, idx.text
    rev, n = idx.reversed(), idx.n
    match_left = rule.expand.match
    last_end = -1
    for p in hits:  # sorted
        if p < last_end:
            continue
        m = match_left(rev, n - p)
        s0 = p - (m.end() - m.start()) if m else p
        if s0 < last_end:
            s0 = last_end
        found = pat.match(text, s0)
        if found is None or found.end() <= p:
            found = None
            for i in range(s0, p):
                if not text[i].isalnum():
                    cand = pat.match(text, i + 1)
                    if cand is not None and cand.end() > p:
                        found = cand
                        break
            if found is None and s0 != p:
                cand = pat.match(text, p)
                if cand is not None:
                    found = cand
        if found is not None:
            last_end = found.end()
            yield found


def _matches_in(rule: Rule, text: str, wins: Sequence[Window]) -> Iterator[Any]:
    pat = rule.pattern
    n = len(text)
    last_end = -1
    for ws, we in wins:
        for m in pat.finditer(text, max(ws, last_end if last_end > 0 else 0), we):
            if m.start() < last_end:
                continue
            if m.end() >= we - 1 and we < n:
                # the window end may have truncated the value or a look-ahead: re-match
                full = pat.match(text, m.start())
                if full is None:
                    continue
                m = full
            last_end = max(m.end(), m.start() + 1)
            yield m


@dataclass(frozen=True, slots=True)
class RuleGate:
    """A rule's literals as :class:`~.scanner._Gates` prepares them: its tokens and its word context
    keywords as bytes (tested with one set intersection), its substring context keywords."""

    tokens: frozenset[bytes]
    ctx_words: frozenset[bytes]
    ctx_subs: tuple[str, ...]


#: What :class:`~.scanner._Gates` knows of a rule for one text: whether the producing command lets
#: it through (one of its anchors or tokens is in the command), whether the command
#: carries its required context, and its :class:`RuleGate`.
Gate = tuple[bool, bool, RuleGate]


def rule_matches(rule: Rule, idx: TextIndex, src_low: str, src_ctx: str, gate: Gate | None = None) -> Iterator[Any]:
    """``gate``: the rule's gate prepared by :class:`~.scanner._Gates` (computed here otherwise)."""
    text, n = idx.text, idx.n
    # gate: anchors / tokens
    hits: list[int] | None = None
    if gate is None:
        anchored_by_source = any(a in src_low for a in rule.anchors) or any(t in src_low for t in rule.tokens)
    else:
        anchored_by_source = gate[0]
    if (rule.anchors or rule.tokens) and not anchored_by_source:
        present_a = [a for a in rule.anchors if idx.has(a, False)]
        if gate is None:
            present_t = [t for t in rule.tokens if idx.has(t, True)]
        else:  # one intersection; the order of the hits is sorted below
            present_t = [t.decode() for t in gate[2].tokens.intersection(idx.tokens())]
        if not present_a and not present_t:
            return
        hs: list[int] = []
        for a in present_a:
            hs.extend(idx.positions(a))
        for t in present_t:
            hs.extend(idx.word_positions(t))
        if not hs:
            return
        hits = sorted(set(hs))
    # gate: required context keywords
    ctx_wins: list[Window] | None = None
    ctx_by_source = bool(src_ctx and rule.context_required is not None and rule.context_required.search(src_ctx)) \
        if gate is None else gate[1]
    if rule.context_required is not None and rule.context_literals and not ctx_by_source:
        if gate is None:
            present_c = [(k, w) for k, w in rule.context_literals if idx.has(k, w)]
        else:
            present_c = [(k.decode(), True) for k in gate[2].ctx_words.intersection(idx.tokens())]
            present_c.extend((k, False) for k in gate[2].ctx_subs if idx.has(k, False))
        if not present_c:
            return
        if rule.scope == "window" and hits is None and rule.prefilter is None:
            # nothing else narrows the search: windows around the keywords
            ctx_wins = _context_windows(rule, idx, present_c)
    # prefilter runs
    runs: list[Window] | None = None
    if rule.prefilter is not None:
        runs = idx.runs(rule.prefilter)
        if rule.run_len is not None:
            lo, hi = rule.run_len
            runs = [r for r in runs if lo <= r[1] - r[0] <= hi]
        if not runs:
            return
    before, after = rule.reach
    if hits is None and runs is not None:
        if ctx_wins is None and rule.expand is not None:
            yield from _matches_expand(rule, idx, [s for s, _ in runs])
            return
        if before == 0 and rule.expand is None and ctx_wins is None:
            yield from _matches_at(rule, text, [s for s, _ in runs])
            return
        else:
            wins = _merge([(s - before if s > before else 0, min(n, e + after)) for s, e in runs])
            if ctx_wins is not None:
                wins = _intersect(wins, ctx_wins)
            yield from _matches_in(rule, text, wins)
            return
    elif hits is not None and runs is not None:
        rw = _merge([(s - after if s > after else 0, e + before) for s, e in runs])
        rs = [w[0] for w in rw]
        hits = [h for h in hits if _in_windows(h, rs, rw)]
    if hits is None:
        if ctx_wins is not None:
            yield from _matches_in(rule, text, ctx_wins)
        else:
            yield from rule.pattern.finditer(text)
        return
    if ctx_wins is not None:
        cs = [w[0] for w in ctx_wins]
        hits = [h for h in hits if _in_windows(h, cs, ctx_wins)]
    if not hits:
        return
    if rule.expand is not None:
        yield from _matches_expand(rule, idx, hits)
    elif before == 0:
        yield from _matches_at(rule, text, hits)
    else:
        wins = _merge([(h - before if h > before else 0, min(n, h + after)) for h in hits])
        yield from _matches_in(rule, text, wins)


def _intersect(a: list[Window], b: list[Window]) -> list[Window]:
    out: list[Window] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
