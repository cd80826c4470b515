"""The shutdown grace period is a limit: a 30 s stream, served by a real
``compaction-gate serve`` with ``shutdown_grace_seconds: 2``, ends after SIGTERM within
the grace period plus a bound, with a final error event in its dialect, and the process
exits.

The proxy cuts what is still open at the grace period plus at most 0.5 s
(``proxy.server.runner.CUT_WAIT``): the issue's bound is 3 s after SIGTERM. The
assertion allows ``SLACK`` more, because the test machine is shared (a loaded 2-core
box delays a subprocess's timers and the client alike); the stream must also *not* end
before the grace period, which shows it was the grace period that ended it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp

from proxy.gate.tracker import BACKGROUND_EXIT_WAIT
from tests.support.fake_upstream import FakeUpstream, Reply
from tests.support.serve_process import ServeProcess, start_serve

GRACE = 2.0
BOUND = 3.0  # the issue's: the stream ends within 3 s of SIGTERM
SLACK = 3.0  # scheduling on a shared, loaded machine (see the module docstring)


def _slow_reply(call: object) -> Reply:
    words = [f"w{i} " for i in range(300)]
    return Reply(text="".join(words), chunks=words)  # 300 events, 0.1 s apart: a 30 s stream


async def _stopped(serve: ServeProcess) -> float:
    """When the server logged "stopped" (monotonic time of reading that line)."""
    seen = 0
    while True:
        for line in serve.stderr[seen:]:
            if b'"msg": "stopped"' in line:
                return time.monotonic()
        seen = len(serve.stderr)
        await asyncio.sleep(0.02)


async def _read_stream(resp: aiohttp.ClientResponse, first: asyncio.Event) -> tuple[bytes, float]:
    data = b""
    async for chunk in resp.content.iter_any():
        data += chunk
        first.set()
    return data, time.monotonic()


async def test_a_30s_stream_is_cut_at_the_grace_period_with_a_final_error_event(tmp_path: Path) -> None:
    fake = FakeUpstream(_slow_reply, stream_delay=0.1)
    await fake.start()
    config = {
        "server": {"shutdown_grace_seconds": GRACE},
        "upstreams": [
            {"name": "openai", "base_url": fake.openai_base_url, "dialect": "openai"},
            {"name": "anthropic", "base_url": fake.anthropic_base_url, "dialect": "anthropic", "models": ["claude-*"]},
        ],
        "state": {"path": str(tmp_path / "state.sqlite3")},
    }
    serve = await start_serve(config, tmp_path)
    try:
        async with aiohttp.ClientSession() as s:
            oa = await s.post(
                serve.url + "/v1/chat/completions",
                json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "go"}]},
                headers={"authorization": "Bearer sk-shutdown-test-openai"},
            )
            an = await s.post(
                serve.url + "/v1/messages",
                json={"model": "claude-x", "stream": True, "max_tokens": 10,
                      "messages": [{"role": "user", "content": "go"}]},
                headers={"x-api-key": "sk-shutdown-test-anthropic", "anthropic-version": "2023-06-01"},
            )
            assert oa.status == 200 and an.status == 200
            firsts = [asyncio.Event(), asyncio.Event()]
            readers = [asyncio.create_task(_read_stream(r, e)) for r, e in zip((oa, an), firsts, strict=True)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in firsts)), 30)
            sigterm = time.monotonic()
            serve.proc.send_signal(signal.SIGTERM)
            stopped = asyncio.create_task(_stopped(serve))
            (oa_body, oa_end), (an_body, an_end) = await asyncio.wait_for(asyncio.gather(*readers), 30)
        stopped_at: float | None = await asyncio.wait_for(stopped, BOUND + SLACK + 30)
        code = await serve.stop(timeout=BACKGROUND_EXIT_WAIT + 30, signal=False)
        exited = time.monotonic()
    finally:
        if serve.proc.returncode is None:
            serve.proc.kill()
        await fake.close()

    for end in (oa_end, an_end):
        assert GRACE - 0.2 <= end - sigterm <= BOUND + SLACK, end - sigterm
    # cut, not finished: the last event is the dialect's error event
    oa_events = [e for e in oa_body.decode().split("\n\n") if e.strip()]
    assert b"[DONE]" not in oa_body
    last = json.loads(oa_events[-1].removeprefix("data: "))
    assert last["error"]["code"] == "proxy_shutting_down"
    an_events = [e for e in an_body.decode().split("\n\n") if e.strip()]
    assert an_events[-1].startswith("event: error\n")
    assert json.loads(an_events[-1].split("data: ", 1)[1])["type"] == "error"
    assert "message_stop" not in an_events[-1]
    # the server shut down in bound (logged "stopped" before its exit); the exit itself
    # may wait for a background import still running (tracker.BACKGROUND_EXIT_WAIT)
    assert code == 0 and exited - sigterm <= BOUND + SLACK + BACKGROUND_EXIT_WAIT
    assert stopped_at is not None and stopped_at - sigterm <= BOUND + SLACK
