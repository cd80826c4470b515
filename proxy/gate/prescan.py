"""Long texts scanned for identifiers in the request worker before a large request's
analysis (issue 16).

A request that does not simply extend its conversation (``compacted``, ``fork``: e.g. a
client sending an earlier 10 MB request again) is analysed against the history it
left, and that extracts the identifiers of the texts involved: one synchronous scan of
each long text, on the event loop — ``bench.stall`` with ``--callbacks`` caught 505 ms
for one 10 MB text and 20-28 ms a request for others, every other tenant's callbacks
waiting behind them. :func:`prescan` runs those scans first, in the request path's
worker process (:func:`proxy.state.offload.run`), and puts each result in the scan
cache under the key extraction looks up (:func:`proxy.core.identifiers.extract.long_scans`):
the analysis then finds every long text scanned, with the same matches. Where no
worker can run (or it fails), the analysis scans on the loop as before.
"""

from __future__ import annotations

from proxy.core.identifiers.catalog import Catalog
from proxy.core.identifiers.extract import DEFAULT_CACHE, ScanCache, long_scans, scan_text
from proxy.gate.observation import Observation
from proxy.state import offload

__all__ = ["ANALYSED", "LONG_TEXT", "prescan"]

#: Texts from this many characters on are scanned in the worker.
LONG_TEXT = 1 << 20
#: The relations whose requests are analysed against the history they change.
ANALYSED = frozenset({"compacted", "fork"})


async def prescan(obs: Observation, catalog: Catalog | None, cache: ScanCache = DEFAULT_CACHE) -> int:
    """Scan the long texts of ``obs``' previous history and of the request that the
    scan cache lacks, in the worker (only for a request of :data:`ANALYSED`); how many
    results were put in the cache."""
    if obs.previous is None or obs.relation not in ANALYSED:
        return 0
    # the default catalogue is loaded by the worker itself (not sent: ~150 KB pickled)
    sent = None if catalog is None or catalog is Catalog.load_default() else catalog
    done = 0
    for snap in (obs.previous, obs.current):
        for key, text, ctx in long_scans(snap, catalog, cache=cache, min_chars=LONG_TEXT):
            if cache.get(key) is not None:  # scanned meanwhile (the same text twice)
                continue
            matches = await offload.run(scan_text, text, sent, ctx)
            if matches is None:  # no worker: the analysis scans it
                return done
            cache.put(key, matches)
            done += 1
    return done
