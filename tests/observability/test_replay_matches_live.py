"""`replay` over >= 1,000 recorded requests yields the same gate events as the same
traffic sent live through the proxy (events normalised for time and ids) — and so does
the same traffic sent through three replicas sharing a Redis store, in round-robin, as
a balancer would send it (every request of a story reaches another replica than the
one before)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.cli import main
from proxy.config import StateSettings
from proxy.demo import build_gate_app, demo_config, start_app
from proxy.demo_story import run_story
from proxy.demo_upstream import create_app as create_upstream_app
from proxy.replay import normalise_events
from tests.support.redis_server import RedisServer

API_KEY = "sk-replay-test-key-0001"
POLICY = "default"
STORIES = 88  # about 11.5 requests each


def _capturing_upstream(captured: list[Any]) -> web.Application:
    """The scripted model, recording every response body it sends (what upstream said)."""

    @web.middleware
    async def capture(request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/v1/chat/completions" and isinstance(response, web.Response):
            captured.append(json.loads(response.body))  # type: ignore[arg-type]
        return response

    app = create_upstream_app()
    app.middlewares.append(capture)
    return app


class _RoundRobin:
    """A client session whose requests go to the next of ``urls`` in turn (what a
    round-robin balancer in front of the replicas does); ``base`` is the URL the story
    is given, replaced per request."""

    def __init__(self, session: aiohttp.ClientSession, base: str, urls: Sequence[str]) -> None:
        self._session, self._base = session, base
        self._next: Iterator[str] = itertools.cycle(urls)

    def post(self, url: str, **kwargs: Any) -> Any:
        return self._session.post(next(self._next) + url[len(self._base) :], **kwargs)


async def _live(path: Path | None, redis_url: str | None = None, replicas: int = 1) -> tuple[list[dict[str, Any]], int]:
    """Send the traffic live (through one proxy with memory state, or ``replicas``
    proxies sharing the Redis at ``redis_url``, in round-robin); write the JSONL file
    (when ``path``); return the normalised events."""
    upstream_bodies: list[Any] = []
    client_requests: list[tuple[dict[str, Any], dict[str, str]]] = []
    order: dict[str, None] = {}
    up_runner, up_url = await start_app(_capturing_upstream(upstream_bodies))
    config = demo_config(POLICY, up_url)
    if redis_url is not None:
        config = replace(config, state=StateSettings(backend="redis", url=redis_url))
    gates = [await start_app(build_gate_app(config)) for _ in range(replicas)]
    url = gates[0][1]
    try:
        async with aiohttp.ClientSession() as client:
            session: Any = _RoundRobin(client, url, [u for _, u in gates]) if replicas > 1 else client
            for i in range(STORIES):
                headers = {"x-session-id": f"session-{i:03d}"} if i % 4 == 0 else {}

                def record(body: dict[str, Any], payload: dict[str, Any], status: int,
                           headers: dict[str, str] = headers) -> None:
                    client_requests.append((body, headers))

                story = await run_story(
                    url + "/v1",
                    api_key=API_KEY,
                    session=session,
                    extra_headers=headers,
                    compaction="truncate" if i % 3 == 0 else "summarize",
                    revision=hashlib.sha256(f"rev{i}".encode()).hexdigest()[:12],
                    service=f"service-{i:03d}",
                    recorder=record,
                )
                for step in story.steps:
                    order.setdefault(step.conversation, None)
            events = {}
            for cid in order:
                async with client.get(url + "/gate/events",
                                      params={"conversation": cid, "limit": "1000"}) as resp:
                    events[cid] = (await resp.json())["events"]
    finally:
        for runner, _ in gates:
            await runner.cleanup()
        await up_runner.cleanup()
    assert len(client_requests) == len(upstream_bodies)  # nothing rejected: pairs line up
    if path is None:
        return normalise_events(events), len(client_requests)
    with path.open("w", encoding="utf-8") as fh:
        for (body, headers), response in zip(client_requests, upstream_bodies, strict=True):
            line = {"request": body, "response": response}
            if headers:
                line["headers"] = headers
            fh.write(json.dumps(line) + "\n")
    return normalise_events(events), len(client_requests)


def test_replay_produces_the_same_events_as_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = tmp_path / "traffic.jsonl"
    live_events, sent = asyncio.run(_live(traffic))
    assert sent >= 1000
    kinds = {e["kind"] for e in live_events}
    assert {"summarization", "summary_check", "compaction", "reinject"} <= kinds
    assert sum(1 for e in live_events if e.get("verdict") == "destructive") >= STORIES // 3

    monkeypatch.setenv("REPLAY_TEST_KEY", API_KEY)
    out_dir = tmp_path / "reports"
    code = main(["replay", str(traffic), "--policy", POLICY, "--out", str(out_dir),
                 "--api-key-env", "REPLAY_TEST_KEY", "--progress", "always"])
    captured = capsys.readouterr()
    assert code == 3  # destructive compactions found
    assert "replay [" in captured.err and f"{sent}/{sent} 100%" in captured.err
    assert f"requests                    {sent:,}" in captured.out or f"{sent:,}" in captured.out
    assert "destructive compactions" in captured.out

    report = json.loads((out_dir / "replay-report.json").read_text())
    assert report["requests"] == sent and report["gate_errors"] == 0 and not report["bad_lines"]
    assert report["conversations"] == STORIES
    assert report["events"] == live_events
    destructive = report["destructive_compactions"]
    assert len(destructive) == sum(1 for e in live_events if e.get("verdict") == "destructive")
    assert all(any(b["required"] for b in d["dropped"]) for d in destructive)
    html = (out_dir / "replay-report.html").read_text()
    assert html.count("<tr><td>") == len(destructive)


def test_three_replicas_in_round_robin_produce_the_same_events_as_one(tmp_path: Path) -> None:
    live_events, sent = asyncio.run(_live(None))
    with RedisServer(tmp_path / "redis") as redis:
        replica_events, replica_sent = asyncio.run(_live(None, redis.url, replicas=3))
    assert replica_sent == sent >= 1000
    assert sum(1 for e in replica_events if e.get("verdict") == "destructive") >= STORIES // 3
    assert replica_events == live_events
