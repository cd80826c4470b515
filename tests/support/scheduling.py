"""A skip for tests whose premise is that the test process runs under the ordinary
scheduling policy: they check that a worker thread or process is moved to ``SCHED_IDLE``
while the process itself is not, which cannot be told apart when the whole run was
started idle (``chrt -i 0 pytest …``, as benchmarks' neighbours are)."""

from __future__ import annotations

import os

import pytest

__all__ = ["ordinary_scheduling"]


def _policy() -> int | None:
    getter = getattr(os, "sched_getscheduler", None)
    return getter(0) if getter is not None else None


ordinary_scheduling = pytest.mark.skipif(
    _policy() not in (None, getattr(os, "SCHED_OTHER", None)),
    reason="the test process itself runs under another scheduling policy (started with chrt?): "
    "a thread moved to SCHED_IDLE cannot be told from the process's own policy",
)
