"""Closed-loop load for :mod:`bench.replicas` (``--load closed``): each agent sends its
next request as soon as its last one was answered, on its own keep-alive connection,
with no barrier between agents; the targets are measured one after another, each
followed by a drain.

Why beside the rounds (``--load rounds``, every agent's request at once, then a 25 ms
pause): a server that defers work past its responses — the sole SQLite store commits
its batch ``FLUSH_DELAY`` (0.25 s) after its first write, on its own thread — does it
after its round and its pause, i.e. in another target's round, on the same two cores.
The rounds then count neither that work's time nor its CPU for the server that defers
it, and charge its time to whichever target runs next. Here every block of a target
is long enough to hold its deferred work (all but the last batch's), and its CPU is
counted from the block's start to the end of a drain of ``drain`` seconds after its
last response (no other target runs meanwhile); requests per second are the block's
requests over the block's time. The round barrier also idles a worker whenever the
other one has the round's last request; a closed loop measures what the servers sustain.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
from collections.abc import Callable
from typing import Any

from bench.load import Agent
from bench.wire import Connection

__all__ = ["EncodedAgent", "closed_blocks", "exchange"]


class EncodedAgent(Agent):
    """:class:`bench.load.Agent` whose request bodies are built from the history's
    messages encoded once each (the same bytes as ``Agent.next_body``), so the client
    spends microseconds, not a history's ``json.dumps``, between a reply and the next
    request."""

    _HEAD = b'{"model": "gpt-4o", "messages": ['

    def __init__(self, seed: int, size: int) -> None:
        super().__init__(seed, size)
        self._encoded: list[bytes] = []

    def next_body(self) -> bytes:
        self.grow()
        self._encoded += [json.dumps(m).encode() for m in self.messages[len(self._encoded) :]]
        return self._HEAD + b", ".join(self._encoded) + b"]}"


async def exchange(c: Connection, agent: Agent, body: bytes, what: str = "") -> float:
    """Send ``agent``'s request ``body`` on ``c``, give it the reply; its seconds
    (raises on a status other than 200)."""
    t0 = time.perf_counter()
    status, data = await c.post("/v1/chat/completions", body)
    dt = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"{what}: HTTP {status}: {data[:200]!r}")
    agent.take(data)
    return dt


async def closed_blocks(targets: dict[str, str], cpu: dict[str, dict[str, list[int]]], agents: int,
                        requests: int, warmup: int, size: int, seed: int, *, drain: float,
                        cpu_of: Callable[[list[int]], float],
                        counter: Any = None) -> dict[str, dict[str, Any]]:
    """Per target (in a shuffled order): ``warmup`` requests per agent, a drain, then
    the measured block of ``requests`` requests per agent in a closed loop, then a
    drain. Returns per target what :func:`bench.replicas.lean_rounds` does: latencies,
    ``busy`` (the block's time), CPU seconds per group of processes (``cpu[name]``;
    ``client``: this process) from the block's start to the drain's end, and for a
    Redis target the commands ``counter`` counted over the same span (``cmds``)."""
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    out: dict[str, dict[str, Any]] = {name: {"lat": [], "busy": 0.0, "cpu": {}, "cmds": {}} for name in targets}
    order = list(targets)
    random.Random(seed).shuffle(order)
    for name in order:
        host, _, port = targets[name].removeprefix("http://").partition(":")
        pop = [EncodedAgent(seed * 1000 + a, size) for a in range(agents)]
        conns = [Connection(host, int(port), headers) for _ in range(agents)]
        lat: list[float] = []

        async def loop(c: Connection, agent: EncodedAgent, n: int, into: list[float] | None, name: str = name) -> None:
            for _ in range(n):
                dt = await exchange(c, agent, agent.next_body(), name)
                if into is not None:
                    into.append(dt)

        try:
            await asyncio.gather(*[loop(c, a, warmup, None) for c, a in zip(conns, pop, strict=True)])
            await asyncio.sleep(drain)  # the warm-up's deferred work lands before the block
            gc.collect()
            gc.disable()  # the client's own GC pauses would land on whichever request is in flight
            try:
                groups = cpu[name]
                counted = counter is not None and name.startswith("redis")
                r0 = counter.snapshot() if counted else {}
                c0 = {g: cpu_of(p) for g, p in groups.items()}
                me0 = time.process_time()
                t0 = time.perf_counter()
                await asyncio.gather(*[loop(c, a, requests, lat) for c, a in zip(conns, pop, strict=True)])
                busy = time.perf_counter() - t0
                await asyncio.sleep(drain)  # its deferred work is counted as its own
                o = out[name]
                o["lat"], o["busy"] = lat, busy
                o["cpu"] = {g: cpu_of(p) - c0[g] for g, p in groups.items()}
                o["cpu"]["client"] = time.process_time() - me0
                if counted:
                    o["cmds"] = counter.delta(r0, counter.snapshot())
            finally:
                gc.enable()
        finally:
            for c in conns:
                c.close()
    return out
