"""The long texts a request's analysis would scan for identifiers, scanned in the request
worker first (issue 16).

A request that drops messages of its conversation is analysed against the history it
left: the lost messages' identifiers are extracted (:func:`proxy.core.analysis.analyze`,
its quick path), and when one of them may be missing, every message's of both histories.
A client resending an earlier request — a retry, a "regenerate" — drops that request's
reply; with a 10 MB reply that was one synchronous scan of ~0.5 s on the event loop
(``bench.stall`` round 2, which resends round 1's requests: a 505 ms decision step, every
other tenant's requests waiting behind it). :func:`prescan` runs those scans before the
decision, in the request path's worker process (:func:`proxy.state.offload.run`,
awaited: the loop serves everyone else meanwhile), and puts each result in the scan cache
under the key the extraction looks up (:func:`proxy.core.identifiers.longscan.long_scans`):
the analysis then finds them there, the same matches, and scans no long text itself.
Whether a lost long text holds the gate's note (the analysis asks) is answered here too,
a bounded slice per loop step (:func:`prenote_lost`).
Where no worker can run (or it fails), the analysis scans on the loop as before.

What the transition keeps is not scanned: the quick path reads only the lost messages;
the rest of both histories is scanned first only when the lost messages hold
identifiers (only then may the full analysis run) — and, by the gate, only when its
quiet path did not settle the request (:func:`prescan_lost` before that path,
:func:`prescan_rest` after it).
"""

from __future__ import annotations

import asyncio

from proxy.core.histtext import is_long, long_messages
from proxy.core.identifiers.catalog import Catalog
from proxy.core.identifiers.extract import DEFAULT_CACHE, ScanCache, extract_messages
from proxy.core.identifiers.longscan import long_scans
from proxy.core.identifiers.textscan import scan_text
from proxy.core.messages import Snapshot
from proxy.core.notes import note_key, note_search
from proxy.core.transition import Transition
from proxy.state import offload

__all__ = ["LONG_TEXT", "prenote_lost", "prescan", "prescan_lost", "prescan_rest"]

#: Texts from this many characters on are scanned in the worker (~3 ms of scanning
#: on this machine's cores; a 10 MB text ~0.5 s).
LONG_TEXT = 1 << 16


async def prescan(
    previous: Snapshot,
    current: Snapshot,
    transition: Transition,
    catalog: Catalog | None,
    cache: ScanCache = DEFAULT_CACHE,
) -> int:
    """Scan in the worker the long texts that the analysis of ``transition`` (from
    ``previous`` to ``current``) would scan and ``cache`` lacks; how many results were
    put in the cache (0 also when no worker could run them: the analysis then scans).
    :func:`prescan_lost`, then :func:`prescan_rest`."""
    done = await prescan_lost(previous, transition, catalog, cache)
    return 0 if done is None else done + await prescan_rest(previous, current, transition, catalog, cache)


def _lost(transition: Transition) -> list[int]:
    return [] if transition.kind == "reset" else [i for i in transition.lost_region if i >= 0]


async def prescan_lost(
    previous: Snapshot, transition: Transition, catalog: Catalog | None, cache: ScanCache = DEFAULT_CACHE
) -> int | None:
    """The long texts of the lost messages (all the quick path reads) scanned in the
    worker; how many results were put in ``cache``, ``None`` when no worker could run
    them. Only the lost messages are read."""
    lost = _lost(transition)
    if not lost:
        return 0
    await prenote_lost(previous, transition, cache)
    return await _scan(long_scans(previous, catalog, cache=cache, min_chars=LONG_TEXT, only=lost), catalog, cache)


async def prenote_lost(previous: Snapshot, transition: Transition, cache: ScanCache = DEFAULT_CACHE) -> int:
    """Whether each lost message with a long text holds the gate's note
    (:func:`proxy.core.notes.holds_note`, which the analysis asks), found here a slice
    at a time — the loop serves other work between slices — and put in ``cache``; how
    many answers were put there."""
    done = 0
    for i in _lost(transition):
        if i >= len(previous.messages):
            continue
        m = previous.messages[i]
        key = note_key(m)
        # a long message as the identifier prescan defines it, asked of the lost message
        # only (the history's remembered set missed on every replaced reply: its previous
        # history is no prefix of the next one's); the others are searched where the
        # analysis asks, at once
        if key is None or not is_long(m, LONG_TEXT) or cache.get(key) is not None:
            continue
        search = note_search(m)
        while True:
            try:
                next(search)
            except StopIteration as end:
                cache.put(key, bool(end.value))
                break
            await asyncio.sleep(0)
        done += 1
    return done


async def prescan_rest(
    previous: Snapshot, current: Snapshot, transition: Transition, catalog: Catalog | None, cache: ScanCache = DEFAULT_CACHE
) -> int:
    """When the lost messages hold values (only then may the whole analysis run), the
    long texts of every message of both histories scanned in the worker (after
    :func:`prescan_lost`); how many results were put in ``cache``."""
    lost = _lost(transition)
    if not lost:
        return 0
    if not any(long_messages(s.digests, s.messages, LONG_TEXT) for s in (previous, current)):
        return 0  # no long text in either history (told by their last requests' and new messages)
    if not extract_messages(previous, lost, catalog, cache=cache):
        return 0  # nothing in the lost messages to look for: the quick path settles it
    done = 0
    for snap in (previous, current):
        more = await _scan(long_scans(snap, catalog, cache=cache, min_chars=LONG_TEXT), catalog, cache)
        if more is None:
            break
        done += more
    return done


async def _scan(jobs: list[tuple[object, str, str]], catalog: Catalog | None, cache: ScanCache) -> int | None:
    """Each job's scan run in the worker and put in ``cache``; how many, ``None`` when
    the worker could not run one."""
    # the default catalogue is loaded by the worker itself (not sent: ~150 KB pickled)
    sent = None if catalog is None or catalog is Catalog.load_default() else catalog
    done = 0
    for key, text, ctx in jobs:
        if cache.get(key) is not None:  # scanned meanwhile (the same text twice)
            continue
        matches = await offload.run(scan_text, text, sent, ctx)
        if matches is None:
            return None
        cache.put(key, matches)
        done += 1
    return done
