"""The GateInterceptor: tracker observation + analysis + policy → :class:`Decision`.

Per request of a conversational API (OpenAI chat, Responses, Anthropic messages):

1. The tracker resolves the conversation and hands back the previous and current
   snapshots (:class:`proxy.gate.tracker.Observation`).
2. A **summarization request** (DESIGN §4.1) with the gate enabled gets the contract of
   required bindings appended to its instruction, and a tap that checks the summary and
   appends a verbatim section for what it still lacks (action ``gate``) —
   :mod:`proxy.gate.summarization`.
3. Otherwise the transition previous → current is analysed with the policy's obligation
   rule. A destructive verdict gets the scoped action: ``allow``/``warn`` forward
   untouched, ``reinject`` adds the dropped bindings after the summary, ``reject``
   answers 400 naming them, ``spill`` stores the lost region under a tenant-scoped handle
   and points the model at it (``safe: spill`` does so for every compaction). While a
   handle lives, requests are offered the recall tool and its calls are resolved by the
   gate over follow-up rounds (``Decision.rounds``) — :mod:`proxy.gate.recall`. The repair is **sticky**: the client keeps sending its
   compacted history, so later requests of the conversation get the same note (or the
   same rejection) until the bindings appear in what the client itself sends —
   :mod:`proxy.gate.compaction`.
4. After a destructive compaction the **tripwire** is armed for ``tripwire.window``
   requests: tool calls in responses are checked for identifiers of a dropped kind that
   never appeared in the conversation (block / annotate / warn) —
   :mod:`proxy.gate.tripwire`.

Every decision is an event (``GET /gate/events`` and the conversation's own events) —
:mod:`proxy.gate.recording`. Errors inside the gate never lose the request: by default it
is forwarded untouched and the error is recorded (fail-open); ``on_error: closed`` in the
policy refuses it instead. Nothing here logs or records secrets: tenant is a hash,
sensitive values are redacted.

With a store shared by several replicas (:mod:`proxy.state.protocol`) the decision and
what it changed in the conversation's state are committed before the request goes on
(:meth:`Tracker.commit`); a commit refused because another replica changed the
conversation first is decided again on the fresh state. A plain continuation the gate
lets through untouched, deciding nothing another replica could act on, is committed
with its reply instead (:meth:`Tracker.defer_commit`: one commit per request, before
the response ends). When the store cannot be
reached the request is forwarded untouched (``gate.fail_open``, the default) or refused
with a 503, and a ``state_unavailable`` event and the ``state_errors_total`` metric say
why (:mod:`proxy.gate.outage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from dataclasses import dataclass

from ..core.analysis import settled_safe
from ..core.interventions.bindings import TokenCounter, estimate_tokens
from ..core.markers import Markers, load_markers
from ..core.messages import Snapshot
from ..core.transition import Transition, classify, within_last_turn
from ..metrics import Metrics
from ..policy import PolicyHolder, RequestContext
from ..policy.detectors import policy_catalog
from ..policy.loader import markers_path
from ..policy.obligations import PolicyObligations
from ..server.hooks import Decision, Exchange, Reject, ResponseTap
from ..state.protocol import StateUnavailable
from .compaction import SpillTarget, add_note, analyze_request, repair, respond_to_compaction
from .convstate import ConversationStates
from .events import EventLog
from .observation import Observation
from .outage import Outage
from .prescan import prescan_lost, prescan_rest
from .recall import (
    H_RECALL,
    RecallPlan,
    RecallRounds,
    ResponseAliases,
    plan_recall,
    with_recall_tool,
)
from .recording import DecisionRecorder
from .request import GATED_KINDS, GateRequest
from .spill import SpillStore
from .summarization import history_for_side_request, summarization_call
from .taps import ChainTap
from .tracker import Tracker
from .tripwire import arm_tripwire

__all__ = ["GATED_KINDS", "GateConfig", "GateInterceptor", "default_token_counter", "policy_catalog"]

log = logging.getLogger("compaction_gate.gate")


def default_token_counter() -> TokenCounter:
    """cl100k token counts, or the documented estimate when the tokenizer files are
    missing (offline). The encoding loads on first use (the tracker's start-up preload
    has normally loaded it by then), not when the gate is built."""
    count: TokenCounter | None = None

    def counter(text: str) -> int:
        nonlocal count
        if count is None:
            try:
                from ..tokenizer import get_encoding

                enc = get_encoding("cl100k_base")
                count = lambda t: len(enc.encode(t, disallowed_special=()))
            except Exception:  # noqa: BLE001 - offline files missing: fall back to the documented estimate
                count = estimate_tokens
        return count(text)

    return counter


@dataclass(frozen=True)
class GateConfig:
    #: Conversations whose gate state is kept (LRU).
    max_conversations: int = 10_000
    #: Public path prefix of spill handles (told to the model).
    spill_path: str = "/gate/spill/"
    #: With the state store unreachable: forward untouched (True) or refuse with a 503.
    fail_open: bool = True
    #: Attempts to commit a request's decision when other replicas keep changing the
    #: conversation first.
    commit_attempts: int = 5


class GateInterceptor:
    """The :class:`~proxy.server.hooks.Interceptor` of compaction-gate."""

    def __init__(
        self,
        tracker: Tracker,
        policies: PolicyHolder,
        *,
        events: EventLog | None = None,
        spill: SpillStore | None = None,
        config: GateConfig | None = None,
        token_counter: TokenCounter | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.tracker = tracker
        self.policies = policies
        self.spill = spill if spill is not None else SpillStore()  # an empty store is falsy (len)
        self.config = config or GateConfig()
        self._count = token_counter or default_token_counter()
        self._states = ConversationStates(
            self.config.max_conversations, load=tracker.gate_state, save=tracker.save_gate_state, version=tracker.version
        )
        self._markers: dict[str, Markers] = {}
        self._aliases = ResponseAliases()
        #: Start-up work the first requests wait for (the catalogue; see
        #: :func:`proxy.gate.wiring.install_gate`), ``None`` when there is none.
        self.warming: asyncio.Future[None] | None = None
        self._recorder = DecisionRecorder(
            events if events is not None else EventLog(),
            tracker,
            policies,
            metrics if metrics is not None else Metrics(),
        )
        self.outage = Outage(self._recorder, self.config.fail_open)

    @property
    def events(self) -> EventLog:
        """The gate's decision log (``GET /gate/events``)."""
        return self._recorder.events

    @events.setter
    def events(self, value: EventLog) -> None:
        self._recorder.events = value

    @property
    def metrics(self) -> Metrics:
        """Where decisions are counted; :func:`proxy.gate.wiring.install_gate` replaces it
        with the app's instance (the default is a private, unscraped registry)."""
        return self._recorder.metrics

    @metrics.setter
    def metrics(self, value: Metrics) -> None:
        self._recorder.metrics = value

    # ------------------------------------------------------------------ entry point

    async def before(self, ex: Exchange) -> Decision:
        if self.warming is not None and not self.warming.done():
            with contextlib.suppress(Exception):  # a failed warm-up builds lazily instead
                await asyncio.shield(self.warming)
        for _attempt in range(self.config.commit_attempts):
            try:
                obs = await self.tracker.observe(ex, defer_accounting=True)
            except StateUnavailable as exc:
                return self.outage.decision(ex, exc)
            except Exception as exc:  # noqa: BLE001 - fail-open: never lose the request
                return self._failed(ex, None, None, exc, "observe")
            if obs is None:
                return Decision()
            try:
                decision = await self._decide_request(ex, obs)
            except StateUnavailable as exc:  # e.g. loading another conversation's history
                self.tracker.abandon(obs.conversation_id)
                return self.outage.decision(ex, exc, obs.conversation_id)
            if decision.action == "none" and self._plain(obs, decision) and self.tracker.defer_commit(obs.conversation_id):
                # committed with the reply (Tracker.acknowledge), then the state confirmed
                self.tracker.after_commit(obs.conversation_id, functools.partial(self._states.confirm, obs.conversation_id))
                break
            try:
                committed = await self.tracker.commit(obs.conversation_id)
            except StateUnavailable as exc:
                return self.outage.decision(ex, exc, obs.conversation_id)
            if committed:
                self._states.confirm(obs.conversation_id)
                break
        else:
            return self.outage.decision(ex, StateUnavailable("other replicas kept changing the conversation", "conflict"))
        if decision.action == "spill":
            try:
                await self.spill.flush()  # the handle told to the model must resolve everywhere
            except StateUnavailable as exc:
                return self.outage.decision(ex, exc, obs.conversation_id)
        if decision.action != "none":
            self.metrics.action(decision.action)
        self.outage.recovered(ex)
        return decision

    @staticmethod
    def _plain(obs: Observation, decision: Decision) -> bool:
        """Whether the request only continued its conversation and the gate let it
        through untouched: its changes may wait for its reply's commit (one commit per
        request, :meth:`Tracker.defer_commit`) as long as a reply tap will settle them."""
        return (
            obs.relation == "extend"
            and not obs.is_summarization_request
            and decision.body is None
            and decision.reject is None
            and decision.rounds is None
            and decision.tap is not None
        )

    async def _decide_request(self, ex: Exchange, obs: Observation) -> Decision:
        """The decision for a tracked request (its changes are not committed yet)."""
        tracker_tap: ResponseTap | None = None
        try:
            tracker_tap = self.tracker.tap(obs)
        except Exception:
            log.exception("tracker tap unavailable")
        if ex.kind not in GATED_KINDS or not isinstance(ex.json, dict):
            return Decision(conversation_id=obs.conversation_id, tap=tracker_tap)
        try:
            side_history = None
            if obs.is_summarization_request and obs.previous is None:
                side_history = await self._history_for_side_request(ex, obs)
            transition, previous = self._transition(obs), obs.previous
            if transition is not None and previous is not None:  # its long texts scanned off the loop
                await prescan_lost(previous, transition, policy_catalog(self.policies.policy))
            quiet = self._is_quiet(ex, obs, transition)
            if transition is not None and previous is not None and not quiet:  # the rest for the policy's steps
                await prescan_rest(previous, obs.current, transition, policy_catalog(self.policies.policy))
            decision = self._decide(ex, obs, side_history, transition, quiet)
        except StateUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - fail-open: never lose the request
            return self._failed(ex, obs, tracker_tap, exc, "analysis")
        taps = [t for t in (decision.tap, tracker_tap) if t is not None]
        tap: ResponseTap | None = ChainTap(taps) if len(taps) > 1 else (taps[0] if taps else None)
        return Decision(
            action=decision.action,
            conversation_id=obs.conversation_id,
            body=decision.body,
            reject=decision.reject,
            headers=decision.headers,
            tap=tap,
            rounds=decision.rounds,
        )

    def _failed(
        self, ex: Exchange, obs: Observation | None, tap: ResponseTap | None, exc: Exception, stage: str
    ) -> Decision:
        policy = self.policies.policy
        closed = policy.on_error == "closed"
        log.error(
            "gate %s failed (%s); %s",
            stage,
            exc.__class__.__name__,
            "refusing" if closed else "forwarding untouched",
        )
        log.debug("gate failure detail", exc_info=exc)
        cid = obs.conversation_id if obs is not None else None
        self._recorder.record(
            ex,
            cid,
            "gate_error",
            "none" if policy.on_error == "open" else "reject",
            obs,
            stage=stage,
            error=exc.__class__.__name__,
            message=f"gate {stage} failed: {exc.__class__.__name__}",
        )
        if closed:
            return Decision(
                action="reject",
                conversation_id=cid,
                reject=Reject(
                    502,
                    "compaction-gate could not analyse this request and is configured to fail closed.",
                    code="gate_error",
                    type="api_error",
                ),
            )
        return Decision(conversation_id=cid, tap=tap)

    # ------------------------------------------------------------------ decision

    def _request(self, ex: Exchange, obs: Observation) -> GateRequest:
        policy = self.policies.policy
        eff = policy.effective(RequestContext(model=ex.model, route=ex.path, tenant=ex.tenant, headers=ex.headers))
        return GateRequest(ex, obs, policy, eff, policy_catalog(policy), self._recorder, self._count)

    def _markers_for(self, name: str) -> Markers:
        """The markers a policy names: ``agents`` (the tracker's), a preset, or a file."""
        if name not in self._markers:
            if name == "agents":
                m = self.tracker.markers
            else:
                m = load_markers(markers_path(name))
            self._markers[name] = m
        return self._markers[name]

    async def _history_for_side_request(self, ex: Exchange, obs: Observation) -> Snapshot | None:
        return await history_for_side_request(self.tracker, self._request(ex, obs))

    def _transition(self, obs: Observation) -> Transition | None:
        """The transition the decision judges (the previous history to the request, with
        the policy's markers), classified once for it; ``None`` for a conversation's
        first request and for a summarization call (judged without it)."""
        if obs.previous is None or obs.is_summarization_request:
            return None
        markers = self._markers_for(self.policies.policy.markers)
        return classify(obs.previous, obs.current, markers, lenient_last_reply=True)

    def _is_quiet(self, ex: Exchange, obs: Observation, t: Transition | None) -> bool:
        """Whether the decision is the quiet one (:meth:`_quiet`): for a request that
        continues a conversation the gate holds nothing for (no sticky repair, lost or
        protected bindings, armed tripwire or tripwire input, spilled region, Responses
        alias) when it is a plain append, or a change of the last turn only (a reply the
        client replaced with its own message, an edited or regenerated last turn) that
        lost nothing required.
        ``t``: the transition (:meth:`_transition`).
        Each step of :meth:`_decide` would conclude the same for it — the analysis
        ``safe``, no compaction event (a safe change of the last turn is an ordinary
        turn), no repair, no recall, no tripwire, the body untouched — so only what they
        would change is done: the timeline's kind. (The tracker's ``extend`` is a lineage
        relation; the transition is still classified, digests first, so a re-serialised
        last reply counts as in the full analysis.) For a change of the last turn the
        verdict is settled from the lost messages alone (:func:`settled_safe`); which
        values went, the detail only an event would carry, is not diffed."""
        previous = obs.previous
        if t is None or previous is None or obs.relation != "extend":
            return False
        if ex.kind == "responses" and len(self._aliases):
            return False
        st = self._states.get(obs.conversation_id)
        if not st.is_empty() or st.dropped_kinds or st.tripwire_request is not None:
            return False
        if t.kind != "append":
            if t.kind == "reset" or not within_last_turn(t, previous):
                return False
            policy = self.policies.policy
            rule = PolicyObligations(policy)
            return settled_safe(previous, obs.current, t, catalog=policy_catalog(policy), obligation_rule=rule)
        return True

    def _quiet(self, obs: Observation, t: Transition) -> Decision:
        """The quiet decision (:meth:`_is_quiet`): only the timeline's kind is set."""
        self.tracker.set_transition(obs.conversation_id, obs.seq, t.kind)
        self._states.save(obs.conversation_id)  # a no-op unless the stored state was stale
        return Decision()

    def _decide(
        self, ex: Exchange, obs: Observation, side_history: Snapshot | None = None,
        transition: Transition | None = None, quiet: bool | None = None,
    ) -> Decision:
        """``quiet``: :meth:`_is_quiet` of the request, when the caller asked it."""
        if quiet is None:
            quiet = self._is_quiet(ex, obs, transition)
        if quiet and transition is not None:
            return self._quiet(obs, transition)
        req = self._request(ex, obs)
        st = self._states.get(req.cid)
        markers = self._markers_for(req.policy.markers)
        if obs.is_summarization_request:
            decision = summarization_call(req, st, side_history)
            self._states.save(req.cid)
            return decision
        analysis = analyze_request(req, markers, st, transition)
        if analysis is not None:
            # the timeline shows the classified kind (summarize, truncate …), not the relation
            self.tracker.set_transition(req.cid, obs.seq, analysis.transition.kind)
        target = SpillTarget(self.spill, self.config.spill_path, self.tracker.seen_span)
        responded = respond_to_compaction(req, st, analysis, target, markers)
        plan = plan_recall(req, st)
        offered = plan if isinstance(plan, RecallPlan) else None
        noted = responded.safe_note is not None or (st.pending is not None and st.pending.action == "spill")
        if isinstance(plan, str) and noted:
            req.record("recall_fallback", "spill", reason=plan, message=f"recall tool not offered ({plan}): the spill note instead")
        fixed = repair(req, st, analysis, responded.action, offered.name if offered is not None else None)
        tap = arm_tripwire(req, st)
        if fixed.reject is not None:
            self._states.save(req.cid)
            return Decision(action=fixed.action, reject=fixed.reject, headers={}, tap=tap)
        out = fixed.body
        if responded.safe_note is not None and offered is None and analysis is not None:
            out = add_note(req, analysis, responded.safe_note, markers)
        out = self._aliases.resolve(req, out if out is not None else req.body) or out
        action, rounds, headers = fixed.action, None, {}
        if offered is not None:
            out = with_recall_tool(req, out if out is not None else req.body, offered)
            rounds = RecallRounds(req, st, lambda: self._states.save(req.cid), self.spill, offered, out, self._aliases)
            headers = {H_RECALL: offered.name}
            action = "spill" if action == "none" else action
        self._states.save(req.cid)
        body = json.dumps(out, ensure_ascii=False).encode() if out is not None else None
        return Decision(action=action, body=body, headers=headers, tap=tap, rounds=rounds)
