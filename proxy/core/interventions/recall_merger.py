"""The base of the recall round mergers (pure): holding, rounds and usage.

:mod:`.recall_stream` merges several upstream rounds into one client stream, with one
:class:`RoundMerger` subclass per API. This module holds what they share — the finished
round (:class:`RoundEnd`), a held event (:class:`Held`), and the base class: holding
events once a tool call starts, counting rounds, collecting every round's usage and
summing it, and the interface the gate drives (:meth:`RoundMerger.feed`,
:meth:`~RoundMerger.end_round`, :meth:`~RoundMerger.next_round`,
:meth:`~RoundMerger.release`, :meth:`~RoundMerger.strip`, :meth:`~RoundMerger.abandon`)
— so the dialect mergers depend on it and it on none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .recall import RecallApi, sum_usage

__all__ = ["Held", "RoundEnd", "RoundMerger"]


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """One finished round: the model's turn (the dialect's own shape, as
    :func:`.recall.turn_of_json` returns it) and its usage (``None`` if not streamed)."""

    turn: Any
    usage: dict[str, Any] | None


@dataclass(slots=True)
class Held:
    """A held event: parsed (``obj``; ``None`` for one that is not JSON), its SSE name,
    the raw bytes, and the round's own index of the item/block it belongs to."""

    obj: Any
    event: str | None
    raw: bytes
    index: int | None = None


class RoundMerger:
    """Base: holding, rounds and usage; one subclass per API."""

    api: RecallApi

    def __init__(self, name: str) -> None:
        self.name = name
        self.round = 0
        self.usages: list[dict[str, Any]] = []
        self.holding = False
        self.held: list[Held] = []

    def _out(self, h: Held) -> list[bytes]:
        if self.holding:
            self.held.append(h)
            return []
        return [h.raw]

    def feed(self, raw: bytes) -> list[bytes]:
        """One complete SSE event of the current round; returns what the client gets now."""
        raise NotImplementedError

    def end_round(self) -> RoundEnd:
        """The current round's upstream stream ended."""
        end = self._end()
        if end.usage is not None:
            self.usages.append(end.usage)
        return end

    def _end(self) -> RoundEnd:
        raise NotImplementedError

    def next_round(self) -> None:
        """The round ended with a recall: drop what was held, expect the next round."""
        self.round += 1
        self.holding = False
        self.held = []
        self._reset()

    def _reset(self) -> None:
        raise NotImplementedError

    def release(self) -> list[bytes]:
        """The last round ended without a recall: the held events, usage summed."""
        return [h.raw for h in self.held] + self._tail()

    def _tail(self) -> list[bytes]:
        """The terminal events, usage summed over the rounds."""
        raise NotImplementedError

    def strip(self, note: str) -> list[bytes]:
        """The last round ended with a recall the gate will not resolve: the held events
        without the recall calls (``note`` as text when no client call is left)."""
        raise NotImplementedError

    def summed(self) -> dict[str, Any] | None:
        return sum_usage(self.usages) if len(self.usages) > 1 else None

    def abandon(self) -> list[bytes]:
        """Everything held, as it came (the merger is given up; the rest passes as is)."""
        out = [h.raw for h in self.held] + self._kept()
        self.held, self.holding = [], False
        return out

    def _kept(self) -> list[bytes]:
        """The terminal events held apart from the others (raw)."""
        raise NotImplementedError

    def response_ids(self) -> tuple[str | None, str | None]:
        """(the response id the client saw, the last round's own) — Responses API only."""
        return None, None
