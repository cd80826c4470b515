"""Faults of a replicated gate (real ``compaction-gate serve`` processes, a real
``redis-server``): a replica killed with SIGKILL mid-conversation leaves nothing it
acknowledged behind — the conversation goes on at another replica with its repair; a
Redis crash with an append-only file (fsynced on every write) loses no acknowledged
state; with Redis down requests are forwarded per ``gate.fail_open`` with an event and a
metric saying why, and the gate recovers by itself when Redis is back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.config import GateSettings, ProxyConfig, ServerSettings, StateSettings, Upstream
from proxy.demo import build_gate_app, start_app
from tests.support.agent_traffic import Request, _script, responder
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer, require_redis
from tests.support.serve_process import ServeProcess, start_serve

pytestmark = pytest.mark.usefixtures("needs_redis")


@pytest.fixture
def needs_redis() -> None:
    require_redis()


def _story() -> tuple[list[Request], list[Request], Request, str]:
    """A migration conversation: what leads up to its destructive compaction, the
    compacted request, the requests after it, and the binding it dropped (the script of
    :func:`tests.support.agent_traffic._script` ends compacted, next turn, retry)."""
    script = _script(0)  # the migration task, a summarizing style, OpenAI dialect
    from tests.support.conversations import build_task

    dropped = build_task("migration", seed=0, filler=1).bindings[0].value
    before, compacted, after = script[:-3], script[-3], script[-2:]
    assert dropped in str(before[-1].body) and dropped not in str(compacted.body)
    return before, after, compacted, dropped


async def _post(session: aiohttp.ClientSession, url: str, req: Request) -> tuple[int, str, str]:
    async with session.post(url + req.path, json=req.body, headers=req.headers) as resp:
        return resp.status, resp.headers.get("x-compaction-gate-action", ""), await resp.text()


def _serve_config(fake: FakeUpstream, redis_url: str, **gate: Any) -> dict[str, Any]:
    return {
        "server": {"log_level": "info", "shutdown_grace_seconds": 1},
        "upstreams": [
            {"name": "openai", "base_url": fake.url + "/v1", "dialect": "openai"},
            {"name": "anthropic", "base_url": fake.url, "dialect": "anthropic"},
        ],
        "state": {"backend": "redis", "url": redis_url, "timeout_seconds": 1},
        "gate": gate,
    }


async def _events(session: aiohttp.ClientSession, url: str, **params: str) -> list[dict[str, Any]]:
    async with session.get(url + "/gate/events", params={"limit": "1000", **params}) as resp:
        assert resp.status == 200, await resp.text()
        return list((await resp.json())["events"])


async def _reference(fake: FakeUpstream, requests: list[Request]) -> tuple[list[tuple[int, str]], list[tuple[str, str]]]:
    """What one gate process (memory state, never killed) answers and records."""
    runner, url = await start_app(build_gate_app(_app_config(fake, "", True, backend="memory")))
    try:
        async with aiohttp.ClientSession() as session:
            answers = [(await _post(session, url, r))[:2] for r in requests]
            return answers, [(e["kind"], e["action"]) for e in await _events(session, url)]
    finally:
        await runner.cleanup()


async def test_a_replica_killed_mid_conversation_leaves_its_repair_to_the_others(tmp_path: Path) -> None:
    before, after, compacted, dropped = _story()
    fake = FakeUpstream(responder([*before, compacted, *after]))
    await fake.start()
    expected_answers, expected_events = await _reference(fake, [*before, compacted, after[0]])
    assert expected_answers[-2:] == [(200, "reinject"), (200, "reinject")]  # the reference repairs both
    redis = RedisServer(tmp_path / "redis").start()
    started: list[ServeProcess] = []
    try:
        a = await start_serve(_serve_config(fake, redis.url), _dir(tmp_path / "a"))
        started.append(a)
        b = await start_serve(_serve_config(fake, redis.url), _dir(tmp_path / "b"))
        started.append(b)
        async with aiohttp.ClientSession() as session:
            answers = []
            for n, req in enumerate(before):  # the conversation alternates between them
                answers.append((await _post(session, (a.url, b.url)[n % 2], req))[:2])
            answers.append((await _post(session, a.url, compacted))[:2])  # acknowledged: A answered
            assert answers[-1] == (200, "reinject")
            assert dropped in str(fake.requests[-1].json)
            a.proc.kill()  # SIGKILL: nothing of A's shutdown runs
            await a.proc.wait()
            fake.requests.clear()
            status, action, body = await _post(session, b.url, after[0])
            answers.append((status, action))
            assert (status, action) == (200, "reinject"), body
            assert dropped in str(fake.requests[-1].json)  # B repeats A's repair
            # every request met what one process that never died would have answered,
            # and the store holds the same events (A's, acknowledged before it died)
            assert answers == expected_answers
            events = await _events(session, b.url)
            assert [(e["kind"], e["action"]) for e in events] == expected_events
            assert ("tripwire", "reject") in expected_events  # A armed it, and it fired
    finally:
        for served in started:
            if served.proc.returncode is None:
                await served.stop()
        redis.stop()
        await fake.close()


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


async def test_redis_crash_with_an_append_only_file_loses_no_acknowledged_state(tmp_path: Path) -> None:
    before, after, compacted, dropped = _story()
    fake = FakeUpstream(responder([*before, compacted, *after]))
    await fake.start()
    redis = RedisServer(tmp_path / "redis", aof=True).start()
    gate: ServeProcess | None = None
    try:
        gate = await start_serve(_serve_config(fake, redis.url), _dir(tmp_path / "gate"))
        async with aiohttp.ClientSession() as session:
            for req in before:
                assert (await _post(session, gate.url, req))[0] == 200
            status, action, _ = await _post(session, gate.url, compacted)
            assert (status, action) == (200, "reinject")
            events_before = await _events(session, gate.url)
            redis.kill()  # a crash: only what was fsynced survives
            status, action, _ = await _post(session, gate.url, after[0])
            assert (status, action) == (200, "none")  # forwarded untouched meanwhile
            redis.start()
            await _until_reachable(session, gate.url)
            fake.requests.clear()
            status, action, _ = await _post(session, gate.url, after[1])
            assert (status, action) == (200, "reinject")  # the repair survived the crash
            assert dropped in str(fake.requests[-1].json)
            events_after = await _events(session, gate.url)
            kinds = [e["kind"] for e in events_after]
            assert "state_unavailable" in kinds and "state_recovered" in kinds
            survived = [(e["kind"], e["action"], e.get("request_id")) for e in events_after]
            for e in events_before:  # every event acknowledged before the crash is still there
                assert (e["kind"], e["action"], e.get("request_id")) in survived
    finally:
        if gate is not None:
            await gate.stop()
        redis.stop()
        await fake.close()


async def _until_reachable(session: aiohttp.ClientSession, url: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        async with session.get(url + "/gate/conversations") as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.2)
    raise AssertionError("the gate never reached Redis again")


def _app_config(fake: FakeUpstream, redis_url: str, fail_open: bool, backend: str = "redis") -> ProxyConfig:
    return ProxyConfig(
        server=ServerSettings(host="127.0.0.1", port=0, log_level="warning"),
        upstreams=(
            Upstream(name="openai", base_url=fake.url + "/v1", dialect="openai"),
            Upstream(name="anthropic", base_url=fake.url, dialect="anthropic"),
        ),
        state=StateSettings(backend=backend, url=redis_url or None, timeout_seconds=1),
        gate=GateSettings(fail_open=fail_open),
    )


@pytest.mark.parametrize("fail_open", [True, False])
async def test_redis_down_fails_per_policy_with_events_and_a_metric_then_recovers(
    tmp_path: Path, fail_open: bool
) -> None:
    before, after, compacted, _ = _story()
    fake = FakeUpstream(responder([*before, compacted, *after]))
    await fake.start()
    redis = RedisServer(tmp_path / "redis").start()
    runners: list[web.AppRunner] = []
    try:
        for _ in range(2):
            runner, _url = await start_app(build_gate_app(_app_config(fake, redis.url, fail_open)))
            runners.append(runner)
        one, other = (f"http://127.0.0.1:{r.addresses[0][1]}" for r in runners)
        async with aiohttp.ClientSession() as session:
            for req in before[:3]:
                assert (await _post(session, one, req))[0] == 200
            redis.stop()
            sent = len(fake.requests)
            status, action, body = await _post(session, one, before[3])
            if fail_open:
                assert (status, action) == (200, "none") and len(fake.requests) == sent + 1
            else:
                assert status == 503 and '"state_unavailable"' in body and len(fake.requests) == sent
            local = await _events(session, one)  # the store is down: this replica's own
            down = [e for e in local if e["kind"] == "state_unavailable"]
            assert down and down[0]["reason"] == "unreachable"
            async with session.get(one + "/metrics") as resp:
                metrics = await resp.text()
            assert 'compaction_gate_state_errors_total{reason="unreachable"}' in metrics
            async with session.get(one + "/gate/conversations") as resp:
                assert resp.status == 503
            redis.start()
            await _until_reachable(session, one)
            for req in before[4:6]:
                status, _, _ = await _post(session, one, req)
                assert status == 200
            events = await _events(session, other)  # from the store, through the other replica
            kinds = [e["kind"] for e in events]
            assert "state_recovered" in kinds
            assert "state_unavailable" in kinds  # handed over to the store once it was back
    finally:
        for runner in runners:
            await runner.cleanup()
        redis.stop()
        await fake.close()


async def test_the_served_process_says_nothing_of_the_redis_password(tmp_path: Path) -> None:
    secret = "pw-" + "z" * 8 + "-not-for-logs"
    fake = FakeUpstream()
    await fake.start()
    redis = RedisServer(tmp_path / "redis", password=secret).start()
    config = _serve_config(fake, f"redis://:${{CG_TEST_REDIS_PASSWORD}}@127.0.0.1:{redis.port}/0")
    gate: ServeProcess | None = None
    try:
        gate = await start_serve(config, _dir(tmp_path / "gate"), extra_env={"CG_TEST_REDIS_PASSWORD": secret})
        async with aiohttp.ClientSession() as session:
            before, _, _, _ = _story()
            for req in before[:2]:
                assert (await _post(session, gate.url, req))[0] == 200
            redis.stop()  # errors now: none may quote the URL
            await _post(session, gate.url, before[2])
            seen = []
            for path in ("/gate/events", "/gate/conversations", "/metrics", "/gate/policy"):
                async with session.get(gate.url + path) as resp:
                    seen.append(await resp.text())
        await gate.stop()
        out = b"".join(gate.stderr).decode("utf-8", "replace") + "".join(seen)
        assert secret not in out
        assert "unreachable" in out  # the outage was reported
    finally:
        if gate is not None and gate.proc.returncode is None:
            await gate.stop()
        redis.stop()
        await fake.close()
