"""Repository-wide test fixtures.

``stack``        — a running :class:`tests.support.ProxyStack` (fake upstream + proxy).
``make_stack``   — factory for stacks with custom ``server``/``gate`` settings.
``fake_upstream``— a bare :class:`FakeUpstream` on the test's own event loop (async tests).
``json_log``     — everything logged under ``compaction_gate``, as the production JSON lines.
No test reaches the network: every SDK client is given an explicit base URL.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from proxy.server.logs import JsonFormatter
from tests.support import ProxyStack
from tests.support.fake_upstream import FakeUpstream

# SDKs read these; make sure a developer's environment never redirects tests.
for _var in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
    os.environ.pop(_var, None)
# litellm fetches its model cost map from GitHub when first imported unless told to use the
# copy it ships; the guardrail integration imports it at module level (collection time)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


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


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Capture everything under ``compaction_gate`` as the production JSON lines."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("compaction_gate")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
