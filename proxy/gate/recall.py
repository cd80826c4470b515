"""The recall tool, wired: which requests are offered it, and how its calls are answered.

A conversation whose compaction the gate spilled (``actions.destructive: spill``, or
``actions.safe: spill`` for every compaction) keeps its handles in its state
(:attr:`~proxy.gate.convstate.ConversationState.recall`). Each later request of a gated
API is offered the tool (:func:`plan_recall`) when

- the policy's ``recall.enabled`` is on and the transport can ask upstream again
  (:attr:`~proxy.server.hooks.Exchange.supports_rounds`: the gate's own HTTP server and
  the LiteLLM guardrail's chat completions; not the Responses WebSocket, nor LiteLLM's
  Responses and ``/v1/messages`` routes),
- a handle has not expired and the conversation's recall budget is not spent,
- the client's ``tool_choice`` lets the model call it (not ``none``, not forced to one of
  its own tools).

Otherwise the request gets the spill note (the handle and its ``GET /gate/spill/…`` URL)
as before. :class:`RecallRounds` is the decision's :class:`~proxy.server.hooks.Rounds`:
it finds recall calls in each upstream answer, reads the region from the spill store
(tenant-scoped: another tenant's handle, an expired or unknown one, is "not found"),
builds the follow-up request (pure: :mod:`proxy.core.interventions.recall`), and merges
streamed rounds into one stream (:mod:`proxy.core.interventions.recall_stream`).
Every resolution is a ``recall`` event (handle, outcome, round, bytes; never the
content nor the query text) and counted in the metrics.

A conversation with nothing spilled costs one empty-list check.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.interventions.recall import (
    RecallApi,
    RecallCall,
    TurnCall,
    budget_result,
    client_calls,
    final_json,
    followup_body,
    invalid_result,
    not_found_result,
    recall_calls,
    recall_result,
    rounds_exhausted_note,
    strip_json,
    turn_of_json,
    with_deferred,
)
from ..core.interventions.recall_merger import RoundMerger
from ..core.interventions.recall_stream import merger_for
from ..core.interventions.recall_tool import RecallHandle, offer
from ..server.hooks import FollowUp
from .convstate import ConversationState
from .request import GateRequest
from .spill import SpillStore

log = logging.getLogger("compaction_gate.gate")

#: The clock handles expire by (epoch seconds).
now = time.time

H_RECALL = "x-compaction-gate-recall"
H_RECALL_ROUNDS = "x-compaction-gate-recall-rounds"
H_USAGE = "x-compaction-gate-usage"


@dataclass(frozen=True)
class RecallPlan:
    """The tool this request is offered: its name and the handles it describes."""

    name: str
    handles: tuple[RecallHandle, ...]


def live_handles(st: ConversationState, now: float) -> list[RecallHandle]:
    """The conversation's handles that have not expired (expired ones are forgotten)."""
    if not st.recall:
        return []
    live = [h for h in st.recall if h.expires > now]
    if len(live) != len(st.recall):
        st.recall = live
    return live


def plan_recall(req: GateRequest, st: ConversationState) -> RecallPlan | str | None:
    """The recall tool this request is offered, the reason it is not (when the
    conversation has live handles), or ``None`` when it has nothing spilled."""
    if not st.recall:
        return None
    handles = live_handles(st, now())
    if not handles:
        return None
    policy = req.policy
    if not policy.recall_enabled:
        return "disabled"
    if not req.ex.supports_rounds:
        return "transport"
    if st.recall_rounds >= policy.recall_budget_rounds or st.recall_bytes >= policy.recall_budget_bytes:
        return "budget"
    newest_first = tuple(reversed(handles))
    got = offer(req.api, req.body, policy.recall_tool_name, newest_first)
    if isinstance(got, str):
        return got
    return RecallPlan(got.name, newest_first)


def with_recall_tool(req: GateRequest, body: Mapping[str, Any], plan: RecallPlan) -> dict[str, Any]:
    """``body`` (the request's, or its repair) with the planned tool added."""
    got = offer(req.api, body, plan.name, plan.handles)
    assert not isinstance(got, str) and got.name == plan.name
    return got.body


class ResponseAliases:
    """Responses API: the id a recall streamed over several rounds showed the client (the
    first round's: a stream has one id) → the last round's own id, under which upstream
    stored the whole exchange. Keyed by tenant; bounded (oldest forgotten); in memory,
    so a restart forgets them (a continuation of such a response then reaches upstream
    with the id the client saw, whose stored turn ends in the recall call)."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._map: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, tenant: str, shown: str, real: str) -> None:
        with self._lock:
            self._map[(tenant, shown)] = real
            while len(self._map) > self.limit:
                self._map.popitem(last=False)

    def resolve(self, req: GateRequest, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """``body`` continuing the last round's id instead of the shown one, or ``None``
        when there is nothing to change (one dict lookup when there is)."""
        if req.api != "responses" or not self._map:
            return None
        prev = body.get("previous_response_id")
        real = self._map.get((req.ex.tenant, prev)) if isinstance(prev, str) else None
        if real is None:
            return None
        return {**body, "previous_response_id": real}

    def __len__(self) -> int:
        return len(self._map)


Saver = Callable[[], None]


class RecallRounds:
    """:class:`~proxy.server.hooks.Rounds` of one request offered the recall tool."""

    def __init__(
        self,
        req: GateRequest,
        st: ConversationState,
        save: Saver,
        store: SpillStore,
        plan: RecallPlan,
        body: dict[str, Any],
        aliases: ResponseAliases,
    ) -> None:
        self.req, self.st, self.save, self.store, self.plan = req, st, save, store, plan
        self.aliases = aliases
        self.api: RecallApi = req.api
        self.name = plan.name
        self.body = body  # the request as sent upstream in the current round
        self.round = 0
        self.usages: list[dict[str, Any]] = []
        self.merger: RoundMerger | None = None
        self.broken = False

    # ------------------------------------------------------------------ resolution

    def _may_resolve(self) -> bool:
        policy = self.req.policy
        return (
            self.round < policy.recall_max_rounds
            and self.st.recall_rounds < policy.recall_budget_rounds
            and self.st.recall_bytes < policy.recall_budget_bytes
        )

    def _answer(self, call: RecallCall) -> tuple[str, str, int]:
        """(result text, outcome, bytes returned) of one recall call."""
        policy, st = self.req.policy, self.st
        known = [h.handle for h in st.recall]
        if call.problem is not None or call.handle is None:
            return invalid_result(call.problem or "no handle", known), "invalid", 0
        left = policy.recall_budget_bytes - st.recall_bytes
        if left <= 0:
            return budget_result(call.handle), "budget", 0
        rec = self.store.get(self.req.ex.tenant, call.handle)
        if rec is None:
            return not_found_result(call.handle), "not_found", 0
        text = recall_result(call.handle, rec.text, call.query, min(policy.recall_max_result_bytes, left))
        n = len(text.encode("utf-8", "surrogatepass"))
        if n > left:  # what is left of the budget cannot hold even the result's head
            return budget_result(call.handle), "budget", 0
        st.recall_bytes += n
        return text, "found", n

    def _resolve(self, calls: list[RecallCall], deferred: list[TurnCall]) -> list[tuple[str, str]]:
        self.round += 1
        self.st.recall_rounds += 1
        results: list[tuple[str, str]] = []
        for k, call in enumerate(calls):
            text, outcome, n = self._answer(call)
            results.append((call.call_id, with_deferred(text, deferred) if k == 0 else text))
            self.req.record(
                "recall",
                "spill",
                handle=call.handle,
                outcome=outcome,
                round=self.round,
                bytes=n,
                query=call.query is not None,
                tool=self.name,
                deferred_calls=len(deferred) if k == 0 else 0,
                message=f"recall of {call.handle}: {outcome}" + (f", {n} bytes" if n else ""),
            )
        self.req.record("recall_round", "spill", round=self.round, calls=len(calls), message=f"asked upstream again (round {self.round + 1})")
        self.save()
        return results

    def _exhausted(self, calls: list[RecallCall]) -> None:
        self.req.record(
            "recall",
            "spill",
            handle=calls[0].handle if calls else None,
            outcome="budget",
            round=self.round,
            bytes=0,
            tool=self.name,
            message="recall not resolved: the request's rounds or the conversation's budget are spent",
        )

    # ------------------------------------------------------------------ JSON

    async def after_json(self, status: int, body: bytes) -> bytes | FollowUp:
        if not 200 <= status < 300:
            return body  # upstream's error passes through as it is
        try:
            parsed = json.loads(body)
        except ValueError:
            return body
        if not isinstance(parsed, dict):
            return body
        if isinstance(parsed.get("usage"), dict):
            self.usages.append(parsed["usage"])
        turn = turn_of_json(self.api, parsed)
        calls = recall_calls(self.api, turn, self.name)
        if not calls:
            if self.round == 0 and not (self.api == "responses" and "tools" in parsed):
                return body  # the tool was offered, not used: upstream's bytes
            return _dumps(final_json(self.api, parsed, self.usages, self.name))
        if not self._may_resolve():
            self._exhausted(calls)
            note = rounds_exhausted_note(self.req.policy.recall_max_rounds)
            return _dumps(final_json(self.api, strip_json(self.api, parsed, self.name, note), self.usages, self.name))
        results = self._resolve(calls, client_calls(self.api, turn, self.name))
        self.body = followup_body(self.api, self.body, turn, self.name, results)
        return FollowUp(_dumps(self.body))

    # ------------------------------------------------------------------ SSE

    def feed_event(self, raw_event: bytes) -> list[bytes]:
        if self.broken:
            return [raw_event]
        if self.merger is None:
            self.merger = merger_for(self.api, self.name)
        try:
            return self.merger.feed(raw_event)
        except Exception:  # noqa: BLE001 - never lose an event: pass the rest through
            log.exception("recall: could not merge a stream event; passing the rest through")
            self.broken = True
            return [*self.merger.abandon(), raw_event]

    async def after_stream(self) -> list[bytes] | FollowUp:
        m = self.merger
        if m is None:
            return []
        if self.broken:
            return m.abandon()
        end = m.end_round()
        calls = recall_calls(self.api, end.turn, self.name)
        if not calls:
            out = m.release()
            self._remember_alias(m)
            return out
        if not self._may_resolve():
            self._exhausted(calls)
            out = m.strip(rounds_exhausted_note(self.req.policy.recall_max_rounds))
            self._remember_alias(m)
            return out
        results = self._resolve(calls, client_calls(self.api, end.turn, self.name))
        self.body = followup_body(self.api, self.body, end.turn, self.name, results)
        m.next_round()
        return FollowUp(_dumps(self.body))

    def _remember_alias(self, m: RoundMerger) -> None:
        shown, real = m.response_ids()
        if shown and real and shown != real and self.body.get("store") is not False:
            self.aliases.add(self.req.ex.tenant, shown, real)

    # ------------------------------------------------------------------ both

    def headers(self) -> Mapping[str, str]:
        out = {H_RECALL: self.name}
        if self.round and self.merger is None:  # JSON: known once the last round is in
            out[H_RECALL_ROUNDS] = str(self.round + 1)
            out[H_USAGE] = f"summed over {self.round + 1} upstream rounds"
        return out

    def closed(self, reason: str) -> None:
        if self.round:
            self.req.record(
                "recall_closed",
                "spill",
                round=self.round,
                reason=reason,
                message=f"the exchange ended ({reason}) during recall round {self.round + 1}",
            )


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
