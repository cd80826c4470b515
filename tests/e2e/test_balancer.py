"""Continuity behind a real load balancer: Debian's ``haproxy`` in round-robin in front
of three gate replicas sharing a real ``redis-server``. The multi-conversation agent
traffic (compactions of every kind, summarization calls, tripwires, retries, streams)
sent through the balancer meets, request by request and event by event, what one
process answers; every replica served a share of it. Skips, saying why, where haproxy
or redis-server is absent (``.ci/run`` installs both)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.config import StateSettings
from proxy.demo import build_gate_app, start_app
from tests.support.agent_traffic import (
    assert_same,
    build_traffic,
    gate_config,
    played,
    responder,
    single_process,
)
from tests.support.fake_upstream import FakeUpstream
from tests.support.redis_server import RedisServer, free_port, require_redis

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
CONVERSATIONS = 12


def _haproxy_config(port: int, backends: list[int]) -> str:
    servers = "\n".join(f"  server r{i} 127.0.0.1:{p}" for i, p in enumerate(backends))
    return f"""global
  maxconn 512

defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s

frontend gate
  bind 127.0.0.1:{port}
  default_backend replicas

backend replicas
  balance roundrobin
{servers}
"""


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Any]:
    if not Path(HAPROXY).is_file():
        pytest.skip(f"needs haproxy ({HAPROXY} not found; apt-get install haproxy, as .ci/run does)")
    procs: list[subprocess.Popen[bytes]] = []

    def start(backends: list[int]) -> str:
        port = free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(_haproxy_config(port, backends))
        proc = subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(proc)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"haproxy exited: {proc.stderr.read() if proc.stderr else b''!r}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        raise AssertionError("haproxy did not listen")

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def _served(metrics: str) -> float:
    return sum(float(n) for n in re.findall(r'^compaction_gate_requests_total\{route="/v1/[^"]*",[^}]*\} (\S+)$', metrics, re.M))


async def test_three_replicas_behind_haproxy_match_one_process(tmp_path: Path, haproxy: Any) -> None:
    require_redis()
    traffic = build_traffic(CONVERSATIONS)
    fake = FakeUpstream(responder(traffic))
    await fake.start()
    runners: list[web.AppRunner] = []
    try:
        single = await single_process(fake, traffic)
        with RedisServer(tmp_path / "redis") as redis:
            config = gate_config(fake.url, StateSettings(backend="redis", url=redis.url))
            urls = []
            for _ in range(3):
                runner, url = await start_app(build_gate_app(config))
                runners.append(runner)
                urls.append(url)
            balancer = haproxy([int(u.rsplit(":", 1)[1]) for u in urls])
            behind = await played([balancer], fake, traffic)
            assert_same(single, behind)
            shares = []
            async with aiohttp.ClientSession() as session:
                for url in urls:
                    async with session.get(url + "/metrics") as resp:
                        shares.append(_served(await resp.text()))
            assert sum(shares) == len(traffic)
            assert all(n >= len(traffic) // 3 - 1 for n in shares), shares  # round-robin: a third each
    finally:
        for runner in runners:
            await runner.cleanup()
        await fake.close()
