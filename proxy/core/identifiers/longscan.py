"""The scans of long texts that an extraction would run, listed without running them
(pure, no I/O).

A caller that must not scan a long text where it is (the event loop: one 10 MB text is
~0.5 s of scanning, issue 16) asks :func:`long_scans` which scans of its long texts
:func:`~.extract.extract_messages` or :func:`~.extract.extract_snapshot` would run and
the cache lacks, runs :func:`~.textscan.scan_text` for each elsewhere (a worker process),
and puts each result in the cache under the key given: the extraction then finds them
there — the same matches — and scans none of those texts itself.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from proxy.core.histtext import long_messages
from proxy.core.messages import TEXTUAL_KINDS, Snapshot

from .catalog import Catalog
from .extract import TEXT_KEY_CHARS, ScanCache, extract_messages, link_calls, scan_snapshot

__all__ = ["long_scans"]


class _Collecting(ScanCache):
    """A view of ``cache`` for :func:`long_scans`: a scan of one of ``long`` (texts by
    their cache key) that ``cache`` lacks is noted as a job; every scan look-up is
    answered with no matches (so nothing is scanned, nor cached, here); any other
    look-up (a tool call's class) goes to ``cache``."""

    def __init__(self, cache: ScanCache, long: dict[Hashable, str]) -> None:
        super().__init__()
        self._cache = cache
        self._long = long
        self.jobs: dict[Hashable, tuple[str, str]] = {}

    def get(self, key: Hashable) -> object | None:
        if not (isinstance(key, tuple) and len(key) == 4 and key[0] == "scan"):
            return self._cache.get(key)
        if key[1] in self._long and key not in self.jobs and self._cache.get(key) is None:
            self.jobs[key] = (self._long[key[1]], key[2])
        return ()  # never scanned here: a short text is left to the extraction

    def put(self, key: Hashable, value: object) -> None:
        if not (isinstance(key, tuple) and key and key[0] == "scan"):
            self._cache.put(key, value)


def long_scans(
    snapshot: Snapshot,
    catalog: Catalog | None = None,
    *,
    cache: ScanCache,
    min_chars: int,
    only: Iterable[int] | None = None,
) -> list[tuple[Hashable, str, str]]:
    """The scans of message texts of ``min_chars`` characters or more that
    :func:`~.extract.extract_snapshot` of ``snapshot`` (or, with ``only``,
    :func:`~.extract.extract_messages` of those messages) would run and ``cache`` does
    not hold, as ``(cache key, text, src_ctx)``: ``scan_text(text, catalog, src_ctx)``
    put under the key is what the extraction would have scanned. Nothing is scanned
    here. (The system prompt and tool definitions are not listed: they are keyed by
    their text's hash, which is not made here either.) Without ``only``, a history with
    no long text is told so by :func:`~proxy.core.histtext.long_messages` (its last
    request's answer and its new messages), without a pass over its messages."""
    if only is None and not long_messages(snapshot.digests, snapshot.messages, min_chars):
        return []  # no long text in the history: known from the last request's and the new messages
    indexes = range(len(snapshot.messages)) if only is None else sorted(i for i in only if 0 <= i < len(snapshot.messages))
    long: dict[Hashable, str] = {
        (m.digest, pi): p.text
        for m in (snapshot.messages[i] for i in indexes) if m.digest
        for pi, p in enumerate(m.parts)
        if p.kind in TEXTUAL_KINDS and len(p.text) >= min_chars and len(p.text) > TEXT_KEY_CHARS
    }
    if not long:
        return []
    cat = catalog or Catalog.load_default()
    collecting = _Collecting(cache, long)
    if only is None:  # extract_snapshot's links, its messages only
        calls, links = link_calls(snapshot, collecting)
        scan_snapshot(snapshot, cat, collecting, calls, links, frozenset(indexes))
    else:
        extract_messages(snapshot, indexes, cat, cache=collecting)
    return [(key, text, ctx) for key, (text, ctx) in collecting.jobs.items()]
