"""bench.stall's bare pass-through routes as the gate does, and the bench runs end to end
with both targets (tiny sizes). Timing figures themselves are not asserted."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.bare import ROUTE_HEADER, serve_bare  # noqa: E402
from tests.support.fake_upstream import FakeUpstream, Reply  # noqa: E402


async def test_the_bare_pass_through_sends_the_large_traffic_to_its_own_upstream() -> None:
    small, big = FakeUpstream(lambda call: Reply(text="small")), FakeUpstream(lambda call: Reply(text="big"))
    await small.start()
    await big.start()
    q: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=serve_bare, args=(q, None, small.url, big.url), daemon=True).start()
    url, _pid = await asyncio.get_running_loop().run_in_executor(None, q.get, True, 30)
    body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/healthz") as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"
            async with s.post(url + "/v1/chat/completions", data=body,
                              headers={"content-type": "application/json"}) as r:
                plain = await r.json()
            async with s.post(url + "/v1/chat/completions", data=body,
                              headers={"content-type": "application/json", ROUTE_HEADER[0]: ROUTE_HEADER[1]}) as r:
                routed = await r.json()
    finally:
        await small.close()
        await big.close()
    assert plain["choices"][0]["message"]["content"] == "small"
    assert routed["choices"][0]["message"]["content"] == "big"
    assert len(small.requests) == 1 and len(big.requests) == 1
    assert big.requests[0].headers.get(ROUTE_HEADER[0]) == ROUTE_HEADER[1]


def test_bench_stall_runs_and_reports_the_gate_and_the_bare_pass_through() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.stall", "--rounds", "1", "--seconds", "1", "--big", "1", "--mb", "1",
         "--interval", "50", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    data = json.loads(out[out.index("\n{") + 1 :])
    assert set(data["ratios"]) == {"gate", "bare"}
    for target in ("gate", "bare"):
        (row,) = data["rounds"][target]
        assert row["probes_quiet"] > 0 and row["probes_loaded"] > 0
        assert all(data["ratios"][target][p] > 0 for p in ("healthz", "small", "direct"))
    assert "gate loaded p99 / bare loaded p99: healthz " in out
    # the bare pass-through's large traffic is paced at the rate the gate carried it
    gate_rate = data["rounds"]["gate"][0]["large_done"] / 1
    assert data["rounds"]["bare"][0]["large_rate_cap"] == max(gate_rate, 0.5)
    assert data["rounds"]["gate"][0]["large_rate_cap"] == 0


def test_the_gate_is_measured_first_in_each_round_when_the_bare_one_is_paced_by_it() -> None:
    """The bare pass-through's rate cap is what the gate carried in the same round: with
    ``--targets bare gate`` the bare round ran first, before there was a rate, and went
    unpaced without a word."""
    from bench.stall import _round_order

    assert _round_order(["bare", "gate"], match_rate=True) == ["gate", "bare"]
    assert _round_order(["gate", "bare"], match_rate=True) == ["gate", "bare"]
    assert _round_order(["bare", "gate"], match_rate=False) == ["bare", "gate"]  # as asked
    assert _round_order(["bare"], match_rate=True) == ["bare"]
