"""The server's background work steps aside for the event loop (issue 16):
``SCHED_IDLE`` for a worker thread or process, a higher niceness for a thread."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from proxy.state import priority
from tests.support.scheduling import ordinary_scheduling

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")


def _in_thread(fn: object) -> object:
    with ThreadPoolExecutor(max_workers=1) as ex:
        return ex.submit(fn).result(timeout=30)  # type: ignore[arg-type]


@linux
@ordinary_scheduling
def test_idle_policy_applies_to_the_calling_thread_only() -> None:
    def run() -> tuple[bool, int]:
        return priority.idle_policy(), os.sched_getscheduler(0)

    ok, policy = _in_thread(run)  # type: ignore[misc]
    assert ok is True
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread untouched


@linux
@ordinary_scheduling
def test_idle_policy_of_another_thread_by_its_id() -> None:
    started, stop = threading.Event(), threading.Event()
    tid: list[int] = []

    def run() -> None:
        tid.append(threading.get_native_id())
        started.set()
        stop.wait(30)

    t = threading.Thread(target=run)
    t.start()
    try:
        assert started.wait(30)
        assert os.sched_getscheduler(tid[0]) == os.SCHED_OTHER
        assert priority.idle_policy(tid[0]) is True
        assert os.sched_getscheduler(tid[0]) == os.SCHED_IDLE
    finally:
        stop.set()
        t.join()


def test_idle_policy_refused_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError("no")

    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    monkeypatch.setattr(os, "SCHED_IDLE", 5, raising=False)
    assert priority.idle_policy() is False
    monkeypatch.delattr(os, "SCHED_IDLE")
    assert priority.idle_policy() is False


@linux
def test_lower_priority_lowers_a_thread_and_never_the_main_thread() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)

    def run() -> int:
        priority.lower_priority(3)
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert _in_thread(run) == min(19, base + 3)
    priority.lower_priority(3)  # the main thread: unchanged
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux
def test_a_background_pool_runs_niced_and_leaves_the_caller_alone() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    pool = priority.background_pool("cg-test-bg", 2)
    try:
        seen = {pool.submit(lambda: (threading.current_thread().name, _own_nice())).result(timeout=30) for _ in range(4)}
    finally:
        pool.shutdown()
    assert {nice for _, nice in seen} == {min(19, base + priority.BACKGROUND_NICE)}
    assert all(name.startswith("cg-test-bg") for name, _ in seen)
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


@linux
async def test_the_sole_stores_threads_keep_the_loops_priority(tmp_path: object) -> None:
    # its reader: a request waits for it; its writer: niced, it fell behind a saturated
    # loop and its backlog of rows in memory grew without a bound (bench.memory)
    from pathlib import Path

    from proxy.state.sqlite import SQLiteStore

    base = os.getpriority(os.PRIO_PROCESS, 0)
    store = SQLiteStore(Path(str(tmp_path)) / "state.sqlite3")
    await store.open()
    try:
        writer = store._exec.submit(_own_nice).result(timeout=30)  # noqa: SLF001 - the writer's thread
        reader = store._reader.submit(_own_nice).result(timeout=30)  # noqa: SLF001 - the reader's thread
    finally:
        await store.close()
    assert writer == reader == base


@linux
async def test_a_served_loops_default_executor_is_niced_once() -> None:
    import asyncio

    from aiohttp import web

    from proxy.server.runner import start_server

    base = os.getpriority(os.PRIO_PROCESS, 0)
    loop = asyncio.get_running_loop()
    executors = []
    for _ in range(2):  # a second server on the same loop keeps the same pool
        server = await start_server(web.Application(), "127.0.0.1", 0)
        try:
            nice = await asyncio.to_thread(_own_nice)
            name = await asyncio.to_thread(lambda: threading.current_thread().name)
            executors.append(loop._default_executor)  # type: ignore[attr-defined]  # noqa: SLF001
        finally:
            await server.stop()
        assert nice == min(19, base + priority.BACKGROUND_NICE)
        assert name.startswith("cg-background")
    assert executors[0] is executors[1] is not None
    assert os.getpriority(os.PRIO_PROCESS, 0) == base
