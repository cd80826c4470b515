"""The GateInterceptor: tracker observation + analysis + policy → :class:`Decision`.

Per request of a conversational API (OpenAI chat, Responses, Anthropic messages):

1. The tracker resolves the conversation and hands back the previous and current
   snapshots (:class:`proxy.gate.tracker.Observation`).
2. A **summarization request** (DESIGN §4.1) with the gate enabled gets the contract of
   required bindings appended to its instruction, and a tap that checks the summary and
   appends a verbatim section for what it still lacks (action ``gate``).
3. Otherwise the transition previous → current is analysed with the policy's obligation
   rule. A destructive verdict gets the scoped action: ``allow``/``warn`` forward
   untouched, ``reinject`` adds the dropped bindings after the summary, ``reject``
   answers 400 naming them, ``spill`` stores the lost region under a tenant-scoped handle
   and points the model at it. The repair is **sticky**: the client keeps sending its
   compacted history, so later requests of the conversation get the same note (or the
   same rejection) until the bindings appear in what the client itself sends.
4. After a destructive compaction the **tripwire** is armed for ``tripwire.window``
   requests: tool calls in responses are checked for identifiers of a dropped kind that
   never appeared in the conversation (block / annotate / warn).

Every decision is an event (``GET /gate/events`` and the conversation's own events).
Errors inside the gate never lose the request: by default it is forwarded untouched and
the error is recorded (fail-open); ``on_error: closed`` in the policy refuses it instead.
Nothing here logs or records secrets: tenant is a hash, sensitive values are redacted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.analysis import Analysis, analyze
from ..core.diff import LostBinding, SourceRef
from ..core.interventions.bindings import Binding, TokenCounter, estimate_tokens
from ..core.interventions.contract import add_summary_contract
from ..core.interventions.placement import NoteDialect, raw_index
from ..core.interventions.reinject import reinject
from ..core.interventions.reject import rejection_message
from ..core.interventions.spill import render_region, spill_note
from ..core.interventions.summary import SummaryApi
from ..core.interventions.tripwire import Hallucination, ToolCall, find_hallucinations
from ..core.markers import Markers, default_markers, load_markers
from ..core.messages import Part, Snapshot, make_message
from ..metrics import Metrics
from ..policy import Policy, PolicyHolder, RequestContext
from ..policy.loader import presets_dir
from ..policy.obligations import PolicyObligations
from ..server.hooks import Decision, Exchange, Reject, ResponseTap
from .events import EventLog
from .spill import ANONYMOUS, SpillStore
from .taps import ChainTap, GateTap

log = logging.getLogger("compaction_gate.gate")

_DIALECT: dict[str, NoteDialect] = {"chat": "openai_chat", "responses": "openai_responses", "messages": "anthropic"}
GATED_KINDS = frozenset(_DIALECT)


def default_token_counter() -> TokenCounter:
    try:
        from ..tokenizer import get_encoding

        enc = get_encoding("cl100k_base")
        return lambda text: len(enc.encode(text, disallowed_special=()))
    except Exception:  # noqa: BLE001 - offline files missing: fall back to the documented estimate
        return estimate_tokens


# --------------------------------------------------------------------------- identifiers


def _extract(snapshot: Snapshot, catalog: object | None) -> list[Any]:
    from ..core.identifiers.catalog import Catalog
    from ..core.identifiers.extract import extract_snapshot

    return list(extract_snapshot(snapshot, catalog if isinstance(catalog, Catalog) else None))


def policy_catalog(policy: Policy) -> object | None:
    """The identifier catalogue with the policy's detector rules, disables and allowlist
    (``None`` = the built-in default when the policy changes nothing)."""
    if not (policy.detector_rules or policy.disabled or policy.allowlist):
        return None
    from ..core.identifiers.catalog import Catalog

    rules: list[dict[str, Any]] = []
    for r in policy.detector_rules:
        rule: dict[str, Any] = {
            "id": r.id,
            "kind": r.kind,
            "pattern": r.pattern.pattern,
            "regenerable": r.regenerable,
            "sensitive": r.sensitive,
            "examples": list(r.examples),
            "negative_examples": list(r.negative_examples),
        }
        if r.pattern.groups == 1:
            rule["group"] = 1
        if r.keywords:
            rule["context"] = {"boost": list(r.keywords)}
        rules.append(rule)
    return Catalog.build(
        extra_rules=rules, disabled=sorted(policy.disabled), allowlist=list(policy.allowlist), origin=policy.source
    )


# --------------------------------------------------------------------------- state


@dataclass
class _Pending:
    """A destructive compaction the gate is still answering for (sticky repair)."""

    action: str
    bindings: list[Binding]
    anchor_digest: str | None
    footer: str | None = None
    note: str | None = None


@dataclass
class _ConvState:
    pending: _Pending | None = None
    armed: int = 0
    dropped_kinds: frozenset[str] = frozenset()
    expected: dict[str, tuple[str, ...]] = field(default_factory=dict)
    known_norms: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class GateConfig:
    #: Conversations whose gate state is kept (LRU).
    max_conversations: int = 10_000
    #: Public path prefix of spill handles (told to the model).
    spill_path: str = "/gate/spill/"


class GateInterceptor:
    """The :class:`~proxy.server.hooks.Interceptor` of compaction-gate."""

    def __init__(
        self,
        tracker: Any,
        policies: PolicyHolder,
        *,
        events: EventLog | None = None,
        spill: SpillStore | None = None,
        config: GateConfig | None = None,
        token_counter: TokenCounter | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.tracker = tracker
        #: Where decisions are counted; :func:`proxy.gate.wiring.install_gate` replaces it
        #: with the app's instance (the default is a private, unscraped registry).
        self.metrics = metrics if metrics is not None else Metrics()
        self.policies = policies
        self.events = events or EventLog()
        self.spill = spill or SpillStore()
        self.config = config or GateConfig()
        self._count = token_counter or default_token_counter()
        self._state: OrderedDict[str, _ConvState] = OrderedDict()
        self._lock = threading.Lock()
        self._catalogs: dict[int, tuple[Policy, object | None]] = {}
        self._markers: dict[str, Markers] = {}

    # ------------------------------------------------------------------ helpers

    def _catalog(self, policy: Policy) -> object | None:
        cached = self._catalogs.get(id(policy))
        if cached is not None and cached[0] is policy:
            return cached[1]
        cat = policy_catalog(policy)
        self._catalogs = {id(policy): (policy, cat)}
        return cat

    def _markers_for(self, policy: Policy) -> Markers:
        name = policy.markers
        if name not in self._markers:
            if name == "agents":
                m = getattr(self.tracker, "markers", None) or default_markers()
            else:
                path = presets_dir() / f"{name}.yaml" if "/" not in name and not name.endswith(".yaml") else name
                m = load_markers(path)
            self._markers[name] = m
        return self._markers[name]

    def _conv(self, cid: str) -> _ConvState:
        with self._lock:
            st = self._state.get(cid)
            if st is None:
                st = self._state[cid] = _ConvState()
            self._state.move_to_end(cid)
            while len(self._state) > self.config.max_conversations:
                self._state.popitem(last=False)
            return st

    def _binding(self, policy: Policy, b: LostBinding) -> Binding:
        regen = policy.regenerable(b.kind, b.regenerable, tool=b.source.tool_name, command=b.source.command)
        return Binding(
            value=b.value,
            kind=b.kind,
            source=b.source.describe(),
            regenerable=regen,
            sensitive=b.sensitive,
            priority=policy.priority(b.kind, regen),
            status=b.status,
        )

    def _record(self, ex: Exchange, cid: str | None, kind: str, action: str, obs: Any = None, **details: Any) -> None:
        policy = self.policies.policy
        ev = self.events.add(
            kind,
            action,
            conversation=cid,
            tenant=ex.tenant,
            route=ex.path,
            model=ex.model,
            request_id=ex.request_id,
            policy=policy.name,
            **details,
        )
        self._count_metrics(kind, action, details)
        self._log_decision(ex, cid, kind, action, ev)
        if cid is not None and hasattr(self.tracker, "add_event"):
            try:
                message = details.get("message", "")
                self.tracker.add_event(
                    cid,
                    kind,
                    action=action,
                    message=message,
                    details={k: v for k, v in ev.items() if k not in ("id", "at", "kind", "action", "tenant")},
                    request_seq=getattr(obs, "seq", None),
                )
            except Exception:
                log.exception("could not append the gate event to the conversation")

    @staticmethod
    def _log_decision(ex: Exchange, cid: str | None, kind: str, action: str, details: dict[str, Any]) -> None:
        """One JSON log line per decision: kinds and counts only, never identifier values."""
        required = details.get("required") or ()
        lost = list(details.get("dropped") or ()) + list(details.get("altered") or ())
        fields: dict[str, Any] = {
            "request_id": ex.request_id,
            "conversation": cid,
            "event": kind,
            "action": action,
            "tenant": ex.tenant,
            "route": ex.path,
        }
        for key in ("verdict", "transition", "agent", "policy", "stage", "error"):
            if details.get(key) is not None:
                fields[key] = details[key]
        if required:
            fields["required_missing"] = len(required)
            fields["required_kinds"] = sorted(
                {str(b.get("kind")) for b in lost if isinstance(b, dict) and b.get("value") in set(required)}
            )
        if lost:
            fields["lost"] = len(lost)
        for key in ("reinjected", "hallucinated", "appended", "missing"):
            if details.get(key):
                fields[key] = len(details[key])
        log.info("decision", extra={"fields": fields})

    def _count_metrics(self, kind: str, action: str, details: dict[str, Any]) -> None:
        """Translate one recorded event into metrics (kinds only, never values)."""
        m = self.metrics
        if kind == "compaction":
            required = set(details.get("required") or ())
            lost = list(details.get("dropped") or ()) + list(details.get("altered") or ())
            m.observe_transition(
                str(details.get("transition") or ""),
                destructive=details.get("verdict") == "destructive",
                dropped_kinds=[str(b.get("kind")) for b in lost if b.get("value") in required],
            )
        elif kind in ("reinject", "reinject_sticky"):
            for b in details.get("reinjected") or ():
                m.binding_reinjected(str(b.get("kind")))
        elif kind == "summarization" and action == "gate":
            m.summarization_gated()
        elif kind == "tripwire":
            m.tripwire_hit(len(details.get("hallucinated") or ()) or 1)
        elif kind == "gate_error":
            m.analysis_error()

    # ------------------------------------------------------------------ entry point

    async def before(self, ex: Exchange) -> Decision:
        obs = None
        try:
            obs = await self.tracker.observe(ex)
        except Exception as exc:  # noqa: BLE001 - fail-open: never lose the request
            return self._failed(ex, None, None, exc, "observe")
        if obs is None:
            return Decision()
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
            decision = self._decide(ex, obs, side_history)
        except Exception as exc:  # noqa: BLE001 - fail-open: never lose the request
            return self._failed(ex, obs, tracker_tap, exc, "analysis")
        if decision.action != "none":
            self.metrics.action(decision.action)
        taps = [t for t in (decision.tap, tracker_tap) if t is not None]
        tap: ResponseTap | None = ChainTap(taps) if len(taps) > 1 else (taps[0] if taps else None)
        return Decision(
            action=decision.action,
            conversation_id=obs.conversation_id,
            body=decision.body,
            reject=decision.reject,
            headers=decision.headers,
            tap=tap,
        )

    def _failed(self, ex: Exchange, obs: Any, tap: ResponseTap | None, exc: Exception, stage: str) -> Decision:
        policy = self.policies.policy
        log.error("gate %s failed (%s); %s", stage, exc.__class__.__name__, "refusing" if policy.on_error == "closed" else "forwarding untouched")
        log.debug("gate failure detail", exc_info=exc)
        cid = getattr(obs, "conversation_id", None)
        self._record(ex, cid, "gate_error", "none" if policy.on_error == "open" else "reject", obs,
                     stage=stage, error=exc.__class__.__name__, message=f"gate {stage} failed: {exc.__class__.__name__}")
        if policy.on_error == "closed":
            return Decision(
                action="reject",
                conversation_id=cid,
                reject=Reject(502, "compaction-gate could not analyse this request and is configured to fail closed.", code="gate_error", type="api_error"),
            )
        return Decision(conversation_id=cid, tap=tap)

    # ------------------------------------------------------------------ decision

    async def _history_for_side_request(self, ex: Exchange, obs: Any, limit: int = 20) -> Snapshot | None:
        """The history a summarization side request summarizes when lineage could not
        attach it (e.g. the history pasted as escaped text): among this tenant's most
        recent conversations, the one whose required bindings occur most often in the
        request's text."""
        conversations = getattr(self.tracker, "conversations", None)
        if conversations is None:
            return None
        policy = self.policies.policy
        catalog = self._catalog(policy)
        visible = obs.current.visible_text()
        recs = sorted(
            (r for r in conversations() if r.tenant == ex.tenant and r.id != obs.conversation_id),
            key=lambda r: r.last_seen,
            reverse=True,
        )[:limit]
        best: tuple[int, Snapshot | None] = (0, None)
        for rec in recs:
            snap = await self.tracker.history(rec.id)
            if snap is None:
                continue
            score = sum(1 for b in self._required_in(policy, snap, catalog) if b.value in visible)
            if score > best[0]:
                best = (score, snap)
        return best[1]

    def _decide(self, ex: Exchange, obs: Any, side_history: Snapshot | None = None) -> Decision:
        policy = self.policies.policy
        eff = policy.effective(RequestContext(model=ex.model, route=ex.path, tenant=ex.tenant, headers=ex.headers))
        api: SummaryApi = ex.kind  # type: ignore[assignment]
        dialect = _DIALECT[ex.kind]
        cid: str = obs.conversation_id
        st = self._conv(cid)
        current: Snapshot = obs.current
        markers = self._markers_for(policy)
        catalog = self._catalog(policy)

        # 1. the summarization call
        if obs.is_summarization_request:
            return self._gate_summary(ex, obs, policy, eff, api, dialect, catalog, side_history)

        # 2. the shrunk request
        analysis: Analysis | None = None
        if obs.previous is not None:
            analysis = analyze(
                obs.previous, current, markers=markers, catalog=catalog, obligation_rule=PolicyObligations(policy)
            )
        body: dict[str, Any] = ex.json
        action = "none"
        new_body: dict[str, Any] | None = None
        reject: Reject | None = None

        if analysis is not None and hasattr(self.tracker, "set_transition"):
            # the timeline shows the classified kind (summarize, truncate …), not the relation
            self.tracker.set_transition(cid, obs.seq, analysis.transition.kind)

        if analysis is not None and analysis.transition.kind == "reset":
            st.pending, st.armed = None, 0

        if analysis is not None and analysis.destructive:
            required = [self._binding(policy, b) for b in analysis.required_missing]
            extra = [
                self._binding(policy, b)
                for b in analysis.dropped + analysis.altered
                if not b.required and not b.sensitive and policy.reinject_include_regenerable
            ]
            bindings = [b for b in required + extra if not policy.allowlisted(b.value)]
            action = eff.destructive
            anchor = self._anchor(analysis, current)
            anchor_digest = current.messages[anchor].digest if anchor is not None and anchor < len(current.messages) else None
            footer = None
            if action == "spill":
                footer = self._spill(ex, obs, policy, analysis, bindings)
                if footer is None:  # anonymous tenant: nobody could read it back
                    action = "reinject"
            # arm the tripwire
            sig = analysis.signals.next_action
            st.armed = policy.tripwire_window
            st.dropped_kinds = frozenset(sig.dropped_kinds)
            st.expected = dict(sig.expected_by_kind)
            st.known_norms = set(sig.known_norms)
            if action in ("reinject", "spill", "reject"):
                st.pending = _Pending(action, bindings, anchor_digest, footer)
            self._record(
                ex, cid, "compaction", action, obs,
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
        elif analysis is not None and analysis.transition.kind != "append":
            self._record(
                ex, cid, "compaction", "warn" if eff.safe == "warn" else "none", obs,
                verdict=analysis.verdict, transition=analysis.transition.kind, agent=analysis.agent,
                dropped=[b.to_json() for b in analysis.dropped], signals=analysis.signals.to_json(),
                message=f"{analysis.transition.kind}: every required binding survived",
            )
            if eff.safe == "warn":
                action = "warn"

        # sticky repair of an earlier destructive compaction
        if st.pending is not None:
            visible = current.visible_text()
            still = [b for b in st.pending.bindings if b.sensitive or b.value not in visible]
            if not [b for b in still if not b.sensitive]:
                st.pending = None
            else:
                p = st.pending
                anchor = self._anchor_by_digest(current, p.anchor_digest)
                raw_anchor = raw_index(dialect, body, anchor) if anchor is not None else None
                if p.action == "reject":
                    reject = Reject(400, rejection_message(still), code="destructive_compaction")
                    action = "reject"
                else:
                    res = reinject(
                        dialect, body, still, anchor=raw_anchor, role=policy.reinject_role,
                        budget_tokens=policy.reinject_budget_tokens, count_tokens=self._count, footer=p.footer,
                    )
                    new_body = res.body
                    if action == "none":
                        action = p.action
                    reinjected = [{"value": b.value if not b.sensitive else b.display(), "kind": b.kind,
                                   "where": b.source} for b in res.kept]
                    if analysis is None or not analysis.destructive:
                        self._record(ex, cid, "reinject_sticky", action, obs,
                                     bindings=[b.value if not b.sensitive else b.display() for b in res.kept],
                                     reinjected=reinjected,
                                     message="repeated the repair of an earlier compaction")
                    else:
                        self._record(ex, cid, "reinject", action, obs, reinjected=reinjected,
                                     message=f"re-injected {len(reinjected)} binding(s) verbatim after the summary")

        # 3. the tripwire on the response
        tap: ResponseTap | None = None
        if st.armed > 0 and eff.tripwire != "off" and st.dropped_kinds:
            st.armed -= 1
            tap = self._tripwire_tap(ex, obs, policy, eff.tripwire, api, st, catalog, current)

        headers: dict[str, str] = {}
        out_body = json.dumps(new_body, ensure_ascii=False).encode() if new_body is not None else None
        return Decision(action=action, body=out_body if reject is None else None, reject=reject, headers=headers, tap=tap)

    # ------------------------------------------------------------------ pieces

    @staticmethod
    def _anchor(analysis: Analysis, current: Snapshot) -> int | None:
        t = analysis.transition
        if t.summary:
            return max(t.summary)
        if t.inserted:
            return max(t.inserted)
        return None

    @staticmethod
    def _anchor_by_digest(current: Snapshot, digest: str | None) -> int | None:
        if digest is None:
            return None
        for i, m in enumerate(current.messages):
            if m.digest == digest:
                return i
        return None

    def _spill(self, ex: Exchange, obs: Any, policy: Policy, analysis: Analysis, bindings: Sequence[Binding]) -> str | None:
        if not ex.tenant or ex.tenant == ANONYMOUS:
            return None
        prev: Snapshot = obs.previous
        lost = [prev.messages[i] for i in analysis.lost_region if 0 <= i < len(prev.messages)]
        text = render_region(lost)
        # secrets never reach the spill store in clear, even for their own tenant
        from ..core.identifiers.model import redact

        lost_idx = set(analysis.lost_region)
        secrets_ = {
            i.value for i in _extract(prev, self._catalog(policy)) if i.sensitive and i.source.message_index in lost_idx
        }
        for value in sorted(secrets_, key=len, reverse=True):
            text = text.replace(value, redact(value))
        rec = self.spill.put(
            ex.tenant,
            obs.conversation_id,
            text,
            ttl_seconds=policy.spill_ttl_seconds,
            max_bytes=policy.spill_max_bytes,
            bindings=tuple({"value": b.display().strip("`"), "kind": b.kind} for b in bindings),
        )
        return spill_note(rec.handle, bindings if policy.spill_list_bindings else (), url_path=self.config.spill_path + rec.handle)

    def _gate_summary(
        self,
        ex: Exchange,
        obs: Any,
        policy: Policy,
        eff: Any,
        api: SummaryApi,
        dialect: NoteDialect,
        catalog: object | None,
        side_history: Snapshot | None = None,
    ) -> Decision:
        cid = obs.conversation_id
        if not eff.gate:
            return Decision()
        history: Snapshot = obs.previous or side_history or obs.current
        visible = obs.current.visible_text()
        bindings = self._required_in(policy, history, catalog)
        if history is not obs.current:
            bindings += [b for b in self._required_in(policy, obs.current, catalog) if b.value not in {x.value for x in bindings}]
        bindings = [b for b in bindings if b.value in visible]  # what this call summarizes
        if not bindings:
            self._record(ex, cid, "summarization", "none", obs, message="summarization call with no required binding")
            return Decision()
        body = ex.json
        new_body = None
        listed = bindings
        if policy.gate_contract:
            new_body, listed = add_summary_contract(dialect, body, bindings, budget_tokens=policy.gate_budget_tokens, count_tokens=self._count)
        modifying = policy.gate_contract or policy.gate_append_missing
        action = "gate" if modifying else "warn"

        def on_summary(appended: list[Binding], missing: list[Binding]) -> None:
            self._record(
                ex, cid, "summary_check", "gate" if appended else ("warn" if missing else "none"), obs,
                required=[b.value for b in bindings],
                missing=[b.value for b in missing],
                appended=[b.value for b in appended],
                message=(f"summary lacked {len(missing)} binding(s)" + ("; appended verbatim" if appended else ""))
                if missing else "summary kept every required binding",
            )

        tap = GateTap(api, summary_bindings=bindings, append_missing=policy.gate_append_missing, on_summary=on_summary)
        self._record(
            ex, cid, "summarization", action, obs,
            agent=getattr(obs, "summarization_agent", None),
            contract=[b.value for b in listed] if policy.gate_contract else [],
            required=[b.value for b in bindings],
            message=f"summarization call: {len(bindings)} binding(s) must survive verbatim",
        )
        out = json.dumps(new_body, ensure_ascii=False).encode() if new_body is not None else None
        return Decision(action=action, body=out, tap=tap)

    def _required_in(self, policy: Policy, snap: Snapshot, catalog: object | None) -> list[Binding]:
        ids = _extract(snap, catalog)
        rule = PolicyObligations(policy)
        required: set[str] = set()
        for o in rule(ids, snap):
            required.update(o.bindings)
        out: list[Binding] = []
        seen: set[str] = set()
        for i in ids:
            if i.norm not in required or i.sensitive or i.norm in seen:
                continue
            seen.add(i.norm)
            regen = rule.regenerable(i)
            out.append(
                Binding(i.value, i.kind, SourceRef.of(i.source).describe(), regen, False, policy.priority(i.kind, regen))
            )
        return out

    def _tripwire_tap(self, ex: Exchange, obs: Any, policy: Policy, action: Any, api: SummaryApi, st: _ConvState, catalog: object | None, current: Snapshot) -> GateTap:
        try:
            st.known_norms.update(i.norm for i in _extract(current, catalog))
        except Exception:
            log.exception("tripwire: could not extract the current request's identifiers")
        known = frozenset(st.known_norms)
        kinds = st.dropped_kinds
        expected = dict(st.expected)

        def extract(text: str) -> Iterable[tuple[str, str, str]]:
            snap = Snapshot("plain", "", (make_message("assistant", (Part("tool_call", text, tool_name="tool"),)),))
            for i in _extract(snap, catalog):
                if not i.sensitive:
                    yield i.value, i.norm, i.kind

        def check(calls: Sequence[ToolCall]) -> list[Hallucination]:
            return find_hallucinations(calls, extract=extract, dropped_kinds=kinds, known_norms=known, expected_by_kind=expected)

        cid = obs.conversation_id

        def on_found(found: list[Hallucination]) -> None:
            self._record(
                ex, cid, "tripwire", {"block": "reject", "annotate": "warn", "warn": "warn"}.get(action, "warn"), obs,
                tripwire=action,
                hallucinated=[{"value": h.value, "kind": h.kind, "tool": h.tool_name, "expected": list(h.expected)} for h in found],
                message="tool call used identifier(s) never seen in the conversation: " + ", ".join(h.value for h in found),
            )

        return GateTap(api, checker=check, tripwire=action, on_tripwire=on_found)
