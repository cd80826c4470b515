"""Finding the secrets of a very long text in a process of its own (issue 16).

Redacting a 10 MB text before it is stored is about a second of pure-Python scanning
(:func:`proxy.core.redaction.secret_spans`). Run in the store's writer thread, that
thread held the GIL for 40-65% of the time while four such requests were in flight, and
every wake-up of the event loop — every other tenant's request — queued behind it. A
text longer than :data:`OFFLOAD_CHARS` is therefore scanned by one worker process
(``concurrent.futures.ProcessPoolExecutor``, started on first use, at a lower CPU
priority than the server: storing is work behind the requests), which sends back only
the spans found; the caller, blocked without the GIL meanwhile, applies them.
Shorter texts, and any failure of the worker (it is then restarted on the next call),
are scanned where they are: the result is the same either way.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from proxy.core.redaction import secret_spans

__all__ = ["OFFLOAD_CHARS", "spans_of"]

log = logging.getLogger(__name__)

#: Texts longer than this many characters are scanned in the worker process.
OFFLOAD_CHARS = 1 << 20
#: The worker's niceness above the server's.
WORKER_NICE = 10

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None


def _worker_init() -> None:
    """In the worker: a lower priority, and an exit as soon as the server is gone (a
    server killed by a signal leaves no worker behind)."""
    with contextlib.suppress(OSError):  # not permitted: run at the same priority
        os.nice(WORKER_NICE)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="cg-offload-orphan", daemon=True).start()


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn: never fork a process that runs an event loop and threads
            _pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_worker_init
            )
        return _pool


def _discard(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def _can_spawn() -> bool:
    """Whether a spawned worker can start: not from a daemonic ``multiprocessing``
    process (which may have no children), and the worker re-imports the main module,
    which must then be a module or an existing file (not ``python -`` reading stdin)."""
    if multiprocessing.current_process().daemon:
        return False
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return getattr(main, "__spec__", None) is not None or path is None or os.path.exists(path)


def spans_of(text: str) -> list[tuple[int, int, str, str]]:
    """:func:`~proxy.core.redaction.secret_spans` of ``text`` with the default detectors:
    in the worker process for a text over :data:`OFFLOAD_CHARS`, else here. Blocking
    (call it from a worker thread, as the stores' writers do)."""
    if len(text) <= OFFLOAD_CHARS or not _can_spawn():
        return secret_spans(text)
    pool = _executor()
    try:
        return pool.submit(secret_spans, text).result()
    except Exception as exc:  # noqa: BLE001 - a broken or refused worker: scan here
        log.warning("redaction worker unavailable (%s); scanning in-process", type(exc).__name__)
        _discard(pool)
        return secret_spans(text)


@atexit.register
def _shutdown() -> None:
    with _lock:
        pool = _pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
