"""The catalogue a policy implies is compiled once per compiled policy object."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from proxy.core.identifiers.catalog import Catalog
from proxy.policy import detectors, load_policy


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = Catalog.build.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Catalog], *a: Any, **k: Any) -> Catalog:
        calls.append(1)
        return real(cls, *a, **k)  # type: ignore[no-any-return]

    monkeypatch.setattr(Catalog, "build", classmethod(counting))
    return calls


def test_a_policy_that_changes_no_detector_uses_the_default() -> None:
    bare = dataclasses.replace(load_policy("default"), detector_rules=(), disabled=frozenset(), allowlist=())
    assert detectors.policy_catalog(bare) is None


def test_built_once_per_policy_object(builds: list[int]) -> None:
    base = load_policy("default")
    a = dataclasses.replace(base, disabled=frozenset({"jwt"}))
    first = detectors.policy_catalog(a)
    assert isinstance(first, Catalog) and "jwt" not in first.kinds
    assert detectors.policy_catalog(a) is first
    assert detectors.policy_catalog(a) is first
    assert len(builds) == 1

    # a reload compiles a new policy object: a new catalogue, once
    b = dataclasses.replace(base, disabled=frozenset({"jwt"}))
    second = detectors.policy_catalog(b)
    assert second is not first and detectors.policy_catalog(b) is second
    assert len(builds) == 2
    # the earlier policy is still cached
    assert detectors.policy_catalog(a) is first
    assert len(builds) == 2
