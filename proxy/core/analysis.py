"""One transition, fully judged: kind, identifier diff, signals, verdict.

:func:`analyze` is what the proxy (on every request), ``compaction-gate check`` and the
replay tool call. The invariant (DESIGN §2): a transition is ``safe`` iff every required
binding — non-regenerable, needed by an open obligation — survives
verbatim in what the model will see; otherwise it is ``destructive``. Altered values
(a truncated SHA, a path made relative) do not count as surviving.

Cost: an ``append`` (the common case) compares message digests and reads the last user
message for a summarize instruction — no identifier extraction, no text diff. Only a
transition that lost content extracts identifiers; callers that cache per-message
extraction pass ``before_identifiers`` / ``after_identifiers``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .diff import LostBinding, VisibleText, diff_identifiers
from .histtext import visible_text
from .identifiers.catalog import Catalog
from .identifiers.extract import extract_messages, extract_snapshot
from .identifiers.model import SYSTEM_INDEX, Identifier
from .identifiers.provenance import never_required
from .markers import NO_MARKERS, Markers
from .messages import Snapshot
from .notes import holds_note
from .signals import (
    NextActionSignal,
    Obligation,
    ObligationRule,
    Signals,
    TokenCounter,
    default_obligations,
    density_signal,
    obligation_signal,
    quiet_signals,
    required_norms,
)
from .summarize_request import SummarizeRequest, detect_summarize_request
from .transition import Transition, classify

Verdict = Literal["safe", "destructive"]


@dataclass(frozen=True, slots=True)
class Analysis:
    """The judged transition. ``dropped`` / ``altered`` list every lost identifier that
    did not survive verbatim (required ones first); the verdict depends only on the
    ``required`` ones."""

    verdict: Verdict
    transition: Transition
    agent: str | None
    dropped: tuple[LostBinding, ...]
    altered: tuple[LostBinding, ...]
    survived: int
    signals: Signals
    obligations: tuple[Obligation, ...] = ()
    summarize_request: SummarizeRequest | None = None

    @property
    def kind(self) -> str:
        return self.transition.kind

    @property
    def lost_region(self) -> tuple[int, ...]:
        return self.transition.lost_region

    @property
    def required_missing(self) -> tuple[LostBinding, ...]:
        """The bindings that make the verdict destructive (dropped, then altered)."""
        return tuple(b for b in self.dropped + self.altered if b.required)

    @property
    def destructive(self) -> bool:
        return self.verdict == "destructive"

    def to_json(self) -> dict[str, Any]:
        sr = self.summarize_request
        return {
            "verdict": self.verdict,
            "transition": self.transition.kind,
            "agent": self.agent,
            "dropped": [b.to_json() for b in self.dropped],
            "altered": [b.to_json() for b in self.altered],
            "survived": self.survived,
            "signals": self.signals.to_json(),
            "obligations": [o.to_json() for o in self.obligations],
            "lost_region": list(self.lost_region),
            "transition_detail": self.transition.to_json(),
            "summarize_request": None
            if sr is None
            else {
                "agent": sr.agent,
                "reason": sr.reason,
                "message_index": sr.message_index,
                "history_in_text": sr.history_in_text,
            },
        }


def _extract(snapshot: Snapshot, catalog: object | None) -> list[Identifier]:
    """The identifier layer (``catalog``: a :class:`~.identifiers.catalog.Catalog` or
    ``None`` for the built-in one; typed loosely so callers need not import it)."""
    return list(extract_snapshot(snapshot, catalog if isinstance(catalog, Catalog) else None))


def _as_regenerable(ids: Sequence[Identifier]) -> list[Identifier]:
    """``ids`` as provenance would judge them whatever the history (PRINCIPLES §3b)."""
    return [i if i.regenerable else dataclasses.replace(i, regenerable=True, why="3b") for i in ids]


def _unneeded(
    ids: Sequence[Identifier], before: Snapshot, lost_idx: set[int], cat: Catalog, obligation_rule: ObligationRule
) -> bool:
    """Whether none of ``ids`` (values of the lost messages ``lost_idx``) can be required:
    each is a value no history makes required (:func:`~.identifiers.provenance.never_required`:
    a name or noise with no machine-made part), none of the lost messages is the gate's
    own note (what it restates was judged required), and ``obligation_rule`` (the
    policy's regenerability and obligation rules, the gate's protected values) keeps
    none of them required either."""
    if any(not never_required(i, cat.binding_of) for i in ids):
        return False
    if any(holds_note(before.messages[i]) for i in lost_idx if 0 <= i < len(before.messages)):
        return False
    return not required_norms(obligation_rule(_as_regenerable(ids), before)) & {i.norm for i in ids}


def _judges_each(obligation_rule: ObligationRule, ids: Sequence[Identifier]) -> bool:
    """Whether ``obligation_rule`` requires of every subset of ``ids`` what it requires of
    each of its members by itself (:func:`~.signals.default_obligations` always; another
    rule when its ``judges_each(ids)`` says so): one that requires none of ``ids`` then
    requires none of any subset."""
    if obligation_rule is default_obligations:
        return True
    judges = getattr(obligation_rule, "judges_each", None)
    return callable(judges) and judges(ids) is True


def _quick_gone(
    before: Snapshot,
    after: Snapshot,
    lost_idx: set[int],
    catalog: object | None,
    obligation_rule: ObligationRule,
    lost: list[Identifier] | None = None,
) -> tuple[list[Identifier], VisibleText | None, int] | None:
    """The lost region judged from its own messages, when that settles the verdict
    ``safe``: its values that are not visible verbatim any more (none of them required),
    the request's visible text (``None`` when the region holds no value) and how many
    distinct values stayed visible verbatim;
    ``None`` when the whole analysis is needed. It is settled when every value the lost
    region holds is still visible verbatim in ``after`` (nothing dropped or altered,
    whatever provenance would say), or when none of those that are not can be required
    (:func:`_unneeded`). Only the lost messages are scanned (``lost``: their identifiers,
    when the caller has them); the request's text is read only to look values up."""
    cat = catalog if isinstance(catalog, Catalog) else Catalog.load_default()
    if lost is None:
        lost = extract_messages(before, lost_idx, cat)
    if not lost:
        return [], None, 0
    visible = VisibleText(visible_text(after))  # the request's, extended from the last one's
    gone = [i for i in lost if not visible.contains(i.value, case_insensitive=False)]
    survived = len({i.norm for i in lost} - {i.norm for i in gone})
    if not gone:
        return [], visible, survived
    if not _unneeded(gone, before, lost_idx, cat, obligation_rule):
        return None
    return _as_regenerable(gone), visible, survived


def _quick(
    before: Snapshot,
    after: Snapshot,
    lost_idx: set[int],
    catalog: object | None,
    obligation_rule: ObligationRule,
) -> tuple[tuple[LostBinding, ...], int] | None:
    """:func:`_quick_gone`'s settled verdict with the lost values diffed: ``safe``, with
    the lost values that are not visible verbatim any more and how many values survived,
    or ``None`` when the whole analysis is needed."""
    quick = _quick_gone(before, after, lost_idx, catalog, obligation_rule)
    if quick is None:
        return None
    gone, visible, survived = quick
    if not gone or visible is None:
        return (), survived
    d = diff_identifiers(gone, visible)
    return d.dropped + d.altered, survived + d.survived


def _lost_indexes(t: Transition) -> set[int]:
    """The messages of ``before`` the analysis of ``t`` judges (the system prompt as
    :data:`SYSTEM_INDEX` when it changed); empty for an append or a new task."""
    lost_idx = set(t.lost_region)
    if t.kind == "reset" or not lost_idx:
        return set()
    if t.system_changed:
        # The old system prompt is part of what changed: its identifiers are diffed too
        # (the default obligation rule never requires them).
        lost_idx.add(SYSTEM_INDEX)
    return lost_idx


def settled_safe(
    before: Snapshot,
    after: Snapshot,
    transition: Transition,
    *,
    catalog: object | None = None,
    obligation_rule: ObligationRule = default_obligations,
) -> bool:
    """Whether :func:`analyze` with ``quick_survival`` (and this ``transition``) judges the
    transition ``safe`` from the lost region alone — what a caller needs that acts only on
    a destructive verdict — without diffing the lost values (which values went, and in
    what altered form, is the event's detail). ``False`` means the whole analysis is
    needed, not that the verdict is destructive. When none of the lost values can be
    required (:func:`_unneeded`) and the rule judges each value by itself
    (:func:`_judges_each`), the answer is ``True`` without looking the values up in the
    request: which of them went cannot change it."""
    lost_idx = _lost_indexes(transition)
    if not lost_idx:
        return True
    cat = catalog if isinstance(catalog, Catalog) else Catalog.load_default()
    lost = extract_messages(before, lost_idx, cat)
    if _judges_each(obligation_rule, lost) and _unneeded(lost, before, lost_idx, cat, obligation_rule):
        # none of the lost values can be required, whichever of them went: which are
        # still visible (a search of the whole request's text for each) cannot matter
        return True
    return _quick_gone(before, after, lost_idx, cat, obligation_rule, lost) is not None


def analyze(
    before: Snapshot,
    after: Snapshot,
    *,
    markers: Markers = NO_MARKERS,
    catalog: object | None = None,
    obligation_rule: ObligationRule = default_obligations,
    before_identifiers: Sequence[Identifier] | None = None,
    after_identifiers: Sequence[Identifier] | None = None,
    transition: Transition | None = None,
    lenient_last_reply: bool = True,
    token_counter: tuple[str, TokenCounter] | None = None,
    quick_survival: bool = False,
) -> Analysis:
    """Judge the transition from history ``before`` to request ``after``.

    ``catalog`` is passed to the identifier layer; ``before_identifiers`` /
    ``after_identifiers`` skip extraction when the caller has them (cached per message);
    ``transition`` skips classification; ``token_counter`` is ``(name, count)`` for the
    prose side of the density signal. ``quick_survival``: when every identifier of the
    lost region is still visible verbatim, answer ``safe`` with quiet signals without
    extracting (and judging) the rest of either history — the cost of an edit of the last
    turn then follows the messages it changed; the verdict and the lost bindings are the
    same as without it.
    """
    t = transition or classify(before, after, markers, lenient_last_reply=lenient_last_reply)
    sreq = detect_summarize_request(after, markers)
    agent = t.agent or (sreq.agent if sreq else None)

    lost_idx = _lost_indexes(t)
    if not lost_idx:
        # Append (the hot path) or a new task: nothing to diff. A system prompt rewritten
        # on an append (Letta's memory blocks) is flagged in the transition, not diffed.
        return Analysis("safe", t, agent, (), (), 0, quiet_signals(), (), sreq)
    if quick_survival and before_identifiers is None:
        quick = _quick(before, after, lost_idx, catalog, obligation_rule)
        if quick is not None:
            gone, survived = quick
            dropped = tuple(b for b in gone if b.status == "dropped")
            altered = tuple(b for b in gone if b.status != "dropped")
            return Analysis("safe", t, agent, dropped, altered, survived, quiet_signals(), (), sreq)

    before_ids = list(before_identifiers) if before_identifiers is not None else _extract(before, catalog)
    after_ids = list(after_identifiers) if after_identifiers is not None else _extract(after, catalog)
    lost_ids = [i for i in before_ids if i.source.message_index in lost_idx]

    visible = VisibleText(after.visible_text(), after_ids)
    d = diff_identifiers(lost_ids, visible)

    obligations = tuple(obligation_rule(before_ids, before))
    required = required_norms(obligations)

    def mark(b: LostBinding) -> LostBinding:
        return dataclasses.replace(b, required=b.norm in required)

    by_req = lambda b: (not b.required, b.regenerable, b.source.message_index, b.value)
    dropped = tuple(sorted((mark(b) for b in d.dropped), key=by_req))
    altered = tuple(sorted((mark(b) for b in d.altered), key=by_req))
    missing = frozenset(b.norm for b in dropped + altered)

    # Signal 1: what went away vs what replaced it.
    old_msgs, new_msgs = before.messages, after.messages
    lost_text = "\n".join(old_msgs[i].text for i in sorted(lost_idx) if i >= 0)
    if SYSTEM_INDEX in lost_idx:
        lost_text = before.system + "\n" + lost_text
    repl_idx = set(t.summary) | set(t.inserted) | {c.new_index for c in t.changed}
    replacing_text = "\n".join(new_msgs[j].text for j in sorted(repl_idx))
    if t.system_changed:
        replacing_text = after.system + "\n" + replacing_text
    density = density_signal(d, lost_text, replacing_text, (i.value for i in before_ids), token_counter)

    # Signal 3: input for the tripwire.
    hard = [b for b in dropped + altered if not b.regenerable and not b.sensitive]
    expected: dict[str, tuple[str, ...]] = {}
    for b in hard:
        expected[b.kind] = expected.get(b.kind, ()) + (b.value,)
    next_action = NextActionSignal(
        dropped_kinds=frozenset(b.kind for b in hard),
        expected_by_kind=expected,
        known_norms=frozenset(i.norm for i in before_ids) | frozenset(i.norm for i in after_ids),
    )

    signals = Signals(density, obligation_signal(obligations, missing), next_action)
    verdict: Verdict = "destructive" if any(b.required for b in dropped + altered) else "safe"
    return Analysis(verdict, t, agent, dropped, altered, d.survived, signals, obligations, sreq)


__all__ = ["Analysis", "Verdict", "analyze", "settled_safe"]
