"""A very long text's secrets are found in a worker process (issue 16): the same spans,
so the same redacted text, as scanning it in-process."""

from __future__ import annotations

from proxy.core.redaction import redact_secrets, secret_spans
from proxy.state import offload
from proxy.state.records import stored_text
from tests.support.scheduling import ordinary_scheduling


def test_a_text_over_the_threshold_is_scanned_in_the_worker_with_the_same_result() -> None:
    filler = "lorem ipsum dolor " * ((offload.OFFLOAD_CHARS // 18) + 10)
    secrets = ["ghp_" + "a1B2" * 9, "sk-live-" + "Zq9x" * 8, "AKIA" + "Q" * 16]
    text = secrets[0] + " " + filler[: len(filler) // 2] + secrets[1] + " " + filler + " " + secrets[2]
    assert len(text) > offload.OFFLOAD_CHARS
    spans = offload.spans_of(text)
    assert offload._STORE._pool is not None  # it went to the worker process
    assert spans == secret_spans(text)
    stored = stored_text(text)
    assert stored == redact_secrets(text)
    assert secrets[0] not in stored and stored.startswith("[redacted:github_token]")
    short = "token " + secrets[0]
    assert offload.spans_of(short) == secret_spans(short)


def _worker_pids(worker: offload._Worker) -> list[int]:
    pool = worker._pool
    return list(getattr(pool, "_processes", None) or {}) if pool is not None else []


@ordinary_scheduling
def test_prestart_starts_both_workers_at_their_lower_priority() -> None:
    import os

    base = os.getpriority(os.PRIO_PROCESS, 0)
    offload.prestart()
    for worker, nice in ((offload._STORE, offload.WORKER_NICE), (offload._REQUEST, offload.REQUEST_NICE)):
        pids = _worker_pids(worker)
        assert pids, "prestart started no worker"
        # set from here as the process starts (its imports run niced), again by its initializer
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids} == {min(19, base + nice)}
        assert worker.submit(offload._ready).result(timeout=60) is True
        assert _worker_pids(worker) == pids  # the one process, reused
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids} == {min(19, base + nice)}
        if hasattr(os, "SCHED_IDLE") and offload.IDLE:
            # and under SCHED_IDLE: any ordinary thread on its core preempts it at once
            assert {os.sched_getscheduler(pid) for pid in pids} == {os.SCHED_IDLE}
    assert os.sched_getscheduler(0) != getattr(os, "SCHED_IDLE", -1)  # never the server itself


def test_a_worker_whose_server_is_gone_before_its_initializer_ran_exits() -> None:
    """A server killed while its prestarted worker was still importing: by the time the
    worker's initializer runs its parent is another process, and it must still exit
    (it held the server's stderr open: a supervisor reading it to EOF hung)."""
    import multiprocessing
    import os
    import time
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    import pytest

    def pool(server: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=offload._worker_init,
                                   initargs=(os.getpriority(os.PRIO_PROCESS, 0), server))

    alive = pool(os.getpid())  # control: its server is this process, it works
    try:
        assert alive.submit(abs, -7).result(timeout=50) == 7
    finally:
        alive.shutdown(wait=True)
    orphan = pool(os.getpid() + 1)  # not this worker's parent: as if its server had died
    try:
        with pytest.raises(BrokenProcessPool):
            orphan.submit(time.sleep, 60).result(timeout=50)
    finally:
        orphan.shutdown(wait=False, cancel_futures=True)
