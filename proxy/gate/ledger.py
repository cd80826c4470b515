"""Token accounting of tracked requests, settled off the request's critical path.

Identifying a request's conversation needs its message digests, not its token count;
counting is the costly part of recording a request (tiktoken over every new message,
slow on a busy machine because its rank tables fall out of the CPU caches). So the
tracker may record a request with its accounting *pending* and settle it later: when
the response has been relayed (the reply tap), before the conversation's next request
is recorded, or as soon as anyone reads the conversation. Settling later counts exactly
what counting on the spot would have counted; only the moment differs.

This module holds the arithmetic; :class:`~proxy.gate.tracker.Tracker` decides when.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from proxy.accounting import TokenAccounting
from proxy.core.messages import Message, Snapshot
from proxy.state.records import ConversationRecord, TimelineEntry

__all__ = ["PendingCount", "count_request", "cumulative", "no_counts", "share_of"]


def no_counts() -> array[int]:
    """Cumulative counts of an empty history. Counts are kept in a machine array
    (``c[i]``: tokens of the first ``i`` messages): slicing a long history's counts
    copies words, with no reference counting of a thousand int objects."""
    return array("q", [0])


@dataclass(slots=True)
class PendingCount:
    """The accounting of one recorded request, not yet counted.

    ``base`` holds the cumulative counts of the prefix shared with the conversation's
    previous request (``base[i]``: tokens of its first ``i`` messages), counted with
    ``tokenizer``; ``new`` are the messages first seen in this request (their text-line
    fingerprints are indexed when the count settles)."""

    entry: TimelineEntry
    model: str | None
    snapshot: Snapshot
    system_hash: str
    tools_hash: str
    base: array[int]
    tokenizer: str
    new: tuple[Message, ...]


def cumulative(
    accounting: TokenAccounting, model: str | None, messages: tuple[Message, ...], base: array[int]
) -> array[int]:
    """``base`` extended in place to every message: ``cum[i]`` = tokens of the first ``i``.
    Per message the count is cached by digest, so a message is tokenised once."""
    cum = base
    for msg in messages[len(cum) - 1 :]:
        cum.append(cum[-1] + accounting.count_message(model, msg))
    return cum


def share_of(tokens: int, window: int | None) -> float | None:
    """``tokens`` as a share of the context ``window`` (``None`` when unknown)."""
    return round(tokens / window, 4) if window else None


def count_request(accounting: TokenAccounting, rec: ConversationRecord, p: PendingCount) -> tuple[array[int], str]:
    """Count request ``p`` of ``rec``: fill its timeline entry, and when it is the
    conversation's latest request (not a side request) the conversation's own totals.
    Returns the cumulative counts of its messages and the tokenizer that made them."""
    info = accounting.model_info(p.model)
    base = p.base if p.tokenizer == info.tokenizer else no_counts()
    cum = cumulative(accounting, p.model, p.snapshot.messages, base)
    tokens = cum[-1] + accounting.framing_tokens(p.model, p.snapshot, p.system_hash, p.tools_hash)
    entry = p.entry
    entry.tokens, entry.window, entry.exact = tokens, info.window, info.exact
    entry.estimated = accounting.any_estimated(p.model, p.snapshot.messages)
    entry.share = share_of(tokens, info.window)
    if entry.relation != "side_request" and rec.seq == entry.seq:
        rec.tokens, rec.window, rec.exact = tokens, info.window, info.exact
    return cum, info.tokenizer
