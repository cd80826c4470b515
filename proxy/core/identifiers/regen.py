"""Regenerability: can a value be fetched again without side effects? (DESIGN §2)

:func:`extract_snapshot <.extract.extract_snapshot>` decides it by provenance
(:mod:`.provenance`, the rules of corpus/PRINCIPLES.md) and then applies a policy's
overrides with :func:`apply_overrides`. :func:`mark_regenerability` below is the earlier,
table-driven rule set (source of the text, read-before-write by resource domain), kept
for callers that only have identifiers and call records, not a snapshot:

1. **Source.** Values in the system prompt or user text are *not* regenerable (the user
   said them; nothing can re-fetch them). A value in the result of a *mutating* call is
   *not* regenerable (an id the call created: a revision, an upload id, a refund id).
   A value in the result of a *read-only* call is regenerable (list/read it again).
   Everything else (assistant prose, thinking, tool-call arguments, tool definitions,
   results of calls we cannot classify) keeps the kind's default from the catalog.
2. **Read-before-write.** A value a read-only call returned becomes *not* regenerable
   when a LATER mutating call in the snapshot touches the same resource domain (same
   ``git`` history-rewriting command, ``k8s``, ``terraform``, ``db``, ``aws:<service>``,
   ``stripe``, ``kafka``, the same file by base name, the same tool noun …): e.g. HEAD
   from ``git rev-parse HEAD`` before ``git reset --hard``, the image from ``kubectl get``
   before ``kubectl set image``, ``alembic current`` before ``alembic upgrade``.
   Locators and stable names (paths, URLs, S3 URIs, k8s ``kind/name``, terraform
   addresses) are exempt: the name still resolves after the mutation.
3. **Overrides** from a :class:`RegenPolicy`: per tool name (results of that tool), then
   per kind (always wins).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .model import LOCATOR_KINDS, Identifier, Source

__all__ = ["STABLE_NAME_KINDS", "CallRecord", "RegenPolicy", "apply_overrides", "default_regenerable", "mark_regenerability"]

#: Kinds exempt from read-before-write: names that still resolve after a mutation.
STABLE_NAME_KINDS: frozenset[str] = LOCATOR_KINDS | frozenset({"k8s_resource", "terraform_address"})

#: Domains too generic to link a read with a later write.
_WEAK_DOMAINS = frozenset({"fs", "http", "pkg", "docker", "aws"})


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A classified tool call at ``message_index`` of a snapshot."""

    message_index: int
    tool_name: str | None
    mutating: bool | None
    domains: frozenset[str] = frozenset()
    command: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class RegenPolicy:
    """Overrides of the default rules (the policy layer fills these).

    ``kind_overrides``: kind → regenerable, applied last. ``tool_overrides``: tool name →
    regenerable for values in that tool's results. ``read_before_write``: enable rule 2.
    """

    kind_overrides: Mapping[str, bool] = field(default_factory=dict)
    tool_overrides: Mapping[str, bool] = field(default_factory=dict)
    read_before_write: bool = True


def default_regenerable(kind_default: bool, kind: str, source: Source) -> bool:
    """Rule 1 (source) for one value whose kind defaults to ``kind_default``."""
    if source.origin in ("system", "user"):
        return False
    if source.origin == "tool_result":
        if source.mutating is True:
            return False
        if source.mutating is False:
            return True
    return kind_default


def _linked(read: frozenset[str], write: frozenset[str]) -> bool:
    common = (read & write) - _WEAK_DOMAINS
    return bool(common)


def mark_regenerability(
    identifiers: Sequence[Identifier],
    calls: Sequence[CallRecord] = (),
    policy: RegenPolicy | None = None,
    kind_defaults: Mapping[str, bool] | None = None,
) -> list[Identifier]:
    """Return ``identifiers`` with ``regenerable`` recomputed by the module's rules.

    ``calls`` are the snapshot's classified tool calls (for read-before-write);
    ``kind_defaults`` maps kind → default regenerability (default: the shipped catalog's).
    Pure: inputs are not modified; unchanged identifiers are returned as is.
    """
    pol = policy or RegenPolicy()
    if kind_defaults is None:
        from .catalog import Catalog

        cat = Catalog.load_default()
        kind_defaults = {k: cat.kind_regenerable(k) for k in cat.kinds}
    writes = [c for c in calls if c.mutating is True]
    out: list[Identifier] = []
    for ident in identifiers:
        src = ident.source
        regen = default_regenerable(kind_defaults.get(ident.kind, False), ident.kind, src)
        if (
            regen
            and pol.read_before_write
            and src.origin == "tool_result"
            and src.mutating is False
            and ident.kind not in STABLE_NAME_KINDS
            and src.domains
        ):
            after = src.message_index
            if any(w.message_index > after and _linked(src.domains, w.domains) for w in writes):
                regen = False
        if src.origin == "tool_result" and src.tool_name and src.tool_name in pol.tool_overrides:
            regen = pol.tool_overrides[src.tool_name]
        if ident.kind in pol.kind_overrides:
            regen = pol.kind_overrides[ident.kind]
        out.append(ident if regen == ident.regenerable else dataclasses.replace(ident, regenerable=regen))
    return out


def apply_overrides(identifiers: Sequence[Identifier], policy: RegenPolicy | None = None) -> list[Identifier]:
    """Rule 3 alone: a policy's per-tool and per-kind overrides on top of regenerability
    already judged (by :mod:`.provenance`)."""
    if policy is None or not (policy.tool_overrides or policy.kind_overrides):
        return list(identifiers)
    out: list[Identifier] = []
    for ident in identifiers:
        src, regen = ident.source, ident.regenerable
        if src.origin == "tool_result" and src.tool_name and src.tool_name in policy.tool_overrides:
            regen = policy.tool_overrides[src.tool_name]
        if ident.kind in policy.kind_overrides:
            regen = policy.kind_overrides[ident.kind]
        out.append(ident if regen == ident.regenerable else dataclasses.replace(ident, regenerable=regen, why="policy"))
    return out


def calls_after(calls: Iterable[CallRecord], index: int) -> list[CallRecord]:
    """Calls made after message ``index`` (helper for policies)."""
    return [c for c in calls if c.message_index > index]
