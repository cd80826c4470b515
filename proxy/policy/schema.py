"""Stage-2 schema of a policy file: the dataclasses :func:`proxy.yamlconf.build` validates
raw YAML into (unknown keys, wrong types and bad regexes are errors naming file:line).

These are the *spelling* of a policy; :mod:`proxy.policy.model` holds the compiled,
frozen objects the gate evaluates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from ..yamlconf import Invalid, meta

Action = Literal["allow", "warn", "reinject", "reject", "spill"]
SafeAction = Literal["allow", "warn", "spill"]
TripwireAction = Literal["block", "annotate", "warn", "off"]
NoteRole = Literal["user", "system", "developer"]

_EMPTY_STR_MAP: Mapping[str, str] = MappingProxyType({})
_EMPTY_BOOL_MAP: Mapping[str, bool] = MappingProxyType({})
_EMPTY_INT_MAP: Mapping[str, int] = MappingProxyType({})

_KIND_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def _regex(pattern: str, key: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise Invalid(f"invalid regular expression {pattern!r}: {exc}", key=key) from None


def _kind(value: str, key: str) -> None:
    if not _KIND_RE.match(value):
        raise Invalid(f"kind {value!r} must be lower_snake_case", key=key)


# --------------------------------------------------------------------------- detectors


@dataclass(frozen=True)
class DetectorRuleSpec:
    """A user detector rule (DESIGN §8): a regex, its kind, and examples a test runs —
    the loader runs them too, so a rule that misses its own examples is refused."""

    id: str
    kind: str
    pattern: str = field(metadata=meta(expand_env=False))
    regenerable: bool = False
    sensitive: bool = False
    keywords: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    negative_examples: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _kind(self.kind, "kind")
        rx = _regex(self.pattern, "pattern")
        if rx.groups > 1:
            raise Invalid("pattern may have at most one capturing group (the value)", key="pattern")
        for ex in self.examples:
            if not rx.search(ex):
                raise Invalid(f"example {ex!r} does not match the pattern", key="examples")
        for ex in self.negative_examples:
            if rx.fullmatch(ex):
                raise Invalid(f"negative example {ex!r} matches the pattern", key="negative_examples")


@dataclass(frozen=True)
class DetectorsSpec:
    #: Detector ids or kinds to switch off.
    disable: tuple[str, ...] = ()
    #: Regexes (full match) of values that are never bindings (documentation placeholders …).
    allowlist: tuple[str, ...] = field(default=(), metadata=meta(expand_env=False))
    rules: tuple[DetectorRuleSpec, ...] = ()

    def __post_init__(self) -> None:
        for p in self.allowlist:
            _regex(p, "allowlist")


# --------------------------------------------------------------------------- regenerability


@dataclass(frozen=True)
class ToolRuleSpec:
    """Matches a tool call: tool name glob, optional shell command glob, optional regex on
    the tool result text."""

    tool: str = "*"
    command: str | None = None
    result: str | None = field(default=None, metadata=meta(expand_env=False))

    def __post_init__(self) -> None:
        if self.result is not None:
            _regex(self.result, "result")


@dataclass(frozen=True)
class ToolRegenSpec:
    tool: str = "*"
    command: str | None = None
    kinds: tuple[str, ...] = ()
    regenerable: bool = False


@dataclass(frozen=True)
class RegenerabilitySpec:
    #: kind -> regenerable, overriding the detector default.
    kinds: Mapping[str, bool] = field(default_factory=lambda: _EMPTY_BOOL_MAP)
    #: By source tool (first match wins; beats ``kinds``).
    tools: tuple[ToolRegenSpec, ...] = ()


# --------------------------------------------------------------------------- obligations


@dataclass(frozen=True)
class ObligationSpec:
    """Opened by a tool call whose result binds some kinds; closed by one that consumes
    them. While open, bindings of those kinds are required verbatim."""

    name: str
    opened_by: ToolRuleSpec
    binds: tuple[str, ...]
    closed_by: ToolRuleSpec | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not self.binds:
            raise Invalid("an obligation must bind at least one kind", key="binds")
        for k in self.binds:
            _kind(k, "binds")


@dataclass(frozen=True)
class ObligationsSpec:
    #: ``non_regenerable``: every non-regenerable binding produced by a tool result stays
    #: required (DESIGN default); ``rules_only``: only bindings of open obligations.
    default: Literal["non_regenerable", "rules_only"] = "non_regenerable"
    #: Tools whose calls hold pending plan items (todo/plan tools): identifiers named in
    #: their latest call are required too.
    plan_tools: tuple[str, ...] = ()
    rules: tuple[ObligationSpec, ...] = ()


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class MatchSpec:
    """Scope of a rule. Every given field must match (globs, case-insensitive for headers)."""

    model: str | tuple[str, ...] = ()
    route: str | tuple[str, ...] = ()
    tenant: str | tuple[str, ...] = ()
    header: Mapping[str, str] = field(default_factory=lambda: _EMPTY_STR_MAP)


@dataclass(frozen=True)
class ScopeSpec:
    match: MatchSpec
    name: str = ""
    destructive: Action | None = None
    safe: SafeAction | None = None
    tripwire: TripwireAction | None = None
    gate: bool | None = None


@dataclass(frozen=True)
class ActionsSpec:
    #: Action when a compaction dropped required bindings.
    destructive: Action = "reinject"
    #: Action when it did not: ``allow``, ``warn`` (record an event), or ``spill`` (store
    #: the region it removed anyway and offer the recall tool, so that recall also covers
    #: what detection misses).
    safe: SafeAction = "allow"
    #: Overrides by model/route/tenant/header; the first matching scope wins per field.
    scopes: tuple[ScopeSpec, ...] = ()
    #: What a scope matched on request headers (which any client can send) may do:
    #: ``stricter_only`` — only move an action up the protection order (see
    #: :data:`proxy.policy.model.PROTECTION_ORDER`), never down; ``any`` — anything.
    client_scopes: Literal["stricter_only", "any"] = "stricter_only"


# --------------------------------------------------------------------------- interventions


@dataclass(frozen=True)
class ReinjectSpec:
    role: NoteRole = "user"
    budget_tokens: int = 1000
    include_regenerable: bool = False
    priorities: Mapping[str, int] = field(default_factory=lambda: _EMPTY_INT_MAP)
    default_priority: int = 10

    def __post_init__(self) -> None:
        if self.budget_tokens < 50:
            raise Invalid("budget_tokens must be at least 50", key="budget_tokens")


@dataclass(frozen=True)
class GateSpec:
    """The summarization-call gate."""

    enabled: bool = True
    #: Add the contract listing required bindings to the summarization request.
    contract: bool = True
    #: Append a verbatim section to the summary for bindings it still lacks.
    append_missing: bool = True
    budget_tokens: int = 1500


@dataclass(frozen=True)
class TripwireSpec:
    action: TripwireAction = "block"
    #: Requests after a destructive compaction during which tool calls are checked.
    window: int = 5

    def __post_init__(self) -> None:
        if self.window < 1:
            raise Invalid("window must be at least 1", key="window")


@dataclass(frozen=True)
class SpillSpec:
    ttl_seconds: int = 7 * 24 * 3600
    max_bytes: int = 4_000_000
    #: List the lost region's bindings next to the handle.
    list_bindings: bool = True


@dataclass(frozen=True)
class RecallSpec:
    """The recall tool offered to conversations whose compaction was spilled (see
    :mod:`proxy.core.interventions.recall`)."""

    #: Offer the tool (off: only the spill note, pointing at ``GET /gate/spill/{handle}``).
    enabled: bool = True
    #: The tool's name; a client tool of the same name makes the gate pick a suffixed one.
    tool_name: str = "recall_compacted_context"
    #: Follow-up upstream rounds the gate makes for one client request.
    max_rounds: int = 3
    #: Recall rounds one conversation may use in all (then the tool is no longer offered).
    budget_rounds: int = 20
    #: Bytes of recalled context one conversation may be given in all.
    budget_bytes: int = 2_000_000
    #: Most bytes one recall returns (the rest is cut, and says so).
    max_result_bytes: int = 200_000

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,47}", self.tool_name):
            raise Invalid(
                "tool_name must be 1-48 letters, digits, '_' or '-', starting with a letter or '_'", key="tool_name"
            )
        for key in ("max_rounds", "budget_rounds"):
            if getattr(self, key) < 1:
                raise Invalid(f"{key} must be at least 1", key=key)
        for key in ("budget_bytes", "max_result_bytes"):
            if getattr(self, key) < 1024:
                raise Invalid(f"{key} must be at least 1024", key=key)


@dataclass(frozen=True)
class PolicySpec:
    version: int = 1
    name: str = ""
    description: str = ""
    #: A shipped preset name or a path (relative to this file) to inherit from.
    extends: str | None = None
    #: Agent summarization markers: a preset name (``agents``) or a path.
    markers: str = "agents"
    #: On an internal analysis error: forward untouched (``open``) or refuse (``closed``).
    on_error: Literal["open", "closed"] = "open"
    detectors: DetectorsSpec = field(default_factory=DetectorsSpec)
    regenerability: RegenerabilitySpec = field(default_factory=RegenerabilitySpec)
    obligations: ObligationsSpec = field(default_factory=ObligationsSpec)
    actions: ActionsSpec = field(default_factory=ActionsSpec)
    reinject: ReinjectSpec = field(default_factory=ReinjectSpec)
    gate: GateSpec = field(default_factory=GateSpec)
    tripwire: TripwireSpec = field(default_factory=TripwireSpec)
    spill: SpillSpec = field(default_factory=SpillSpec)
    recall: RecallSpec = field(default_factory=RecallSpec)

    def __post_init__(self) -> None:
        if self.version != 1:
            raise Invalid(f"unsupported policy version {self.version} (expected 1)", key="version")
