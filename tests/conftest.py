"""Repository-wide test fixtures.

``stack``        — a running :class:`tests.support.ProxyStack` (fake upstream + proxy).
``make_stack``   — factory for stacks with custom ``server``/``gate`` settings.
``fake_upstream``— a bare :class:`FakeUpstream` on the test's own event loop (async tests).
No test reaches the network: every SDK client is given an explicit base URL.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tests.support import ProxyStack
from tests.support.fake_upstream import FakeUpstream

# SDKs read these; make sure a developer's environment never redirects tests.
for _var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_var, None)


@pytest.fixture
def make_stack() -> Iterator[Callable[..., ProxyStack]]:
    stacks: list[ProxyStack] = []

    def factory(**kwargs: Any) -> ProxyStack:
        stack = ProxyStack(**kwargs)
        stacks.append(stack)
        return stack

    yield factory
    for stack in stacks:
        stack.close()


@pytest.fixture
def stack(make_stack: Callable[..., ProxyStack]) -> ProxyStack:
    return make_stack()


@pytest.fixture
async def fake_upstream() -> AsyncIterator[FakeUpstream]:
    fake = FakeUpstream()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
