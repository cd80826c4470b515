"""Counting what the code under test does: where a tracker's token counts are made
(issue 16's tests: off the event loop), how often parsed items are compared."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def threads_counting(tracker: Any, which: Callable[[str], bool]) -> set[str]:
    """The names of the threads in which ``tracker`` tokenises a text ``which`` selects
    (a count actually made, not a cached one), filled in as it happens."""
    where: set[str] = set()
    real = tracker.accounting._count_part

    def counting(tok: Any, fn: Any, text: str, *args: Any) -> Any:
        if which(text):
            where.add(threading.current_thread().name)
        return real(tok, fn, text, *args)

    tracker.accounting._count_part = counting
    return where


class Counted(dict):  # type: ignore[type-arg]
    """A parsed item that counts how often it is compared with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Counted.compared += 1
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]
