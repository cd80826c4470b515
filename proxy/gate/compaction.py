"""The compaction check: what the gate does about a request whose history shrank.

:func:`analyze_request` judges the transition from the conversation's previous snapshot
to this request under the policy's obligation rule. :func:`respond_to_compaction`
applies the scoped action to the verdict: a destructive compaction is recorded, arms the
tripwire, and (``reinject``/``spill``/``reject``) becomes the conversation's
:class:`~proxy.gate.convstate.Pending` repair; a safe non-append transition is recorded
(and warned about under ``safe: warn``). :func:`repair` then applies the pending repair
to this request — on the compacting request and on every later one until the client
sends the bindings itself (the repair is sticky).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.analysis import Analysis, analyze
from ..core.diff import SourceRef
from ..core.identifiers.model import Identifier
from ..core.interventions.bindings import Binding
from ..core.interventions.placement import insert_note, raw_index
from ..core.interventions.recall_tool import RecallHandle
from ..core.interventions.reinject import reinject
from ..core.interventions.reject import rejection_message
from ..core.interventions.spill import recall_note, render_region, spill_note
from ..core.markers import Markers, fold
from ..core.messages import Snapshot
from ..core.signals import Obligation
from ..core.transition import Transition, within_last_turn
from ..policy.obligations import PolicyObligations
from ..server.hooks import Reject
from .convstate import ConversationState, Pending
from .identifiers import extract, lost_binding
from .request import GateRequest
from .spill import ANONYMOUS, SpillStore

#: ``(conversation id, index of the region's first message) -> (first seen, last seen)``
#: in epoch seconds (``None`` when unknown): when the region's messages were on the wire.
SpanOf = Callable[[str, int], "tuple[float | None, float | None]"]


@dataclass(frozen=True)
class SpillTarget:
    """Where ``spill`` stores lost regions, the public path prefix of a handle, and how to
    date a region (for the recall tool's description)."""

    store: SpillStore
    path: str
    span: SpanOf | None = None


@dataclass(frozen=True)
class Spilled:
    """A region stored by ``spill``: the note pointing at it (``GET`` URL) and the
    handle as the recall tool describes it."""

    note: str
    handle: RecallHandle


@dataclass(frozen=True)
class Repair:
    """The outcome for the request: its action, and a rewritten body or a rejection."""

    action: str
    body: dict[str, Any] | None = None
    reject: Reject | None = None


@dataclass(frozen=True)
class ProtectedObligations:
    """The policy's obligation rule, plus one obligation keeping the bindings the gate
    contracted for the conversation (:attr:`ConversationState.protected`) wherever they
    now appear — in a summary, or the gate's own appended section (user prose that no
    rule would otherwise call required)."""

    base: PolicyObligations
    values: frozenset[str]

    def __call__(self, identifiers: Sequence[Identifier], before: Snapshot) -> Sequence[Obligation]:
        out = list(self.base(identifiers, before))
        hits = [i for i in identifiers if i.value in self.values and not i.sensitive]
        if hits:
            norms = tuple(dict.fromkeys(i.norm for i in hits))
            out.append(Obligation("keep_bindings", SourceRef.of(hits[0].source), norms))
        return out


def analyze_request(
    req: GateRequest, markers: Markers, st: ConversationState | None = None, transition: Transition | None = None
) -> Analysis | None:
    """The analysis of previous → current (``None`` for a conversation's first request);
    ``transition``: previous → current already classified (with these markers)."""
    previous = req.obs.previous
    if previous is None:
        return None
    base = PolicyObligations(req.policy)
    rule: ProtectedObligations | PolicyObligations = base
    if st is not None and st.protected:
        rule = ProtectedObligations(base, frozenset(b.value for b in st.protected))
    return analyze(
        previous,
        req.obs.current,
        markers=markers,
        catalog=req.catalog,
        obligation_rule=rule,
        quick_survival=True,
        transition=transition,
    )


def summary_anchor(analysis: Analysis) -> int | None:
    """The index (in the current snapshot) of the message a note follows: the last summary
    message, else the last inserted one, else the message before the seam — where the
    lost region used to be — so that a note never lands between leading system messages
    and the client's own context that the compaction kept (``None``: the seam is the very
    start)."""
    t = analysis.transition
    if t.summary:
        return max(t.summary)
    if t.inserted:
        return max(t.inserted)
    lost = analysis.lost_region
    if not lost:
        return None
    first = lost[0]
    before = [b + size for a, b, size in t.kept if a + size <= first]
    seam = max(before, default=0)
    return seam - 1 if seam > 0 else None


def summary_part(current: Snapshot, anchor: int | None, markers: Markers) -> str | None:
    """The text of the part of message ``anchor`` that is the summary: the one that
    presents a summary (continuation marker, summary opener), else the longest text."""
    if anchor is None or not 0 <= anchor < len(current.messages):
        return None
    texts = [p.text for p in current.messages[anchor].parts if p.kind == "text" and p.text.strip()]
    if len(texts) <= 1:
        return texts[0] if texts else None
    m = current.messages[anchor]
    for text in texts:
        if markers.presents_summary(fold(text[:4000]), m.role):
            return text
    return max(texts, key=len)


def _text_key(text: str | None) -> str | None:
    return (
        None
        if text is None
        else hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    )


def part_with_key(current: Snapshot, index: int | None, key: str | None) -> str | None:
    """The text of the part of message ``index`` whose :func:`_text_key` is ``key``."""
    if index is None or key is None or not 0 <= index < len(current.messages):
        return None
    for p in current.messages[index].parts:
        if p.kind == "text" and _text_key(p.text) == key:
            return p.text
    return None


def index_of_digest(current: Snapshot, digest: str | None) -> int | None:
    """The index of the first message of ``current`` with ``digest``."""
    if digest is None:
        return None
    for i, m in enumerate(current.messages):
        if m.digest == digest:
            return i
    return None


def spill_lost_region(
    req: GateRequest, analysis: Analysis, bindings: Sequence[Binding], target: SpillTarget,
    described: Sequence[tuple[str, str]] | None = None,
) -> Spilled | None:
    """Store the region the compaction removed under a tenant-scoped handle and return the
    note that points the model at it, and the handle as the recall tool describes it
    (with ``described`` as its identifiers, else ``bindings``); ``None`` for an anonymous
    tenant (nobody could read it back) or an empty region. The store redacts every secret of the region with the gate's own detectors
    (the policy's catalog) before storing, even for their tenant: a spill never holds a
    secret (a required one makes the action ``reject`` instead, see
    :func:`respond_to_compaction`)."""
    ex, prev, policy = req.ex, req.obs.previous, req.policy
    if not ex.tenant or ex.tenant == ANONYMOUS or prev is None:
        return None
    region = [i for i in analysis.lost_region if 0 <= i < len(prev.messages)]
    if not region:
        return None
    text = render_region([prev.messages[i] for i in region])
    rec = target.store.put(
        ex.tenant,
        req.cid,
        text,
        ttl_seconds=policy.spill_ttl_seconds,
        max_bytes=policy.spill_max_bytes,
        bindings=tuple({"value": b.display().strip("`"), "kind": b.kind} for b in bindings),
        catalog=req.catalog,
    )
    listed = bindings if policy.spill_list_bindings else ()
    since, until = target.span(req.cid, region[0]) if target.span is not None else (None, None)
    pairs = described if described is not None else [(b.value, b.kind) for b in bindings if not b.sensitive]
    handle = RecallHandle(
        rec.handle, len(region), region[0], region[-1], since, until, tuple(dict.fromkeys(pairs)), rec.expires
    )
    return Spilled(spill_note(rec.handle, listed, url_path=target.path + rec.handle), handle)


def _lost_bindings(req: GateRequest, analysis: Analysis) -> list[Binding]:
    """What a destructive compaction's repair restores: the required bindings it lost
    (plus, with ``reinject.include_regenerable``, the other non-secret ones), minus the
    policy's allowlist."""
    policy = req.policy
    required = [lost_binding(policy, b) for b in analysis.required_missing]
    extra = [
        lost_binding(policy, b)
        for b in analysis.dropped + analysis.altered
        if not b.required and not b.sensitive and policy.reinject_include_regenerable
    ]
    return [b for b in required + extra if not policy.allowlisted(b.value)]


def _visible_secret_norms(req: GateRequest, current: Snapshot) -> frozenset[str]:
    """Fingerprints of the secrets the request carries (a secret a repair cannot show is
    back when the client sends it again)."""
    return frozenset(i.norm for i in extract(current, req.catalog) if i.sensitive)


@dataclass(frozen=True)
class Responded:
    """The request's action so far (``none`` when there is nothing to say) and, for a
    safe compaction spilled under ``safe: spill``, the note pointing at the handle (what
    the request gets when the recall tool cannot be offered)."""

    action: str
    safe_note: str | None = None


def respond_to_compaction(
    req: GateRequest, st: ConversationState, analysis: Analysis | None, spill: SpillTarget, markers: Markers
) -> Responded:
    """Apply the scoped action to the verdict (see the module docstring)."""
    if analysis is None:
        return Responded("none")
    eff, current = req.effective, req.obs.current
    if analysis.transition.kind == "reset":
        st.pending, st.armed, st.tripwire_request = None, 0, None
    if analysis.destructive:
        bindings = _lost_bindings(req, analysis)
        action = eff.destructive
        secret = any(b.sensitive for b in bindings)
        if secret and action in ("reinject", "spill"):
            # a required secret can be neither re-injected in clear nor spilled (the spill
            # store redacts secrets): refuse rather than pass it silently (PRINCIPLES §4)
            action = "reject"
        anchor = summary_anchor(analysis)
        anchor_digest = (
            current.messages[anchor].digest
            if anchor is not None and anchor < len(current.messages)
            else None
        )
        anchor_part = _text_key(summary_part(current, anchor, markers))
        footer = None
        if action == "spill":
            spilled = spill_lost_region(req, analysis, bindings, spill)
            if spilled is None:  # anonymous tenant: nobody could read it back
                action = "reinject"
            else:
                footer = spilled.note
                st.add_recall(spilled.handle)
        # arm the tripwire
        sig = analysis.signals.next_action
        st.armed = req.policy.tripwire_window
        st.dropped_kinds = frozenset(sig.dropped_kinds)
        st.expected = dict(sig.expected_by_kind)
        st.known_norms = set(sig.known_norms)
        st.tripwire_request = None
        if action in ("reinject", "spill", "reject"):
            handle = st.recall[-1].handle if action == "spill" and st.recall else None
            new = Pending(action, bindings, anchor_digest, footer, anchor_part, handle)
            summarized = bool(analysis.transition.summary or analysis.transition.inserted)
            st.pending = new if summarized else _extended(st.pending, new)
        known = {b.value for b in st.lost}
        st.lost += [b for b in bindings if b.value not in known]
        req.record(
            "compaction",
            action,
            verdict=analysis.verdict,
            transition=analysis.transition.kind,
            agent=analysis.agent,
            dropped=[b.to_json() for b in analysis.dropped],
            altered=[b.to_json() for b in analysis.altered],
            required=[b.value for b in analysis.required_missing],
            signals=analysis.signals.to_json(),
            scopes=list(eff.scopes),
            message=f"{analysis.transition.kind} dropped {len(analysis.required_missing)} required binding(s)",
        )
        return Responded(action)
    previous = req.obs.previous
    last_turn = previous is not None and within_last_turn(analysis.transition, previous)
    # an edited, regenerated or replaced last turn that lost nothing required is an
    # ordinary turn: tracked (the timeline has its kind), not a compaction event
    if analysis.transition.kind != "append" and not last_turn and not _still_pending(req, st):
        # (a request the pending repair still answers — a refused request resent with other
        # tools, say — is judged by that repair, not logged "safe")
        safe = eff.safe
        spilled = None
        if safe == "spill":
            dropped = [(b.value, b.kind) for b in analysis.dropped + analysis.altered if not b.sensitive]
            spilled = spill_lost_region(req, analysis, [], spill, dropped)
            if spilled is None:
                safe = "allow"  # nothing removed, or nobody could read it back
            else:
                st.add_recall(spilled.handle)
        req.record(
            "compaction",
            safe if safe in ("warn", "spill") else "none",
            verdict=analysis.verdict,
            transition=analysis.transition.kind,
            agent=analysis.agent,
            dropped=[b.to_json() for b in analysis.dropped],
            signals=analysis.signals.to_json(),
            message=f"{analysis.transition.kind}: every required binding survived"
            + (f"; the removed region was spilled under {spilled.handle.handle}" if spilled is not None else ""),
        )
        if safe in ("warn", "spill"):
            return Responded(safe, spilled.note if spilled is not None else None)
    return Responded("none")


def _extended(earlier: Pending | None, new: Pending) -> Pending:
    """The conversation's repair after a lossy transition that brings no summary of its
    own (a regenerated or edited turn after the compaction): it extends the earlier
    repair — the note stays where it was, right after the summary, byte-stable, and a
    binding the note already restores keeps its original source; a new spill's note and
    its handle replace the earlier ones together (the note names the handle). (A new
    summary replaces the repair instead.)"""
    if earlier is None:
        return new
    known = {b.value for b in earlier.bindings}
    bindings = list(earlier.bindings) + [b for b in new.bindings if b.value not in known]
    footer, handle = (new.footer, new.handle) if new.footer else (earlier.footer, earlier.handle)
    return replace(earlier, action=new.action, bindings=bindings, footer=footer, handle=handle)


def _still_pending(req: GateRequest, st: ConversationState) -> bool:
    """Whether the conversation's pending repair still applies to this request (it lacks
    one of the repair's non-secret bindings)."""
    p = st.pending
    if p is None:
        return False
    visible = req.obs.current.visible_text()
    return any(not b.sensitive and b.value not in visible for b in p.bindings)


def repair(
    req: GateRequest, st: ConversationState, analysis: Analysis | None, action: str, recall_tool: str | None = None
) -> Repair:
    """Apply the conversation's pending repair to this request, if the request still
    lacks one of its (non-secret) bindings; a request that has them all ends it (and
    what the conversation lost is forgotten once the client sends it back). A ``spill``
    repair is the spill note alone (listing the bindings per ``spill.list_bindings``):
    it names the recall tool when this request is offered it (``recall_tool``), else
    the handle's ``GET`` URL."""
    current, policy = req.obs.current, req.policy
    p = st.pending
    if not st.lost and p is None:
        return Repair(action)  # nothing to look for: the history's text is not read
    visible = current.visible_text()
    if st.lost:
        st.lost = [b for b in st.lost if b.sensitive or b.value not in visible]
        if not [b for b in st.lost if not b.sensitive]:
            st.lost = []
    if p is None:
        return Repair(action)
    secrets_back = (
        _visible_secret_norms(req, current) if any(b.sensitive for b in p.bindings) else frozenset()
    )
    still = [
        b
        for b in p.bindings
        if (b.norm not in secrets_back if b.sensitive else b.value not in visible)
    ]
    if not still:
        st.pending = None
        return Repair(action)
    if p.action == "reject":
        if analysis is None or not analysis.destructive:
            req.record(
                "reject_sticky",
                "reject",
                required=[b.value for b in still],
                transition=analysis.transition.kind if analysis is not None else None,
                message=f"still refused: the history lacks {len(still)} binding(s) an earlier compaction dropped",
            )
        return Repair(
            "reject", reject=Reject(400, rejection_message(still), code="destructive_compaction")
        )
    anchor = index_of_digest(current, p.anchor_digest)
    raw_anchor = raw_index(req.dialect, req.body, anchor) if anchor is not None else None
    if p.action == "spill" and p.footer is not None:
        return _spill_repair(req, p, still, analysis, action, recall_tool, raw_anchor, part_with_key(current, anchor, p.anchor_part))
    res = reinject(
        req.dialect,
        req.body,
        still,
        anchor=raw_anchor,
        after_text=part_with_key(current, anchor, p.anchor_part),
        role=policy.reinject_role,
        budget_tokens=policy.reinject_budget_tokens,
        count_tokens=req.count_tokens,
        footer=p.footer,
    )
    if action == "none":
        action = p.action
    reinjected = [
        {"value": b.value if not b.sensitive else b.display(), "kind": b.kind, "where": b.source}
        for b in res.kept
    ]
    if analysis is None or not analysis.destructive:
        req.record(
            "reinject_sticky",
            action,
            bindings=[b.value if not b.sensitive else b.display() for b in res.kept],
            reinjected=reinjected,
            message="repeated the repair of an earlier compaction",
        )
    else:
        req.record(
            "reinject",
            action,
            reinjected=reinjected,
            message=f"re-injected {len(reinjected)} binding(s) verbatim after the summary",
        )
    return Repair(action, body=res.body)


def _spill_repair(
    req: GateRequest,
    p: Pending,
    still: list[Binding],
    analysis: Analysis | None,
    action: str,
    recall_tool: str | None,
    anchor: int | None,
    after_text: str | None,
) -> Repair:
    listed = [b for b in still if not b.sensitive] if req.policy.spill_list_bindings else []
    note = recall_note(p.handle, listed, tool=recall_tool) if recall_tool and p.handle else p.footer
    assert note is not None
    body, _ = insert_note(req.dialect, req.body, note, anchor=anchor, role=req.policy.reinject_role, after_text=after_text)
    sticky = analysis is None or not analysis.destructive
    req.record(
        "reinject_sticky" if sticky else "reinject",
        "spill",
        reinjected=[{"value": b.value, "kind": b.kind, "where": b.source} for b in listed],
        handle=p.handle,
        recall_tool=recall_tool,
        message=("repeated the spill note of an earlier compaction" if sticky else "pointed the model at the spilled region")
        + (f" (recall tool {recall_tool})" if recall_tool else ""),
    )
    return Repair("spill" if action == "none" else action, body=body)


def add_note(req: GateRequest, analysis: Analysis, note: str, markers: Markers) -> dict[str, Any]:
    """The request's body with ``note`` right after the summary (or where the removed
    region used to be): the fallback when a ``safe: spill`` region cannot be offered
    through the recall tool."""
    current = req.obs.current
    anchor = summary_anchor(analysis)
    raw_anchor = raw_index(req.dialect, req.body, anchor) if anchor is not None else None
    body, _ = insert_note(
        req.dialect,
        req.body,
        note,
        anchor=raw_anchor,
        role=req.policy.reinject_role,
        after_text=summary_part(current, anchor, markers),
    )
    return body
