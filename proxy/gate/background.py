"""Blocking loads run in daemon threads (tokenizers, litellm), and the process exit that
waits for them.

:func:`in_daemon_thread` runs a blocking function in a new daemon thread and hands its
result to the running event loop: unlike the loop's default executor, such a thread does
not hold up the server's shutdown (importing litellm takes seconds). At interpreter exit
the threads still running are joined (bounded, :func:`_finish_background`), and
:func:`background_busy` tells ``serve`` whether it should leave at once instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from proxy.state.offload import lower_priority

__all__ = ["BACKGROUND_EXIT_WAIT", "background_busy", "in_daemon_thread", "in_loop"]


#: Background loads still running (see :func:`_finish_background`).
_BACKGROUND: set[threading.Thread] = set()
#: Longest wait for them at interpreter exit (seconds).
BACKGROUND_EXIT_WAIT = 30.0


def _finish_background() -> None:
    """At interpreter exit, before finalisation: let background loads that are still
    running finish (bounded). A daemon thread still importing extension modules while
    the interpreter is torn down can abort the whole process (SIGABRT) on its way out;
    this only delays an exit that comes within seconds of start-up."""
    deadline = time.monotonic() + BACKGROUND_EXIT_WAIT
    for t in list(_BACKGROUND):
        t.join(max(0.0, deadline - time.monotonic()))


atexit.register(_finish_background)


def background_busy() -> bool:
    """Whether a background load (tokenizers, litellm) is still running: a process that
    wants to exit at once (``serve`` after its shutdown) leaves with ``os._exit`` rather
    than wait for it in :func:`_finish_background`."""
    return any(t.is_alive() for t in list(_BACKGROUND))


def in_loop() -> bool:
    """Whether an event loop runs here (work made off it can be awaited, or waited for)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def in_daemon_thread(fn: Callable[..., Any], *args: Any, nice: int = 0) -> asyncio.Future[Any]:
    """Run blocking ``fn(*args)`` in a new daemon thread (``nice`` steps nicer than the
    event loop's thread: work behind the requests, such as counting tokens; see
    :func:`proxy.state.offload.lower_priority`); the returned future (of the
    running loop) gets its result. Unlike the loop's default executor, the thread does
    not hold up the server's shutdown (importing litellm takes seconds); the process's
    exit waits for it (:func:`_finish_background`). Never awaiting the future is fine;
    a result arriving after the loop closed is dropped."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def deliver(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def run() -> None:
        try:
            if nice:
                lower_priority(nice)
            outcome = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            outcome = (False, exc)
        finally:
            _BACKGROUND.discard(thread)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(deliver, *outcome)

    fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "not retrieved"
    thread = threading.Thread(target=run, name=f"cg-{getattr(fn, '__name__', 'warm')}", daemon=True)
    _BACKGROUND.add(thread)
    thread.start()
    return fut
