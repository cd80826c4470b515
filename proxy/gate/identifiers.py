"""The identifier layer as the gate uses it: extraction under a policy's catalogue and
the bindings a policy requires to survive.

Pure functions over snapshots; the catalogue is the one
:func:`proxy.policy.detectors.policy_catalog` compiled for the policy (``None`` = the
shipped detectors).
"""

from __future__ import annotations

from ..core.diff import LostBinding, SourceRef
from ..core.identifiers.catalog import Catalog
from ..core.identifiers.extract import extract_snapshot
from ..core.identifiers.model import Identifier
from ..core.interventions.bindings import Binding
from ..core.messages import Snapshot
from ..policy import Policy
from ..policy.obligations import PolicyObligations


def extract(snapshot: Snapshot, catalog: Catalog | None) -> list[Identifier]:
    """Every identifier of ``snapshot`` (in message order)."""
    return list(extract_snapshot(snapshot, catalog))


def lost_binding(policy: Policy, b: LostBinding) -> Binding:
    """A binding a compaction lost, with regenerability and priority after the policy."""
    regen = policy.regenerable(b.kind, b.regenerable, tool=b.source.tool_name, command=b.source.command)
    return Binding(
        value=b.value,
        kind=b.kind,
        source=b.source.describe(),
        regenerable=regen,
        sensitive=b.sensitive,
        priority=policy.priority(b.kind, regen),
        status=b.status,
        norm=b.norm,
        line=b.context,
    )


def required_in(policy: Policy, snap: Snapshot, catalog: Catalog | None) -> list[Binding]:
    """The bindings of ``snap`` the policy's obligations require verbatim: one per norm,
    in extraction order, never a secret."""
    ids = extract(snap, catalog)
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
            Binding(
                i.value,
                i.kind,
                SourceRef.of(i.source).describe(),
                regen,
                False,
                policy.priority(i.kind, regen),
                line=i.context,
            )
        )
    return out
