"""``compaction-gate serve --workers 2`` (a real supervisor and its worker processes on
one port): the supervisor hands connections to both workers in turn, they share the state
(SQLite in WAL mode, or a real ``redis-server``) so the agent traffic meets what one
process would answer, ``/metrics`` adds up every worker's counters whichever worker
answers the scrape, the dashboard's API lists every worker's conversations, and a
worker killed with SIGKILL is started again without the totals going back."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.agent_traffic import (
    assert_same,
    build_traffic,
    played,
    responder,
    single_process,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer, require_redis
from tests.support.serve_process import start_serve

CONVERSATIONS = 10
REQUESTS = re.compile(r'^compaction_gate_requests_total\{route="([^"]+)",status="(\d+)"\} (\S+)$', re.M)


def _config(fake: FakeUpstream, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": {"log_level": "info", "shutdown_grace_seconds": 1, "workers": 2},
        "upstreams": [
            {"name": "openai", "base_url": fake.url + "/v1", "dialect": "openai"},
            {"name": "anthropic", "base_url": fake.url, "dialect": "anthropic"},
        ],
        "state": state,
    }


async def _fresh_get(url: str) -> tuple[int, Any]:
    """One GET on a connection of its own (so the kernel picks the worker anew)."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s,
        s.get(url) as resp,
    ):
        body = await resp.json() if resp.content_type == "application/json" else await resp.text()
        return resp.status, body


async def _pids(url: str, want: int, timeout: float = 60.0, *, besides: int = 0) -> set[int]:
    """The workers' pids seen at ``/healthz``, once ``want`` different ones (not
    ``besides``) answered."""
    seen: set[int] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            status, body = await _fresh_get(url + "/healthz")
            if status == 200 and int(body["pid"]) != besides:
                seen.add(int(body["pid"]))
        except aiohttp.ClientError:
            pass
        if len(seen) >= want:
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"only {len(seen)} worker(s) answered: {seen}")


def _proxied(metrics: str) -> float:
    """Requests counted on the proxied routes (not the gate's own endpoints)."""
    return sum(float(n) for route, _, n in REQUESTS.findall(metrics) if route.startswith("/v1/"))


@pytest.fixture
async def fake() -> Any:
    f = FakeUpstream(responder(build_traffic(CONVERSATIONS, sessions=True)))
    await f.start()
    yield f
    await f.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_two_workers_share_the_port_the_state_and_the_metrics(tmp_path: Path, fake: FakeUpstream, backend: str) -> None:
    # every conversation names itself: processes racing by milliseconds must not decide
    # which conversation a nameless continuation belongs to (see build_traffic)
    traffic = build_traffic(CONVERSATIONS, sessions=True)
    single = await single_process(fake, traffic)
    redis: RedisServer | None = None
    if backend == "redis":
        require_redis()
        redis = RedisServer(tmp_path / "redis").start()
        state = {"backend": "redis", "url": redis.url}
    else:
        state = {"backend": "sqlite", "path": str(tmp_path / "state.sqlite3")}
    try:
        gate = await start_serve(_config(fake, state), tmp_path)
    except BaseException:
        if redis is not None:
            redis.stop()
        raise
    try:
        pids = await _pids(gate.url, 2)
        assert gate.proc.pid not in pids  # the supervisor does not serve
        # the traffic, a new connection per request: both workers answer parts of every
        # conversation, and every request meets what one process answers
        workers = await played([gate.url], fake, traffic, fresh_connections=True)
        assert_same(single, workers)
        # whichever worker answers the scrape counts every worker's requests
        scraped = [await _fresh_get(gate.url + "/metrics") for _ in range(6)]
        assert {_proxied(body) for _, body in scraped} == {float(len(traffic))}
        # and the dashboard's API lists every conversation, through either worker
        conversations = {c for o in single[0] for c in [o.conversation]}
        for _ in range(4):
            status, body = await _fresh_get(gate.url + "/gate/conversations")
            assert status == 200 and body["count"] == len(conversations)
        # a worker killed with SIGKILL is started again; the totals do not go back
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        again = await _pids(gate.url, 2, besides=victim)
        assert len(again & pids) == 1  # the other worker, and the new one
        status, body = await _fresh_get(gate.url + "/metrics")
        assert status == 200 and _proxied(body) == float(len(traffic))
        assert await gate.stop() == 0
        assert any(b"worker" in line and b"starting it again" in line for line in gate.stderr)
    finally:
        if gate.proc.returncode is None:
            await gate.stop()
        if redis is not None:
            redis.stop()


async def test_workers_refuse_the_memory_backend(tmp_path: Path, fake: FakeUpstream) -> None:
    path = tmp_path / "config.yaml"
    import yaml

    path.write_text(yaml.safe_dump(_config(fake, {"backend": "memory"})))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(path), "--port", "0",
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"memory cannot be shared by several workers" in err


async def test_keep_alive_connections_are_spread_evenly_over_the_workers(tmp_path: Path, fake: FakeUpstream) -> None:
    """Agents hold one keep-alive connection each for their whole run, so how
    connections are spread is how the load is: the supervisor hands them to the workers
    in turn (random hashing would put 6 of 8 on one worker about a third of the time),
    and a connection stays with its worker for every request it carries."""
    state = {"backend": "sqlite", "path": str(tmp_path / "state.sqlite3")}
    gate = await start_serve(_config(fake, state), tmp_path)
    try:
        await _pids(gate.url, 2)
        sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(8)]
        try:
            first: list[int] = []
            for s in sessions:  # one connection each, opened one after the other
                async with s.get(gate.url + "/healthz") as resp:
                    first.append(int((await resp.json())["pid"]))
            counts = {pid: first.count(pid) for pid in set(first)}
            assert sorted(counts.values()) == [4, 4], counts
            for _ in range(3):  # the same connections again: the same workers
                again = []
                for s in sessions:
                    async with s.get(gate.url + "/healthz") as resp:
                        again.append(int((await resp.json())["pid"]))
                assert again == first
        finally:
            for s in sessions:
                await s.close()
        assert await gate.stop() == 0
    finally:
        if gate.proc.returncode is None:
            await gate.stop()
