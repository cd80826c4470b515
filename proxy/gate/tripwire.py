"""The tripwire wiring: after a destructive compaction, check the tool calls of the next
``tripwire.window`` responses for identifiers of a dropped kind that never appeared in
the conversation (the model inventing the value the summary lost).

The check itself is :func:`proxy.core.interventions.tripwire.find_hallucinations`; this
module arms it per conversation and turns findings into ``tripwire`` events. ``block``
is recorded as ``reject``, ``annotate`` and ``warn`` as ``warn``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence

from ..core.interventions.tripwire import (
    Hallucination,
    ToolCall,
    TripwireAction,
    find_hallucinations,
)
from ..core.messages import Part, Snapshot, make_message
from .convstate import ConversationState
from .identifiers import extract
from .request import GateRequest
from .taps import GateTap

log = logging.getLogger("compaction_gate.gate")

_RECORDED_ACTION = {"block": "reject", "annotate": "warn", "warn": "warn"}


def request_fingerprint(snap: Snapshot) -> str:
    """Identifies a request's history: a retry (the same request sent again) has the same."""
    h = hashlib.sha256(snap.system.encode("utf-8", "surrogatepass"))
    for m in snap.messages:
        h.update(m.digest.encode())
    return h.hexdigest()[:32]


def arm_tripwire(req: GateRequest, st: ConversationState) -> GateTap | None:
    """The tripwire tap for this request's response while the conversation's tripwire
    is armed (and the scoped action is not ``off``); consumes one armed response. A retry
    of the request it last checked is checked again without consuming one: clients retry
    a response they did not like (or never got), and each retry must meet the same
    tripwire rather than wear the window out until an invented value passes."""
    action = req.effective.tripwire
    if action == "off" or not st.dropped_kinds:
        return None
    fp = request_fingerprint(req.obs.current)
    if fp != st.tripwire_request:
        if st.armed <= 0:
            return None
        st.armed -= 1
        st.tripwire_request = fp
    return tripwire_tap(req, action, st)


def tripwire_tap(req: GateRequest, action: TripwireAction, st: ConversationState) -> GateTap:
    """A tap checking the response's tool calls against the conversation's known
    identifiers (the compaction's, plus this request's)."""
    catalog = req.catalog
    try:
        st.known_norms.update(i.norm for i in extract(req.obs.current, catalog))
    except Exception:
        log.exception("tripwire: could not extract the current request's identifiers")
    known = frozenset(st.known_norms)
    kinds = st.dropped_kinds
    expected = dict(st.expected)

    def identifiers_of(text: str) -> Iterable[tuple[str, str, str]]:
        snap = Snapshot("plain", "", (make_message("assistant", (Part("tool_call", text, tool_name="tool"),)),))
        for i in extract(snap, catalog):
            if not i.sensitive:
                yield i.value, i.norm, i.kind

    def check(calls: Sequence[ToolCall]) -> list[Hallucination]:
        return find_hallucinations(
            calls, extract=identifiers_of, dropped_kinds=kinds, known_norms=known, expected_by_kind=expected
        )

    def on_found(found: list[Hallucination]) -> None:
        req.record(
            "tripwire",
            _RECORDED_ACTION.get(action, "warn"),
            tripwire=action,
            hallucinated=[
                {"value": h.value, "kind": h.kind, "tool": h.tool_name, "expected": list(h.expected)} for h in found
            ],
            message="tool call used identifier(s) never seen in the conversation: "
            + ", ".join(h.value for h in found),
        )

    return GateTap(req.api, checker=check, tripwire=action, on_tripwire=on_found)
