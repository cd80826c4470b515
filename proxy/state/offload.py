"""Work on very long texts in processes of their own (issue 16).

Redacting a 10 MB text before it is stored is about a second of pure-Python scanning
(:func:`proxy.core.redaction.secret_spans`). Run in the store's writer thread, that
thread held the GIL for 40-65% of the time while four such requests were in flight, and
every wake-up of the event loop — every other tenant's request — queued behind it. A
text longer than :data:`OFFLOAD_CHARS` is therefore scanned by a worker process
(``concurrent.futures.ProcessPoolExecutor``, started with the server
(:func:`prestart`) or on first use, at a lower CPU priority than the server: storing is work behind the requests), which sends back only
the spans found; the caller, blocked without the GIL meanwhile, applies them.
Shorter texts, and any failure of the worker (it is then restarted on the next call),
are scanned where they are: the result is the same either way.

The event loop hands a second worker what it would otherwise do in one long C call
holding the GIL — decoding a 10 MB JSON body (:func:`run`): awaited, so the loop serves
everyone else meanwhile; a worker that cannot start or breaks leaves the work to the
caller (:func:`run` then returns ``None``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from proxy.core.redaction import secret_spans
from proxy.state import sharedmem
from proxy.state.priority import BACKGROUND_NICE, idle_policy, lower_priority

__all__ = ["BACKGROUND_NICE", "OFFLOAD_CHARS", "can_offload", "in_store_worker", "lower_priority", "prestart", "run", "shutdown", "spans_of", "submit"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Texts longer than this many characters are scanned in the worker process.
OFFLOAD_CHARS = 1 << 20
#: The store's worker's niceness above the server's.
WORKER_NICE = 10
#: The request path's worker's (a big request's own latency waits for it).
REQUEST_NICE = 5
#: Worker processes run under ``SCHED_IDLE`` where there is one
#: (:func:`~proxy.state.priority.idle_policy`): the loop's every wake-up preempts them.
IDLE = True


class _Worker:
    """One worker process, started on first use (or by :func:`prestart`), restarted
    after a failure."""

    def __init__(self, nice: int, idle: bool = IDLE) -> None:
        self.nice = nice
        self.idle = idle
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._lowered: set[int] = set()

    def executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn: never fork a process that runs an event loop and threads
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_init,
                    initargs=(_target_nice(self.nice), os.getpid(), self.idle),
                )
            return self._pool

    def submit(self, fn: Callable[..., T], *args: Any, out: int = 0) -> Future[T]:
        """``fn(*args)`` in the worker; a process the pool has just started is lowered
        to the worker's priority from here, at once: its own initializer runs only after
        it has imported the server's main module (a second of CPU, otherwise taken at the
        server's priority on the loop's core), and put under ``SCHED_IDLE`` (:data:`IDLE`):
        a niced ordinary task may finish its time slice before a woken loop gets the
        core back; an idle-policy one is preempted at once (``bench.stall``, two runs
        each: the small request's loaded p99 22-48 ms with the slice yields of
        :mod:`proxy.server.sliced` alone, 22-26 ms with this added). Long arguments go through shared memory
        (:mod:`proxy.state.sharedmem`), and so does the long last item of ``fn``'s result
        when ``out`` gives its greatest size in bytes."""
        pool = self.executor()
        fut = sharedmem.submit(pool, fn, args, out)
        processes = getattr(pool, "_processes", None) or {}
        for pid in list(processes):
            if pid not in self._lowered:
                self._lowered.add(pid)
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, pid, _target_nice(self.nice))
                if self.idle:
                    idle_policy(pid)
        return fut

    def discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """At exit: the worker ends now (what it was doing belongs to a server that is
        done), and the pool is joined, so that its queues' semaphores are released
        before the interpreter goes (else ``multiprocessing``'s resource tracker
        prints a plaintext warning about them on stderr, among the JSON logs)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                proc.terminate()
        with contextlib.suppress(Exception):
            pool.shutdown(wait=True, cancel_futures=True)


def _target_nice(nice: int) -> int:
    """The niceness a worker runs at: ``nice`` steps above this process's."""
    return min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)


_STORE = _Worker(WORKER_NICE)
_REQUEST = _Worker(REQUEST_NICE)


def _worker_init(nice: int, server: int, idle: bool = False) -> None:
    """In the worker: its lower priority (``nice``, absolute: the server may have set it
    already), and an exit as soon as the ``server`` process is gone (a server killed by
    a signal leaves no worker behind — also one killed while this worker was still
    importing, before this ran: then the worker's parent is another process already)."""
    with contextlib.suppress(OSError):  # not permitted: run at the same priority
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    if idle:
        idle_policy()

    def watch() -> None:
        while os.getppid() == server:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="cg-offload-orphan", daemon=True).start()


def _can_spawn() -> bool:
    """Whether a spawned worker can start: not from a daemonic ``multiprocessing``
    process (which may have no children), and the worker re-imports the main module,
    which must then be a module or an existing file (not ``python -`` reading stdin)."""
    if multiprocessing.current_process().daemon:
        return False
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return getattr(main, "__spec__", None) is not None or path is None or os.path.exists(path)


def can_offload() -> bool:
    """Whether a worker process could be used here (see :func:`_can_spawn`)."""
    return _can_spawn()


def spans_of(text: str) -> list[tuple[int, int, str, str]]:
    """:func:`~proxy.core.redaction.secret_spans` of ``text`` with the default detectors:
    in the worker process for a text over :data:`OFFLOAD_CHARS`, else here. Blocking
    (call it from a worker thread, as the stores' writers do)."""
    if len(text) <= OFFLOAD_CHARS:
        return secret_spans(text)
    return in_store_worker(secret_spans, text)


def in_store_worker(fn: Callable[..., T], *args: Any, out: int = 0) -> T:
    """``fn(*args)`` in the store's worker process, or here when no worker can run it
    (or it broke: it is restarted on the next call). ``fn`` must be pure — the result is
    the same either way — and must not raise. ``out``: see :meth:`_Worker.submit` (the
    long last item then comes back as a ``bytearray``). Blocking: call it from a writer
    thread, which waits without the GIL."""
    if not _can_spawn():
        return fn(*args)
    pool = _STORE.executor()
    try:
        return _STORE.submit(fn, *args, out=out).result()
    except Exception as exc:  # noqa: BLE001 - a broken or refused worker: run it here
        log.warning("store worker unavailable (%s); working in-process", type(exc).__name__)
        _STORE.discard(pool)
        return fn(*args)


def submit(fn: Callable[..., T], *args: Any, out: int = 0) -> Future[T] | None:
    """``fn(*args)`` in the request path's worker process (its future, whose exception
    is the worker's failure: ``fn`` must hand its own errors back as values); ``None``
    when no worker can run it here. A broken worker is restarted on the next call.
    ``out``: see :meth:`_Worker.submit`."""
    if not _can_spawn():
        return None
    pool = _REQUEST.executor()
    try:
        fut = _REQUEST.submit(fn, *args, out=out)
    except (BrokenProcessPool, OSError, RuntimeError) as exc:
        _broken(pool, exc)
        return None

    def failed(f: Future[T]) -> None:
        if not f.cancelled() and f.exception() is not None:
            _broken(pool, f.exception())

    fut.add_done_callback(failed)
    return fut


def _broken(pool: ProcessPoolExecutor, exc: BaseException | None) -> None:
    log.warning("request worker unavailable (%s); working in-process", type(exc).__name__)
    _REQUEST.discard(pool)


async def run(fn: Callable[..., T], *args: Any) -> T | None:
    """``fn(*args)`` in the request path's worker process, awaited (:func:`submit`);
    ``None`` when no worker can run it, and the caller does the work itself."""
    fut = submit(fn, *args)
    if fut is None:
        return None
    try:
        return await asyncio.wrap_future(fut)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - the worker failed (logged by submit's callback)
        return None


def _ready() -> bool:
    return True


def prestart() -> None:
    """Start both workers now, in the background (a server calls it as it starts): a
    worker's start — a new interpreter importing the server's modules, about a second
    of CPU — then never lands on the first large request, nor on every other tenant's
    requests sharing the core meanwhile (``bench.stall``: 4-9 s for a small request in
    the first loaded round). Nothing when no worker can run here."""
    if not _can_spawn():
        return
    for worker in (_STORE, _REQUEST):
        with contextlib.suppress(Exception):  # a worker that cannot start: used in-process later
            worker.submit(_ready)


@atexit.register
def shutdown() -> None:
    """End both workers and release their pools (at exit; call it before an
    ``os._exit``, which runs no exit handler)."""
    _STORE.shutdown()
    _REQUEST.shutdown()
