"""bench.replicas's closed-loop load (``--load closed``, :mod:`bench.closedloop`): the
same request bodies as the rounds' agents, and a target's deferred work counted as its
own. Timing figures themselves are not asserted."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import wire  # noqa: E402
from bench.closedloop import EncodedAgent, closed_blocks  # noqa: E402
from bench.load import Agent  # noqa: E402


def test_encoded_agent_sends_the_bytes_the_plain_agent_sends() -> None:
    plain, encoded = Agent(5, 20), EncodedAgent(5, 20)
    for turn in range(5):
        assert encoded.next_body() == plain.next_body()
        reply = json.dumps({"choices": [{"message": {"content": f"reply {turn} \u00e9"}}]}).encode()
        plain.take(reply)
        encoded.take(reply)


def test_closed_blocks_count_the_work_a_target_defers_past_its_last_response() -> None:
    """A server that does 1 unit of work 50 ms after each request it answers: every
    unit of the measured block is counted (the block's drain waits for it), none of the
    warm-up's; every agent's requests reach the server in turn on one connection."""
    work = {"units": 0}
    conns: list[int] = []

    class Deferring(wire._Upstream):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conns.append(1)
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            before = wire._Upstream.served
            super().data_received(data)
            for _ in range(wire._Upstream.served - before):
                asyncio.get_running_loop().call_later(0.05, lambda: work.__setitem__("units", work["units"] + 1))

    async def run() -> dict[str, dict]:
        server = await asyncio.get_running_loop().create_server(Deferring, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            return await closed_blocks({"t": url}, {"t": {"server": [0]}}, agents=3, requests=4, warmup=2,
                                       size=10, seed=1, drain=0.3, cpu_of=lambda pids: float(work["units"]))  # fmt: skip
        finally:
            server.close()

    got = asyncio.run(run())["t"]
    assert len(got["lat"]) == 3 * 4
    assert got["cpu"]["server"] == 3 * 4  # the block's deferred work, not the warm-up's
    assert work["units"] == 3 * (4 + 2)
    assert len(conns) == 3  # one keep-alive connection per agent
