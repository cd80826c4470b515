"""How the gate accounts for a decision: one event, its metrics, one log line.

Every decision of the gate goes through :meth:`DecisionRecorder.record`, which

- appends it to the gate's :class:`~proxy.gate.events.EventLog` (``GET /gate/events``),
- counts it in :class:`~proxy.metrics.Metrics` (kinds only),
- logs one JSON line (kinds and counts only, never identifier values),
- appends it to the conversation's own events in the tracker.

With a shared store the event goes to the store with the conversation's commit, and the
metrics and log line follow once the commit is accepted (:meth:`Tracker.after_commit`):
a decision redone after a refused commit is counted once.

Recording never raises into the request path for the tracker part (a failure there is
logged); the event details must be JSON-serialisable and already free of secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..metrics import Metrics
from ..policy import PolicyHolder
from ..server.hooks import Exchange
from .events import EventLog
from .observation import Observation
from .tracker import Tracker

log = logging.getLogger("compaction_gate.gate")

#: Event fields that are not repeated in the conversation's copy of the event.
_OWN_FIELDS = ("id", "at", "kind", "action", "tenant")


def _lost(details: Mapping[str, Any]) -> list[Any]:
    return list(details.get("dropped") or ()) + list(details.get("altered") or ())


def log_decision(ex: Exchange, cid: str | None, kind: str, action: str, details: Mapping[str, Any]) -> None:
    """One JSON log line per decision: kinds and counts only, never identifier values."""
    required = details.get("required") or ()
    lost = _lost(details)
    fields: dict[str, Any] = {
        "request_id": ex.request_id,
        "conversation": cid,
        "event": kind,
        "action": action,
        "tenant": ex.tenant,
        "route": ex.path,
    }
    for key in ("verdict", "transition", "agent", "policy", "stage", "error", "outcome", "round", "bytes"):
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


def count_metrics(metrics: Metrics, kind: str, action: str, details: Mapping[str, Any]) -> None:
    """Translate one recorded event into metrics (kinds only, never values)."""
    if kind == "compaction":
        required = set(details.get("required") or ())
        metrics.observe_transition(
            str(details.get("transition") or ""),
            destructive=details.get("verdict") == "destructive",
            dropped_kinds=[str(b.get("kind")) for b in _lost(details) if b.get("value") in required],
        )
    elif kind in ("reinject", "reinject_sticky"):
        for b in details.get("reinjected") or ():
            metrics.binding_reinjected(str(b.get("kind")))
    elif kind == "summarization" and action == "gate":
        metrics.summarization_gated()
    elif kind == "tripwire":
        metrics.tripwire_hit(len(details.get("hallucinated") or ()) or 1)
    elif kind == "gate_error":
        metrics.analysis_error()
    elif kind == "recall":
        metrics.recall(str(details.get("outcome") or ""), int(details.get("bytes") or 0))
    elif kind == "recall_round":
        metrics.recall_round()


class DecisionRecorder:
    """Records the gate's decisions (see the module docstring). ``metrics`` may be
    replaced after construction (:func:`proxy.gate.wiring.install_gate` points it at the
    app's registry)."""

    def __init__(self, events: EventLog, tracker: Tracker, policies: PolicyHolder, metrics: Metrics) -> None:
        self.events = events
        self.tracker = tracker
        self.policies = policies
        self.metrics = metrics

    def _fields(self, ex: Exchange, cid: str | None) -> dict[str, Any]:
        """What every event says of its request."""
        return {
            "conversation": cid,
            "tenant": ex.tenant,
            "route": ex.path,
            "model": ex.model,
            "request_id": ex.request_id,
            "policy": self.policies.policy.name,
        }

    def record(
        self,
        ex: Exchange,
        cid: str | None,
        kind: str,
        action: str,
        obs: Observation | None = None,
        **details: Any,
    ) -> None:
        """Record one decision about request ``ex`` of conversation ``cid``."""
        ev = self.events.add(kind, action, **self._fields(ex, cid), **details)
        metrics = self.metrics

        def counted() -> None:
            count_metrics(metrics, kind, action, details)
            log_decision(ex, cid, kind, action, ev)

        self.tracker.after_commit(cid, counted)
        if cid is None:
            return
        try:
            self.tracker.add_event(
                cid,
                kind,
                action=action,
                message=details.get("message", ""),
                details={k: v for k, v in ev.items() if k not in _OWN_FIELDS},
                request_seq=obs.seq if obs is not None else None,
            )
        except Exception:
            log.exception("could not append the gate event to the conversation")

    def record_local(self, ex: Exchange, cid: str | None, kind: str, action: str, **details: Any) -> None:
        """Record a decision that cannot reach the store (it is unavailable): kept in
        this process's event log only (handed to the store when it is back), counted
        and logged at once."""
        ev = self.events.add_local(kind, action, **self._fields(ex, cid), **details)
        count_metrics(self.metrics, kind, action, details)
        log_decision(ex, cid, kind, action, ev)
