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

This module holds the catalogue-wide gate and :func:`candidates`; the per-text index is
:mod:`.textindex`, running one rule over a text is :mod:`.rulematch`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from .catalog import Catalog
from .normalize import trim_value
from .rulematch import Gate, RuleGate, boundary_ok, context_ok, rule_matches
from .rules import Rule
from .textindex import TextIndex

__all__ = ["Cand", "candidates"]


@dataclass(slots=True)
class Cand:
    """A candidate that passed context, validators, filters (before overlap resolution)."""

    rule: Rule
    start: int
    end: int
    value: str
    norm_groups: dict[str, str] | None


# --------------------------------------------------------------------------- the gate, once per text


class _Gates:
    """A catalogue's gates inverted: which rules a text's words, its substrings and the
    producing command can let through. A rule with anchors or tokens runs only if one of
    them is a word of the text (tokens), a substring of it (anchors), or a substring of the
    producing command (either) — the test :func:`~.rulematch.rule_matches` makes, made here
    for every rule at once: one set intersection for the tokens, one substring test per
    distinct anchor, instead of every literal of every rule tried on every text (a short
    text then cost as much as 340 tests). What the producing command lets through, and which
    rules' required context it carries, is remembered per command."""

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
        #: without which :func:`~.rulematch.rule_matches` would find nothing)
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
        its gate for :func:`~.rulematch.rule_matches`."""
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
        find, has = ix.low.find, ix._has  # noqa: SLF001 - TextIndex's memo (.textindex)
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
        for m in rule_matches(rule, ix, src_low, src_ctx, gate):
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
            if rule.boundary is not None and not boundary_ok(rule, text, m.start()):
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
                elif not context_ok(rule, text, s, e, ""):
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
