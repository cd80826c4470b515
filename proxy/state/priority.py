"""CPU priorities of the server's background work (issue 16).

The event loop shares its core with the worker processes (:mod:`proxy.state.offload`)
and its process with the store's threads. Whatever of that work is runnable when the
loop wakes up for another tenant's socket must step aside at once:

- :func:`idle_policy`: a worker process runs under ``SCHED_IDLE`` (Linux): the
  scheduler preempts it as soon as any ordinary thread on its core wakes up, where a
  niced ordinary task may first finish its time slice (a millisecond or more, at every
  one of a small request's wake-ups);
- :func:`lower_priority`: a thread of the server runs some steps nicer than the loop
  (Linux, where a thread's nice value is its own).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

__all__ = ["BACKGROUND_NICE", "idle_policy", "lower_priority"]

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
