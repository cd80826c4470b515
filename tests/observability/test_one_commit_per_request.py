"""A plain continuation through a shared store is committed once, with its reply
(:meth:`proxy.gate.writes.Replica.defer`), and what the client was answered is in the
store — seen by another replica — before the response ends; a request whose decision
matters to other replicas (a new conversation) is still committed before it goes
upstream."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.config import StateSettings
from proxy.demo import build_gate_app, start_app
from proxy.state.protocol import Commit, Committed
from proxy.state.redis import RedisStore
from proxy.state.sqlite_shared import SharedSQLiteStore
from tests.support.agent_traffic import gate_config
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer, require_redis

TURNS = 6


FIRST: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a deploy agent."},
    {"role": "user", "content": "Roll out build 7f3a9c21 to staging."},
]


async def _play(store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeUpstream()
    await fake.start()
    redis = RedisServer(tmp_path / "redis").start() if store_kind == "redis" else None
    try:
        state = (
            StateSettings(backend="redis", url=redis.url)
            if redis is not None
            else StateSettings(backend="sqlite", path=str(tmp_path / "state.sqlite3"))
        )
        config = gate_config(fake.url, state, workers=2)
        a_runner, a = await start_app(build_gate_app(config))
        b_runner, b = await start_app(build_gate_app(config))
        commits: list[Commit] = []
        try:
            cls: Any = RedisStore if redis is not None else SharedSQLiteStore
            real = cls.commit

            async def counted(self: Any, change: Commit) -> Committed:
                commits.append(change)
                return await real(self, change)

            monkeypatch.setattr(cls, "commit", counted)
            async with aiohttp.ClientSession() as session:
                per_turn = []
                counts = []
                history = list(FIRST)
                for turn in range(TURNS):
                    before = len(commits)
                    body = {"model": "gpt-4o", "messages": history}
                    async with session.post(a + "/v1/chat/completions", json=body) as resp:
                        assert resp.status == 200
                        reply = (await resp.json())["choices"][0]["message"]["content"]
                    history = [*history, {"role": "assistant", "content": reply},
                               {"role": "user", "content": f"step {turn + 1}: upload id upl-{turn:04d}-9fe2"}]  # fmt: skip
                    per_turn.append(len(commits) - before)
                    # the other replica's view, read from the store once the response ended
                    async with session.get(b + "/gate/conversations") as resp:
                        listed = await resp.json()
                    convs = listed["conversations"] if isinstance(listed, dict) else listed
                    assert len(convs) == 1
                    cid = convs[0]["id"]
                    async with session.get(f"{b}/gate/conversations/{cid}") as resp:
                        detail = await resp.json()
                    assert detail["requests"] == turn + 1, detail
                    last = detail["timeline"][-1]
                    assert (last["status"], last["reply_messages"]) == ("ok", 1), last
                    counts.append(detail["message_count"])
                    assert reply.startswith("echo:")
            # every turn the history as sent plus the reply: two messages more each time
            assert [y - x for x, y in itertools.pairwise(counts)] == [2] * (TURNS - 1), counts
            # the first request creates the conversation: committed before it goes upstream,
            # its reply after; every continuation after it: one commit, request and reply
            assert per_turn[0] == 2, per_turn
            assert per_turn[1:] == [1] * (TURNS - 1), per_turn
            assert all(c.expect is not None for c in commits[1:])
        finally:
            await a_runner.cleanup()
            await b_runner.cleanup()
    finally:
        await fake.close()
        if redis is not None:
            redis.stop()


async def test_a_plain_continuation_is_committed_once_on_shared_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _play("sqlite", tmp_path, monkeypatch)


async def test_a_plain_continuation_is_committed_once_on_redis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_redis()
    await _play("redis", tmp_path, monkeypatch)
