"""CPU priorities of the server's background work (issue 16).

The event loop shares its core with the worker processes (:mod:`proxy.state.offload`)
and its process with the store's threads. Whatever of that work is runnable when the
loop wakes up for another tenant's socket must step aside at once:

- :func:`idle_policy`: a worker process runs under ``SCHED_IDLE`` (Linux): the
  scheduler preempts it as soon as any ordinary thread on its core wakes up, where a
  niced ordinary task may first finish its time slice (a millisecond or more, at every
  one of a small request's wake-ups);
- :func:`lower_priority`: a thread of the server runs some steps nicer than the loop
  (Linux, where a thread's nice value is its own);
- :func:`background_pool`: a thread pool whose threads do so from their start — for
  a large request's own steps (the loop's default executor: ``asyncio.to_thread``) and
  copying large bodies into shared memory: on a core the loop shares with them, a niced
  thread that is runnable yields to the loop's wake-ups instead of taking turns with it.

Threads a request waits on while nothing else is runnable — the stores' readers, the
shared stores' commits — keep the loop's priority: niced, they would only be slower,
behind the loop's other requests, for the same work. So does the sole SQLite store's
writer, although no answer waits for it: niced, it fell behind a saturated loop and its
backlog (rows held in memory until written) grew without a bound.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["BACKGROUND_NICE", "background_pool", "idle_policy", "lower_priority"]

#: How much nicer than the event loop's thread the server's background threads run.
BACKGROUND_NICE = 10


def lower_priority(nice: int = BACKGROUND_NICE) -> None:
    """Run the calling thread ``nice`` steps nicer (Linux, where a thread's nice value
    is its own; elsewhere, or for the main thread, nothing). On a core shared with the
    event loop, a thread counting tokens of a 10 MB text without the GIL (tiktoken)
    otherwise gets as much of the core as the loop: every other tenant's request then
    takes twice as long or more. Lowered, the loop's wake-ups preempt it."""
    if not nice or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    if tid == os.getpid():  # the main thread (the loop's, mostly): never
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))


def background_pool(name: str, workers: int | None = None) -> ThreadPoolExecutor:
    """A thread pool (threads named ``name``) whose threads run
    :data:`BACKGROUND_NICE` steps nicer than the event loop (see the module docstring)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=lower_priority)


def idle_policy(pid: int = 0) -> bool:
    """Put thread ``pid`` (0: the calling one; a process's id: its main thread, whose
    policy the threads it starts afterwards inherit) under ``SCHED_IDLE``; whether it
    now runs under it (``False`` where the policy is missing or refused: it keeps its
    niceness)."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return False
    try:
        os.sched_setscheduler(pid, policy, os.sched_param(0))
    except OSError:
        return False
    return True
