"""Fixtures for the identifier-layer tests."""

from __future__ import annotations

import pytest

from proxy.core.identifiers import Catalog


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.load_default()
