"""Continuity across replicas: the same multi-conversation agent traffic (compactions
of every kind, summarization calls, tripwires, retries, two dialects, two tenants,
streams) sent through three replicas in round-robin — a balancer in front of them —
and through one process yields the same events, verdicts and repairs for every request.

The single process keeps its state in memory (the reference: no store in the way); the
replicas share a real ``redis-server`` or one SQLite file (``--workers`` style), each
with its own cache, so every request of a conversation meets a process that did not see
the previous one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from proxy.config import ProxyConfig, StateSettings
from proxy.demo import build_gate_app, start_app
from tests.support.agent_traffic import (
    Played,
    assert_same,
    build_traffic,
    gate_config,
    played,
    responder,
    single_process,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer

CONVERSATIONS = 22


async def _replicas(config: ProxyConfig, fake: FakeUpstream, traffic: Any, n: int = 3) -> Played:
    runners: list[web.AppRunner] = []
    try:
        urls = []
        for _ in range(n):
            runner, url = await start_app(build_gate_app(config))
            runners.append(runner)
            urls.append(url)
        return await played(urls, fake, traffic)
    finally:
        for runner in runners:
            await runner.cleanup()


def _exercised(outcomes: list[Any], events: list[dict[str, Any]]) -> None:
    """The traffic meets every moment of the gate (so equality says something)."""
    kinds = {e["kind"] for e in events}
    assert {"summarization", "summary_check", "compaction", "reinject", "reinject_sticky", "tripwire"} <= kinds
    transitions = {e.get("transition") for e in events if e["kind"] == "compaction"}
    assert {"summarize", "truncate", "mask"} <= transitions, transitions
    assert {o.action for o in outcomes} >= {"none", "gate", "reinject"}
    assert sum(1 for e in events if e.get("verdict") == "destructive") >= CONVERSATIONS // 2


@pytest.fixture
async def fake() -> Any:
    f = FakeUpstream(responder(build_traffic(CONVERSATIONS)))
    await f.start()
    yield f
    await f.close()


async def test_three_redis_replicas_in_round_robin_match_one_process(tmp_path: Path, fake: FakeUpstream) -> None:
    traffic = build_traffic(CONVERSATIONS)
    single = await single_process(fake, traffic)
    _exercised(*single)
    with RedisServer(tmp_path / "redis") as redis:
        config = gate_config(fake.url, StateSettings(backend="redis", url=redis.url))
        replicas = await _replicas(config, fake, traffic)
    assert_same(single, replicas)


async def test_three_sqlite_workers_in_round_robin_match_one_process(tmp_path: Path, fake: FakeUpstream) -> None:
    traffic = build_traffic(CONVERSATIONS)
    single = await single_process(fake, traffic)
    config = gate_config(fake.url, StateSettings(backend="sqlite", path=str(tmp_path / "state.sqlite3")), workers=3)
    replicas = await _replicas(config, fake, traffic)
    assert_same(single, replicas)


async def test_one_redis_process_matches_one_memory_process(tmp_path: Path, fake: FakeUpstream) -> None:
    traffic = build_traffic(8)
    single = await single_process(fake, traffic)
    with RedisServer(tmp_path / "redis") as redis:
        config = gate_config(fake.url, StateSettings(backend="redis", url=redis.url))
        one_redis = await _replicas(dataclasses.replace(config), fake, traffic, n=1)
    assert_same(single, one_redis)
