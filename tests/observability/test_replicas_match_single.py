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

from proxy.config import ProxyConfig, ServerSettings, StateSettings, Upstream
from proxy.demo import build_gate_app, start_app
from proxy.replay import normalise_events
from tests.support.agent_traffic import build_traffic, events_of, responder, send
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer

CONVERSATIONS = 22


def _config(upstream: str, state: StateSettings, workers: int = 1) -> ProxyConfig:
    return ProxyConfig(
        server=ServerSettings(host="127.0.0.1", port=0, log_level="warning", workers=workers),
        upstreams=(
            Upstream(name="openai", base_url=upstream + "/v1", dialect="openai"),
            Upstream(name="anthropic", base_url=upstream, dialect="anthropic"),
        ),
        state=state,
        policy="default",
    )


async def _run(urls: list[str], fake: FakeUpstream, traffic: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    fake.requests.clear()
    outcomes, cids = await send(urls, traffic, fake)
    events = normalise_events(await events_of(urls[0], cids))
    return outcomes, events


async def _single(fake: FakeUpstream, traffic: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    runner, url = await start_app(build_gate_app(_config(fake.url, StateSettings(backend="memory"))))
    try:
        return await _run([url], fake, traffic)
    finally:
        await runner.cleanup()


async def _replicas(config: ProxyConfig, fake: FakeUpstream, traffic: Any, n: int = 3) -> tuple[list[Any], list[dict[str, Any]]]:
    runners: list[web.AppRunner] = []
    try:
        urls = []
        for _ in range(n):
            runner, url = await start_app(build_gate_app(config))
            runners.append(runner)
            urls.append(url)
        return await _run(urls, fake, traffic)
    finally:
        for runner in runners:
            await runner.cleanup()


def _assert_same(single: tuple[list[Any], list[dict[str, Any]]], replicas: tuple[list[Any], list[dict[str, Any]]]) -> None:
    (one, one_events), (many, many_events) = single, replicas
    assert len(one) == len(many)
    for n, (a, b) in enumerate(zip(one, many, strict=True)):
        assert a == b, f"request {n}: one process {a.action}/{a.status}, replicas {b.action}/{b.status}"
    assert many_events == one_events


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
    single = await _single(fake, traffic)
    _exercised(*single)
    with RedisServer(tmp_path / "redis") as redis:
        config = _config(fake.url, StateSettings(backend="redis", url=redis.url))
        replicas = await _replicas(config, fake, traffic)
    _assert_same(single, replicas)


async def test_three_sqlite_workers_in_round_robin_match_one_process(tmp_path: Path, fake: FakeUpstream) -> None:
    traffic = build_traffic(CONVERSATIONS)
    single = await _single(fake, traffic)
    config = _config(fake.url, StateSettings(backend="sqlite", path=str(tmp_path / "state.sqlite3")), workers=3)
    replicas = await _replicas(config, fake, traffic)
    _assert_same(single, replicas)


async def test_one_redis_process_matches_one_memory_process(tmp_path: Path, fake: FakeUpstream) -> None:
    traffic = build_traffic(8)
    single = await _single(fake, traffic)
    with RedisServer(tmp_path / "redis") as redis:
        config = _config(fake.url, StateSettings(backend="redis", url=redis.url))
        one_redis = await _replicas(dataclasses.replace(config), fake, traffic, n=1)
    _assert_same(single, one_redis)
