"""The scanning engine: runs a catalog's rules over one text, fast.

Python's regex engine costs ~10 ms per 200 KB for every pattern that must be tried at
every position, so rules are never run over a whole text unless they have nothing better.
Instead (all shared per text and computed lazily, once):

- **Gates**: a rule runs only if one of its ``tokens`` is a word of the text (one
  translate + split builds the set of words, snake/kebab/camel pieces included), or one
  of its ``anchors`` is a substring; and, when it requires context keywords, only if one
  of them occurs (or the producing command carries it).
- **Positions**: hits of the present anchors/tokens (word hits are boundary-checked),
  runs from a named character-run ``prefilter`` (``hex``: 7+ hex digits; ``alnum26``;
  ``underscore8``: ``_`` followed by 8+ alphanumerics; ``digit4``: 4+ digits) found with
  ``bytes.translate`` and
  substring search, and windows around context keywords.
- **Matching**: at each hit the rule's pattern is matched where the identifier must start
  — at the hit (``reach[0] == 0``), at the left end of the run of ``expand`` characters
  ending at the hit (an anchor in the middle, e.g. ``/`` in a path or ``://`` in a URL),
  or else searched in the merged window around hits and re-matched on the full text
  (a window end must not truncate a value).

Semantics are those of running the rule's pattern over the whole text with
``finditer``: every prefilter is a necessary condition of a match.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .catalog import Catalog, Rule
from .normalize import trim_value

__all__ = ["PREFILTERS", "Cand", "TextIndex", "candidates"]

Window = tuple[int, int]


@dataclass(slots=True)
class Cand:
    """A candidate that passed context, validators, filters (before overlap resolution)."""

    rule: Rule
    start: int
    end: int
    value: str
    norm_groups: dict[str, str] | None


# --------------------------------------------------------------------------- character runs
#
# All prefilters work on ``text.encode("ascii", "replace")``: one byte per character
# (every non-ASCII character becomes ``?``), so byte offsets are character offsets and
# the C-speed ``bytes`` methods (translate, find, lower, split) apply.

_MARK = 1
_LEAD = 2
_NON_MARK = re.compile(b"[^\x01]")


def _table(chars: str, lead: str = "") -> bytes:
    t = bytearray(range(256))
    for i in range(256):
        if i in (_MARK, _LEAD):
            t[i] = 0
    for c in chars:
        t[ord(c)] = _MARK
    for c in lead:
        t[ord(c)] = _LEAD
    return bytes(t)


_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_HEX_T = _table("0123456789abcdefABCDEF")
_ALNUM_T = _table(_ALNUM)
_US_ALNUM_T = _table(_ALNUM, "_")
_DIGIT_T = _table("0123456789")


def _runs(ab: bytes, table: bytes, min_len: int, lead: bool = False) -> list[Window]:
    """Spans of runs of ≥ ``min_len`` marked bytes (optionally right after a lead byte,
    which the span then includes)."""
    t = ab.translate(table)
    needle = (bytes([_LEAD]) if lead else b"") + bytes([_MARK]) * min_len
    out: list[Window] = []
    find = t.find
    pos = 0
    while True:
        i = find(needle, pos)
        if i < 0:
            return out
        m = _NON_MARK.search(t, i + len(needle))
        j = m.start() if m else len(t)
        out.append((i, j))
        pos = j


PREFILTERS: dict[str, Callable[[bytes], list[Window]]] = {
    "hex": lambda ab: _runs(ab, _HEX_T, 7),
    "alnum26": lambda ab: _runs(ab, _ALNUM_T, 26),
    "underscore8": lambda ab: _runs(ab, _US_ALNUM_T, 8, lead=True),
    "digit4": lambda ab: _runs(ab, _DIGIT_T, 4),
}


# --------------------------------------------------------------------------- per-text index

_TOKEN_TABLE = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in range(256))
_CAMEL_PIECE = re.compile(rb"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_IS_ALNUM = [chr(c).isalnum() and c < 128 for c in range(256)]
_IS_UPPER = [65 <= c <= 90 for c in range(256)]


class TextIndex:
    """Lazily computed, shared facts about one text."""

    __slots__ = ("_has", "_pos", "_rev", "_runs", "_tokens", "_wpos", "ab", "low", "n", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.ab = text.encode("ascii", "replace")
        self.low = self.ab.lower()
        self.n = len(text)
        self._tokens: frozenset[bytes] | None = None
        self._pos: dict[str, list[int]] = {}
        self._wpos: dict[str, list[int]] = {}
        self._runs: dict[str, list[Window]] = {}
        self._rev: bytes | None = None
        self._has: dict[tuple[str, bool], bool] = {}

    def tokens(self) -> frozenset[bytes]:
        """Lower-cased ASCII words of the text (split on non-alphanumerics and camelCase)."""
        if self._tokens is None:
            raw = set(self.ab.translate(_TOKEN_TABLE).split())
            out: set[bytes] = set()
            for t in raw:
                low = t.lower()
                out.add(low)
                if t != low and not t.isupper():
                    out.update(p.lower() for p in _CAMEL_PIECE.findall(t))
            self._tokens = frozenset(out)
        return self._tokens

    def has(self, literal: str, word: bool) -> bool:
        """Whether ``literal`` (lower case) occurs as a word (``word``) or a substring."""
        key = (literal, word)
        r = self._has.get(key)
        if r is None:
            if word:
                r = literal.encode("ascii", "replace") in self.tokens()
            else:
                r = bool(self.positions(literal))
            self._has[key] = r
        return r

    def positions(self, literal: str) -> list[int]:
        """Every substring occurrence of ``literal`` (lower case) in the lower-cased text."""
        hit = self._pos.get(literal)
        if hit is None:
            hit = []
            lit = literal.encode("ascii", "replace")
            find = self.low.find
            i = find(lit)
            while i >= 0:
                hit.append(i)
                i = find(lit, i + 1)
            self._pos[literal] = hit
        return hit

    def word_positions(self, word: str) -> list[int]:
        """Occurrences of ``word`` as a word: not inside a longer lower-case run
        (``upload`` in ``upload_id``, ``UploadId``, ``--upload-id``; not in ``uploads``)."""
        hit = self._wpos.get(word)
        if hit is None:
            ab, n, ln = self.ab, self.n, len(word)
            alnum, upper = _IS_ALNUM, _IS_UPPER
            hit = []
            for i in self.positions(word):
                if i > 0 and alnum[ab[i - 1]] and not (upper[ab[i]] and not upper[ab[i - 1]]):
                    continue
                j = i + ln
                if j < n and alnum[ab[j]] and not (upper[ab[j]] and not upper[ab[j - 1]]):
                    continue
                hit.append(i)
            self._wpos[word] = hit
        return hit

    def runs(self, name: str) -> list[Window]:
        r = self._runs.get(name)
        if r is None:
            r = PREFILTERS[name](self.ab)
            self._runs[name] = r
        return r

    def reversed(self) -> bytes:
        if self._rev is None:
            self._rev = self.ab[::-1]
        return self._rev


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


def _context_ok(rule: Rule, text: str, start: int, end: int, src_ctx: str) -> bool:
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


def _boundary_ok(rule: Rule, text: str, pos: int) -> bool:
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
    """A rule's literals as :class:`_Gates` prepares them: its tokens and its word context
    keywords as bytes (tested with one set intersection), its substring context keywords."""

    tokens: frozenset[bytes]
    ctx_words: frozenset[bytes]
    ctx_subs: tuple[str, ...]


#: What :class:`_Gates` knows of a rule for one text: whether the producing command lets
#: it through (one of its anchors or tokens is in the command), whether the command
#: carries its required context, and its :class:`RuleGate`.
Gate = tuple[bool, bool, RuleGate]


def _rule_matches(rule: Rule, idx: TextIndex, src_low: str, src_ctx: str, gate: Gate | None = None) -> Iterator[Any]:
    """``gate``: the rule's gate prepared by :class:`_Gates` (computed here otherwise)."""
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


# --------------------------------------------------------------------------- the gate, once per text


class _Gates:
    """A catalogue's gates inverted: which rules a text's words, its substrings and the
    producing command can let through. A rule with anchors or tokens runs only if one of
    them is a word of the text (tokens), a substring of it (anchors), or a substring of
    the producing command (either) — the test :func:`_rule_matches` makes, made here for
    every rule at once: one set intersection for the tokens, one substring test per
    distinct anchor, instead of every literal of every rule tried on every text (a short
    text then cost as much as 340 tests). What the producing command lets through, and
    which rules' required context it carries, is remembered per command."""

    __slots__ = ("_sources", "anchors", "by_source", "by_token", "order", "rule_gates", "token_set", "ungated",
                 "ungated_free", "ungated_runs")

    def __init__(self, catalog: Catalog) -> None:
        self.order = catalog.scan_order
        by_token: dict[bytes, list[int]] = {}
        by_anchor: dict[str, list[int]] = {}
        #: literal (anchor or token, as str) -> rules, for the producing command's test
        lits: dict[str, list[int]] = {}
        ungated: list[int] = []
        for k, rule in enumerate(self.order):
            if not rule.anchors and not rule.tokens:
                ungated.append(k)
            for t in rule.tokens:
                by_token.setdefault(t.encode("ascii", "replace"), []).append(k)
            for a in rule.anchors:
                by_anchor.setdefault(a, []).append(k)
            for lit in (*rule.anchors, *rule.tokens):
                lits.setdefault(lit, []).append(k)
        self.ungated = frozenset(ungated)
        #: the ungated rules without a prefilter (always live), and the others grouped by
        #: prefilter and run length (one test per group: a run of the right length,
        #: without which :func:`_rule_matches` would find nothing)
        self.ungated_free = frozenset(k for k in ungated if self.order[k].prefilter is None)
        groups: dict[tuple[str, tuple[int, int] | None], list[int]] = {}
        for k in ungated:
            r = self.order[k]
            if r.prefilter is not None:
                groups.setdefault((r.prefilter, r.run_len), []).append(k)
        self.ungated_runs = tuple((pf, rl, frozenset(ks)) for (pf, rl), ks in groups.items())
        self.by_token = by_token
        self.token_set = frozenset(by_token)
        #: (anchor, its bytes as :meth:`TextIndex.positions` searches them, rules)
        self.anchors = tuple((a, a.encode("ascii", "replace"), ks) for a, ks in by_anchor.items())
        self.by_source = tuple(lits.items())
        self.rule_gates = tuple(
            RuleGate(
                frozenset(t.encode("ascii", "replace") for t in r.tokens),
                frozenset(k.encode("ascii", "replace") for k, w in r.context_literals if w),
                tuple(dict.fromkeys(k for k, w in r.context_literals if not w)),
            )
            for r in self.order
        )
        self._sources: dict[str, tuple[frozenset[int], frozenset[int]]] = {}

    def live(self, ix: TextIndex, src_ctx: str) -> list[tuple[Rule, Gate]]:
        """The rules that pass their anchor/token gate on ``ix``, in scan order, each with
        its gate for :func:`_rule_matches`."""
        live = set(self.ungated_free)
        for pf, rl, group in self.ungated_runs:
            runs = ix.runs(pf)
            if runs and (rl is None or any(rl[0] <= e - s <= rl[1] for s, e in runs)):
                live.update(group)
        for t in self.token_set.intersection(ix.tokens()):
            live.update(self.by_token[t])
        # one substring test per anchor, remembered as TextIndex.has would (the live
        # rules' own test asks again); ``find``, not ``in``: CPython's ``bytes in bytes``
        # first tries its operand as an integer and builds (then drops) a TypeError
        find, has = ix.low.find, ix._has  # noqa: SLF001 - TextIndex's memo, same module
        for a, ab, ks in self.anchors:
            hit = find(ab) >= 0
            has[(a, False)] = hit
            if hit:
                live.update(ks)
        by_src, ctx_src = self._source(src_ctx)
        live.update(by_src)
        order, gates = self.order, self.rule_gates
        return [(order[k], (k in by_src, k in ctx_src, gates[k])) for k in sorted(live)]

    def _source(self, src_ctx: str) -> tuple[frozenset[int], frozenset[int]]:
        """The rules the producing command lets through, and those whose required
        context it carries."""
        hit = self._sources.get(src_ctx)
        if hit is None:
            if not src_ctx:
                return frozenset(), frozenset()
            if len(self._sources) >= _MAX_SOURCES:
                self._sources.pop(next(iter(self._sources), ""), None)
            low = src_ctx.lower()
            hit = self._sources[src_ctx] = (
                frozenset(k for lit, ks in self.by_source if lit in low for k in ks),
                frozenset(k for k, r in enumerate(self.order)
                          if r.context_required is not None and r.context_required.search(src_ctx)),
            )
        return hit


#: Gates by catalogue fingerprint (a policy reload builds another catalogue).
_GATES: dict[str, _Gates] = {}
#: Producing commands whose gate is remembered, per catalogue.
_MAX_SOURCES = 4096


def _gates(catalog: Catalog) -> _Gates:
    g = _GATES.get(catalog.fingerprint)
    if g is None or g.order is not catalog.scan_order:
        if len(_GATES) >= 16:
            _GATES.clear()
        g = _GATES[catalog.fingerprint] = _Gates(catalog)
    return g


def candidates(
    text: str, catalog: Catalog, src_ctx: str = "", idx: TextIndex | None = None, *, gated: bool = True
) -> list[Cand]:
    """All accepted candidates of every rule in ``text`` (overlaps not yet resolved).
    ``gated=False``: every rule tests its own literals, one by one — the same candidates
    (what the catalogue-wide gate of :class:`_Gates` is tested against)."""
    ix = idx or TextIndex(text)
    src_low = src_ctx.lower()
    out: list[Cand] = []
    verdicts: dict[tuple[str, str], bool] = {}  # (rule id, value) -> validators and filters pass
    # spans already claimed by a higher-priority, non-nesting candidate: a lower-priority
    # non-nesting candidate with the very same span always loses, so skip its validation
    claimed: set[tuple[int, int]] = set()
    rules: Iterable[tuple[Rule, Gate | None]] = (
        _gates(catalog).live(ix, src_ctx) if gated else ((r, None) for r in catalog.scan_order)
    )
    for rule, gate in rules:
        ctx_by_source = gate[1] if gate is not None else bool(
            src_ctx and rule.context_required is not None and rule.context_required.search(src_ctx))
        if (
            rule.scope == "text"
            and rule.context_required is not None
            and not (ctx_by_source or any(ix.has(k, w) for k, w in rule.context_literals)
                     or (not src_ctx and rule.context_required.search(src_ctx)))
        ):
            continue
        # context: a regex on a small slice per candidate; once a rule has many
        # candidates, a bisect in the keywords' positions (computed once) is cheaper
        need_ctx = rule.context_required is not None and rule.scope != "text" and not ctx_by_source
        ctx_pos: list[int] | None = None
        ctx_checks = 0
        grp = rule.group
        for m in _rule_matches(rule, ix, src_low, src_ctx, gate):
            if isinstance(grp, tuple):
                s = e = -1
                for g in grp:
                    s, e = m.span(g)
                    if s >= 0:
                        break
            else:
                s, e = m.span(grp)
            if s < 0 or e <= s:
                continue
            if rule.boundary is not None and not _boundary_ok(rule, text, m.start()):
                continue
            value = text[s:e]
            if grp != 0 or rule.norm is None:
                value, s, e = trim_value(value, s, e)
                if not value:
                    continue
            if need_ctx:
                ctx_checks += 1
                if ctx_pos is None and ctx_checks > 32 and rule.scope == "window":
                    ps: set[int] = set()
                    for k, w in rule.context_literals:
                        if ix.has(k, w):
                            ps.update(ix.word_positions(k) if w else ix.positions(k))
                    ctx_pos = sorted(ps)
                if ctx_pos is not None:
                    i = bisect.bisect_left(ctx_pos, s - rule.window)
                    if i >= len(ctx_pos) or ctx_pos[i] >= e + max(rule.window // 2, 10):
                        continue
                elif not _context_ok(rule, text, s, e, ""):
                    continue
            if not rule.nests and (s, e) in claimed:
                continue
            key = (rule.id, value)
            ok = verdicts.get(key)
            if ok is None:
                frx = rule.filter_rx
                ok = (
                    all(v(value) for v in rule.validators)
                    and not (frx is not None and frx.fullmatch(value))
                    and not any(f(value) for f in rule.filter_fns)
                )
                verdicts[key] = ok
            if not ok:
                continue
            groups: dict[str, str] | None = None
            if rule.norm is not None:
                groups = {k: (v or "") for k, v in m.groupdict().items()}
            out.append(Cand(rule, s, e, value, groups))
            if not rule.nests:
                claimed.add((s, e))
    return out
