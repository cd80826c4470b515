"""One gated request as the gate's decision steps see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.identifiers.catalog import Catalog
from ..core.interventions.bindings import TokenCounter
from ..core.interventions.placement import NoteDialect
from ..core.interventions.summary import SummaryApi
from ..policy import Effective, Policy
from ..server.hooks import Exchange
from .observation import Observation
from .recording import DecisionRecorder

#: The note dialect of each gated API kind.
DIALECTS: dict[str, NoteDialect] = {"chat": "openai_chat", "responses": "openai_responses", "messages": "anthropic"}
#: API kinds the gate analyses (the others are only tracked).
GATED_KINDS = frozenset(DIALECTS)
_APIS: dict[str, SummaryApi] = {"chat": "chat", "responses": "responses", "messages": "messages"}


@dataclass(frozen=True)
class GateRequest:
    """A request of a gated kind with a JSON object body, its observation, and the policy
    (with the scoped actions and the catalogue) it is judged under. Invariant:
    ``ex.kind in GATED_KINDS`` and ``ex.json`` is a dict."""

    ex: Exchange
    obs: Observation
    policy: Policy
    effective: Effective
    catalog: Catalog | None
    recorder: DecisionRecorder
    count_tokens: TokenCounter

    @property
    def cid(self) -> str:
        return self.obs.conversation_id

    @property
    def body(self) -> dict[str, Any]:
        body = self.ex.json
        assert isinstance(body, dict)
        return body

    @property
    def api(self) -> SummaryApi:
        return _APIS[self.ex.kind]

    @property
    def dialect(self) -> NoteDialect:
        return DIALECTS[self.ex.kind]

    def record(self, kind: str, action: str, **details: Any) -> None:
        """Record a decision about this request (see :mod:`proxy.gate.recording`)."""
        self.recorder.record(self.ex, self.cid, kind, action, self.obs, **details)
