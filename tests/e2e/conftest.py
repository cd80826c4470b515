"""E2E fixtures. ``httpx`` is imported here, on the main thread, before any proxy runs:
the proxy's background loop may import it lazily (via litellm) while an SDK call on the
main thread inspects ``sys.modules['httpx']`` — a partially initialised module there
breaks the SDK. ``make_gate(policy, responder)`` starts a GateStack (a policy given as YAML text is
written to a file first) and closes it after the test."""

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx  # noqa: F401
import pytest

from tests.e2e.stack import GateStack
from tests.support.fake_upstream import Responder


@pytest.fixture
def make_gate(tmp_path: Path) -> Iterator[Callable[..., GateStack]]:
    stacks: list[GateStack] = []

    def factory(policy: str, responder: Responder) -> GateStack:
        path = policy
        if "\n" in policy:
            p = tmp_path / f"policy{len(stacks)}.yaml"
            p.write_text(policy)
            path = str(p)
        s = GateStack(path, responder)
        stacks.append(s)
        return s

    yield factory
    for s in stacks:
        s.close()

