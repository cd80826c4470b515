"""The identifier catalogue a compiled policy implies (its detector rules, disables and
allowlist on top of the shipped detectors).

Compiling a catalogue compiles every rule's regexes, so :func:`policy_catalog` builds it
once per compiled :class:`Policy` object and hands the same catalogue back afterwards. A
reload produces a new policy object and therefore a new catalogue; a few recent ones are
kept so that alternating between policies (tests, ``check``) does not recompile either.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..core.identifiers.catalog import Catalog
from .model import DetectorRule, Policy

#: Compiled policies whose catalogue is kept.
_CACHE_SIZE = 8

# id(policy) -> (policy, catalogue). The entry holds the policy itself, so its id cannot
# be reused by another object while the entry exists.
_cache: OrderedDict[int, tuple[Policy, Catalog | None]] = OrderedDict()
_lock = threading.Lock()


def _rule_mapping(r: DetectorRule) -> dict[str, Any]:
    """A policy detector rule in the catalogue's raw rule schema."""
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
    return rule


def build_policy_catalog(policy: Policy) -> Catalog | None:
    """Compile the catalogue of ``policy`` (``None`` = the built-in default when the
    policy changes nothing). Uncached: use :func:`policy_catalog`."""
    if not (policy.detector_rules or policy.disabled or policy.allowlist):
        return None
    return Catalog.build(
        extra_rules=[_rule_mapping(r) for r in policy.detector_rules],
        disabled=sorted(policy.disabled),
        allowlist=list(policy.allowlist),
        origin=policy.source,
    )


def policy_catalog(policy: Policy) -> Catalog | None:
    """The identifier catalogue with the policy's detector rules, disables and allowlist
    (``None`` = the built-in default when the policy changes nothing), built once per
    policy object."""
    key = id(policy)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is policy:
            _cache.move_to_end(key)
            return hit[1]
    catalog = build_policy_catalog(policy)
    with _lock:
        _cache[key] = (policy, catalog)
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return catalog


__all__ = ["build_policy_catalog", "policy_catalog"]
