"""The compiled policy: frozen objects with regexes compiled once, and the pure
evaluations the gate needs (scope selection, regenerability, priorities, obligations).

Nothing here does I/O. A :class:`Policy` is immutable and safe to share between
concurrent requests; a reload swaps the whole object.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .schema import Action, NoteRole, SafeAction, TripwireAction


def _glob(pattern: str, value: str | None, *, fold: bool = True) -> bool:
    if value is None:
        return False
    if fold:
        return fnmatch.fnmatchcase(value.lower(), pattern.lower())
    return fnmatch.fnmatchcase(value, pattern)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a scope can match on. ``headers`` are lower-cased names."""

    model: str | None = None
    route: str = ""
    tenant: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Match:
    models: tuple[str, ...] = ()
    routes: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()

    def matches(self, ctx: RequestContext) -> bool:
        if self.models and not any(_glob(p, ctx.model) for p in self.models):
            return False
        if self.routes and not any(_glob(p, ctx.route, fold=False) for p in self.routes):
            return False
        if self.tenants and not any(_glob(p, ctx.tenant, fold=False) for p in self.tenants):
            return False
        return all(_glob(pattern, ctx.headers.get(name)) for name, pattern in self.headers)


#: How much each action protects, per field (higher is stricter). The principle: an
#: action that changes nothing (allow) < one that only records (warn) < one that repairs
#: the request so the model sees the bindings (reinject, or spill: the region kept for
#: the model to fetch) < one that refuses the request outright (reject); for a safe
#: compaction: allow < warn < spill (the region kept for the model to recall). For the
#: tripwire: off < warn < annotate (the model is told) < block. The summarization gate
#: on is stricter than off.
PROTECTION_ORDER: Mapping[str, Mapping[str, int]] = {
    "destructive": {"allow": 0, "warn": 1, "reinject": 2, "spill": 2, "reject": 3},
    "safe": {"allow": 0, "warn": 1, "spill": 2},
    "tripwire": {"off": 0, "warn": 1, "annotate": 2, "block": 3},
}


def _stricter(field_name: str, chosen: str, floor: str) -> str:
    """``chosen`` unless it protects less than ``floor``."""
    order = PROTECTION_ORDER[field_name]
    return chosen if order[chosen] >= order[floor] else floor


@dataclass(frozen=True, slots=True)
class Scope:
    match: Match
    name: str = ""
    destructive: Action | None = None
    safe: SafeAction | None = None
    tripwire: TripwireAction | None = None
    gate: bool | None = None


@dataclass(frozen=True, slots=True)
class Effective:
    """The actions in force for one request after scoping."""

    destructive: Action
    safe: SafeAction
    tripwire: TripwireAction
    gate: bool
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolRule:
    tool: str = "*"
    command: str | None = None
    result: re.Pattern[str] | None = None

    def matches(self, tool: str | None, command: str | None, result_text: str | None = None) -> bool:
        if not _glob(self.tool, tool or ""):
            return False
        if self.command is not None and not _glob(self.command, (command or "").strip()):
            return False
        return not (self.result is not None and (result_text is None or not self.result.search(result_text)))


@dataclass(frozen=True, slots=True)
class ToolRegen:
    rule: ToolRule
    kinds: frozenset[str]
    regenerable: bool


@dataclass(frozen=True, slots=True)
class Obligation:
    name: str
    opened_by: ToolRule
    binds: frozenset[str]
    closed_by: ToolRule | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class DetectorRule:
    id: str
    kind: str
    pattern: re.Pattern[str]
    regenerable: bool = False
    sensitive: bool = False
    keywords: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    negative_examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    """A compiled policy. ``source`` names the file (or ``preset:NAME``)."""

    name: str
    source: str
    description: str = ""
    markers: str = "agents"
    on_error: Literal["open", "closed"] = "open"
    # detectors
    disabled: frozenset[str] = frozenset()
    allowlist: tuple[re.Pattern[str], ...] = ()
    detector_rules: tuple[DetectorRule, ...] = ()
    # regenerability
    regen_kinds: Mapping[str, bool] = field(default_factory=dict)
    regen_tools: tuple[ToolRegen, ...] = ()
    # obligations
    obligation_default: Literal["non_regenerable", "rules_only"] = "non_regenerable"
    plan_tools: tuple[str, ...] = ()
    obligations: tuple[Obligation, ...] = ()
    # actions
    destructive: Action = "reinject"
    safe: SafeAction = "allow"
    scopes: tuple[Scope, ...] = ()
    client_scopes: Literal["stricter_only", "any"] = "stricter_only"
    # interventions
    reinject_role: NoteRole = "user"
    reinject_budget_tokens: int = 1000
    reinject_include_regenerable: bool = False
    priorities: Mapping[str, int] = field(default_factory=dict)
    default_priority: int = 10
    gate_enabled: bool = True
    gate_contract: bool = True
    gate_append_missing: bool = True
    gate_budget_tokens: int = 1500
    tripwire: TripwireAction = "block"
    tripwire_window: int = 5
    spill_ttl_seconds: int = 7 * 24 * 3600
    spill_max_bytes: int = 4_000_000
    spill_list_bindings: bool = True
    recall_enabled: bool = True
    recall_tool_name: str = "recall_compacted_context"
    recall_max_rounds: int = 3
    recall_budget_rounds: int = 20
    recall_budget_bytes: int = 2_000_000
    recall_max_result_bytes: int = 200_000

    # ------------------------------------------------------------------ evaluation

    def effective(self, ctx: RequestContext) -> Effective:
        """Actions for one request: for each field, the first matching scope that sets it,
        else the policy-wide value. With ``client_scopes: stricter_only`` (the default) a
        scope matched on request headers — which any client can send — can only make a
        field stricter than it is without such scopes (:data:`PROTECTION_ORDER`)."""
        full = self._effective(ctx, self.scopes)
        if self.client_scopes == "any" or not any(s.match.headers for s in self.scopes):
            return full
        base = self._effective(ctx, tuple(s for s in self.scopes if not s.match.headers))
        return Effective(
            destructive=_stricter("destructive", full.destructive, base.destructive),  # type: ignore[arg-type]
            safe=_stricter("safe", full.safe, base.safe),  # type: ignore[arg-type]
            tripwire=_stricter("tripwire", full.tripwire, base.tripwire),  # type: ignore[arg-type]
            gate=full.gate or base.gate,
            scopes=full.scopes,
        )

    def _effective(self, ctx: RequestContext, scopes: tuple[Scope, ...]) -> Effective:
        destructive: Action | None = None
        safe: SafeAction | None = None
        trip: TripwireAction | None = None
        gate: bool | None = None
        names: list[str] = []
        for s in scopes:
            if not s.match.matches(ctx):
                continue
            names.append(s.name or "<unnamed scope>")
            destructive = destructive if destructive is not None else s.destructive
            safe = safe if safe is not None else s.safe
            trip = trip if trip is not None else s.tripwire
            gate = gate if gate is not None else s.gate
        return Effective(
            destructive=destructive or self.destructive,
            safe=safe or self.safe,
            tripwire=trip or self.tripwire,
            gate=self.gate_enabled if gate is None else gate,
            scopes=tuple(names),
        )

    def allowlisted(self, value: str) -> bool:
        return any(p.fullmatch(value) for p in self.allowlist)

    def is_disabled(self, kind: str, detector: str = "") -> bool:
        return kind in self.disabled or (bool(detector) and detector in self.disabled)

    def regenerable(
        self, kind: str, default: bool, *, tool: str | None = None, command: str | None = None
    ) -> bool:
        """Regenerability after the policy: a matching tool rule wins, then the kind
        override, then the detector's/analysis's ``default``."""
        if tool is not None:
            for r in self.regen_tools:
                if (not r.kinds or kind in r.kinds) and r.rule.matches(tool, command):
                    return r.regenerable
        if kind in self.regen_kinds:
            return self.regen_kinds[kind]
        return default

    def priority(self, kind: str, regenerable: bool) -> int:
        base = self.priorities.get(kind, self.default_priority)
        return base + (0 if regenerable else 1000)

    def describe(self) -> dict[str, Any]:
        """A secret-free summary for logs and ``/gate`` endpoints."""
        return {
            "name": self.name,
            "source": self.source,
            "destructive": self.destructive,
            "safe": self.safe,
            "tripwire": self.tripwire,
            "gate": self.gate_enabled,
            "on_error": self.on_error,
            "scopes": [s.name for s in self.scopes],
        }
