"""A large body is compared with the tenant's cached ones off the event loop (issue 16):
``BodyCache``'s prefix comparisons of a resent 10 MB history were ~4 ms of the loop per
request; now the plan is made in a thread (where the long compares release the GIL,
``proxy.core.samebytes``) and the value is still exactly ``json.loads``'."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from proxy.core import jsonbody
from proxy.core.jsonbody import BodyCache
from proxy.server import bodyparse
from proxy.state import offload

BIG = bodyparse.OFFLOAD_BYTES * 2


def _body(*texts: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}).encode()


@pytest.mark.parametrize("worker", [True, False])
def test_a_large_bodys_prefixes_are_compared_off_the_loop(monkeypatch: pytest.MonkeyPatch, worker: bool) -> None:
    compared: list[tuple[bool, int]] = []  # (on the loop thread, bytes compared)
    real = jsonbody.agree

    def agree(a: bytes, b: bytes, start: int, end: int) -> bool:
        compared.append((threading.current_thread() is loop_thread, end - start))
        return real(a, b, start, end)

    monkeypatch.setattr(jsonbody, "agree", agree)
    if not worker or not offload.can_offload():  # the worker's absence: decoded on the loop
        monkeypatch.setattr(offload, "run", _no_worker)
    cache = BodyCache()
    first = _body("a" * BIG)
    resent = _body("a" * BIG, "b" * 100)  # extends the first: a short tail to decode
    forked = _body("a" * BIG + "c", "d")  # alike up to the last bytes of its first text
    loop_thread: threading.Thread | None = None

    async def go() -> list[Any]:
        nonlocal loop_thread
        loop_thread = threading.current_thread()
        return [await bodyparse.loads(cache, raw, "t") for raw in (first, resent, forked)]

    got = asyncio.run(go())
    assert got == [json.loads(first), json.loads(resent), json.loads(forked)]
    assert cache.stats.hits == 1  # the resent body reused the first's parse
    # a body's whole prefix, less the last bytes :meth:`jsonbody.BodyCache._best` compares first
    long_ones = [on_loop for on_loop, n in compared if n >= BIG - jsonbody.TAIL_CHECK]
    assert len(long_ones) >= 2  # the resent and the forked body were compared whole
    assert not any(long_ones)


async def _no_worker(*_args: Any) -> None:
    return None
