"""The summarization-call gate (DESIGN §4.1).

When the request *is* the agent's summarization call, the gate knows what is about to be
compacted. It appends the contract of the required bindings found in what the call
summarizes to its instruction (``gate.contract``) and installs a tap that checks the
returned summary and appends a verbatim section for what it still lacks
(``gate.append_missing``). The action is ``gate`` when either modifies something,
``warn`` otherwise; a call that summarizes no required binding is left alone. The
bindings an earlier destructive compaction of the conversation dropped (and the client
has not sent back) are contracted as well, so a re-compaction — the way forward after a
refusal — restores them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from ..core.interventions.bindings import Binding
from ..core.interventions.contract import add_summary_contract
from ..core.interventions.placement import is_opaque_summary_request
from ..core.messages import Snapshot
from ..server.hooks import Decision
from .convstate import ConversationState
from .identifiers import required_in
from .request import GateRequest
from .taps import GateTap
from .tracker import Tracker

#: How many of the tenant's most recent conversations :func:`history_for_side_request`
#: considers.
SIDE_REQUEST_CANDIDATES = 20


async def history_for_side_request(
    tracker: Tracker, req: GateRequest, limit: int = SIDE_REQUEST_CANDIDATES
) -> Snapshot | None:
    """The history a summarization side request summarizes when lineage could not attach
    it to its conversation: among this tenant's most recent other conversations, the one
    whose required bindings occur most often in the request's text (``None`` if none
    does).

    Why this exists: the tracker attaches a side request to its conversation by message
    hashes, which works when the agent sends the history as messages. Agents that paste
    the history into one prompt as (escaped) text — LangChain's SummarizationMiddleware
    formats the messages into its ``{messages}`` placeholder — share no message with the
    conversation, so ``obs.previous`` is ``None`` even though the request is recognised
    (by its marker) as a summarization call. The pasted text alone yields no required
    binding — obligations come from structured tool calls and results, which escaped
    text no longer has — so without this the call would go ungated. This finds the
    conversation whose required bindings the prompt quotes, so the contract lists them
    with their sources (the LangChain end-to-end test depends on it for its ``gate``).
    """
    visible = req.obs.current.visible_text()
    recs = sorted(
        (r for r in tracker.conversations() if r.tenant == req.ex.tenant and r.id != req.cid),
        key=lambda r: r.last_seen,
        reverse=True,
    )[:limit]
    best: tuple[int, Snapshot | None] = (0, None)
    for rec in recs:
        snap = await tracker.history(rec.id)
        if snap is None:
            continue
        score = sum(1 for b in required_in(req.policy, snap, req.catalog) if b.value in visible)
        if score > best[0]:
            best = (score, snap)
    return best[1]


def summarized_bindings(req: GateRequest, side_history: Snapshot | None) -> list[Binding]:
    """The required bindings this summarization call summarizes: those of its history
    (the conversation's previous snapshot, else ``side_history``) and of the call itself,
    that occur in the call's text."""
    obs = req.obs
    history = obs.previous or side_history or obs.current
    bindings = required_in(req.policy, history, req.catalog)
    if history is not obs.current:
        seen = {x.value for x in bindings}
        bindings += [b for b in required_in(req.policy, obs.current, req.catalog) if b.value not in seen]
    visible = obs.current.visible_text()
    return [b for b in bindings if b.value in visible]


def lost_bindings_to_restore(req: GateRequest, st: ConversationState | None, have: Sequence[Binding]) -> list[Binding]:
    """The bindings an earlier destructive compaction of this conversation dropped that the
    summarization call does not carry: the re-compaction must restore them (the way
    forward after a refusal under ``strict``). Never secrets."""
    if st is None or not st.lost:
        return []
    seen = {b.value for b in have}
    return [b for b in st.lost if not b.sensitive and b.value not in seen]


def gate_summary(req: GateRequest, side_history: Snapshot | None = None, st: ConversationState | None = None) -> Decision:
    """The decision for a summarization call (see the module docstring). ``st``: the
    conversation's gate state; the bindings it lost are contracted too.

    A server-side compaction (the input ends with a ``compaction_trigger`` item) returns
    an encrypted summary: the contract is added all the same, but nothing can check or
    patch the result, so no summary tap is installed."""
    policy = req.policy
    if not req.effective.gate:
        return Decision()
    bindings = summarized_bindings(req, side_history)
    if st is not None and st.protected:
        visible = req.obs.current.visible_text()
        have = {b.value for b in bindings}
        bindings += [b for b in st.protected if b.value in visible and b.value not in have]
    restore = lost_bindings_to_restore(req, st, bindings)
    bindings += restore
    if st is not None:
        st.protect(bindings)
    opaque = req.api == "responses" and is_opaque_summary_request(req.body)
    if not bindings:
        req.record("summarization", "none", message="summarization call with no required binding")
        return Decision()
    new_body = None
    listed = bindings
    if policy.gate_contract:
        new_body, listed = add_summary_contract(
            req.dialect, req.body, bindings, budget_tokens=policy.gate_budget_tokens, count_tokens=req.count_tokens
        )
    modifying = policy.gate_contract or policy.gate_append_missing
    action = "gate" if modifying else "warn"

    def on_summary(appended: list[Binding], missing: list[Binding]) -> None:
        if missing:
            message = f"summary lacked {len(missing)} binding(s)" + ("; appended verbatim" if appended else "")
        else:
            message = "summary kept every required binding"
        req.record(
            "summary_check",
            "gate" if appended else ("warn" if missing else "none"),
            required=[b.value for b in bindings],
            missing=[b.value for b in missing],
            appended=[b.value for b in appended],
            message=message,
        )

    tap = None if opaque else GateTap(
        req.api, summary_bindings=bindings, append_missing=policy.gate_append_missing, on_summary=on_summary
    )
    if opaque:
        action = "gate" if policy.gate_contract else "warn"
    message = f"summarization call: {len(bindings)} binding(s) must survive verbatim" + (
        f" ({len(restore)} lost by an earlier compaction)" if restore else ""
    )
    if opaque:
        message += "; server-side compaction: its summary is encrypted and cannot be checked"
    req.record(
        "summarization",
        action,
        agent=req.obs.summarization_agent,
        contract=[b.value for b in listed] if policy.gate_contract else [],
        required=[b.value for b in bindings],
        restore=[b.value for b in restore],
        opaque=opaque,
        message=message,
    )
    out = json.dumps(new_body, ensure_ascii=False).encode() if new_body is not None else None
    return Decision(action=action, body=out, tap=tap)


def summarization_call(req: GateRequest, st: ConversationState, side_history: Snapshot | None = None) -> Decision:
    """A summarization call of a conversation the gate may still answer for.

    The bindings an earlier destructive compaction lost (the conversation's pending
    repair) go into this call's contract, so a re-compaction can put them back (a local
    summary is then checked and completed like any other). When this call is a
    server-side compaction, the gate can hand the bindings over but never see whether
    they were kept: a pending refusal then becomes a plain-text re-statement of those
    bindings on the requests that follow (:func:`proxy.gate.compaction.repair`), which the
    refusal announced."""
    pending = st.pending
    decision = gate_summary(req, side_history, st)
    if (
        pending is not None
        and pending.action == "reject"
        and decision.action == "gate"
        and req.api == "responses"
        and is_opaque_summary_request(req.body)
    ):
        st.pending = replace(pending, action="reinject", anchor_digest=None)
    return decision
