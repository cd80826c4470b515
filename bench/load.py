"""Load generator: what does conversation tracking cost per request?

N simulated agents with growing histories (tool results carrying identifiers) send
OpenAI chat requests, in the same run, to

  (a) the fake upstream directly,
  (b) a bare aiohttp pass-through that parses nothing,
  (c) compaction-gate with tracking on (SQLite state, the default),

plus compaction-gate with tracking off (``gate-off``, the no-op interceptor) to separate
the proxy's own cost (it parses every JSON body) from tracking's. Each server runs in
its own process. For history sizes 100 and 1,000 messages it prints
p50/p99 latency, the latency *added* over (a), and requests per second; then the
per-request cost ratio 1,000 vs 100 messages, measured two ways: the gate's added p50
latency, and the tracker's own CPU time per request (``Tracker.observe`` plus reply
recording, measured in-process without network).

Run:  python -m bench.load [--agents 8] [--requests 40] [--sizes 100 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

SYSTEM = "You are an operations agent. Keep every identifier you will need to undo a step."


# --------------------------------------------------------------------------- workload


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def tool_turn(rng: random.Random, i: int) -> list[dict[str, Any]]:
    """One assistant tool call and its result, carrying opaque identifiers."""
    call_id = f"call_{i}_{_hex(rng, 8)}"
    cmd = rng.choice(["kubectl get deploy api -o yaml", "git rev-parse HEAD", "alembic current", "aws s3api list-multipart-uploads"])
    result = (
        f"step {i}: image sha256:{_hex(rng, 64)} on arn:aws:ecs:eu-west-1:123456789012:service/api-{_hex(rng, 6)}; "
        f"HEAD {_hex(rng, 40)}; upload id {uuid.UUID(int=rng.getrandbits(128))}; revision {_hex(rng, 12)}\n"
        f"status: ok, {rng.randint(1, 9)} replicas ready"
    )
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


class Agent:
    """A simulated agent: its history grows by one tool turn per request."""

    def __init__(self, seed: int, size: int) -> None:
        self.rng = random.Random(seed)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Agent {seed}: roll out release {_hex(self.rng, 12)} and keep rollback targets."},
        ]
        i = 0
        while len(self.messages) - 1 < size:
            self.messages += tool_turn(self.rng, i)
            i += 1
        self.i = i

    def next_body(self) -> bytes:
        self.messages += tool_turn(self.rng, self.i)
        self.i += 1
        return json.dumps({"model": "gpt-4o", "messages": self.messages}).encode()


# --------------------------------------------------------------------------- servers (own processes)


def _serve(kind: str, upstream: str, q: Any, state_dir: str) -> None:
    async def main() -> None:
        if kind == "fake":
            from tests.support.fake_upstream import FakeUpstream, Reply

            fake = FakeUpstream(lambda call: Reply(text="ok, continuing."))
            await fake.start()
            q.put(fake.url)
        elif kind == "bare":
            session = aiohttp.ClientSession(auto_decompress=False)

            async def handler(request: web.Request) -> web.StreamResponse:
                body = await request.read()
                headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
                async with session.request(request.method, upstream + request.path_qs, data=body, headers=headers) as up:
                    resp = web.StreamResponse(status=up.status, headers={
                        k: v for k, v in up.headers.items() if k.lower() not in ("content-length", "transfer-encoding")})
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp

            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            q.put(f"http://127.0.0.1:{port}")
        else:
            from proxy.config import ProxyConfig, ServerSettings, Upstream
            from proxy.gate.tracker import Tracker, TrackingInterceptor
            from proxy.server.app import create_app
            from proxy.server.runner import start_server
            from proxy.state import SQLiteStore

            interceptor = None
            if kind == "gate":
                tracker = Tracker(SQLiteStore(Path(state_dir) / "bench.sqlite3"))
                await tracker.start()
                await tracker.warm(["gpt-4o"])
                interceptor = TrackingInterceptor(tracker)
            config = ProxyConfig(
                server=ServerSettings(port=0, max_body_bytes=1 << 30),
                upstreams=(Upstream(name="openai", base_url=upstream + "/v1", dialect="openai"),),
            )
            app = create_app(config, interceptor)
            server = await start_server(app, "127.0.0.1", 0)
            q.put(server.url)
        await asyncio.Event().wait()

    asyncio.run(main())


def start(kind: str, upstream: str, state_dir: str) -> tuple[mp.Process, str]:
    q: Any = mp.Queue()
    p = mp.Process(target=_serve, args=(kind, upstream, q, state_dir), daemon=True)
    p.start()
    return p, q.get(timeout=60)


# --------------------------------------------------------------------------- client


async def run_all(targets: dict[str, str], size: int, agents: int, requests: int, warmup: int,
                  seed: int) -> dict[str, tuple[list[float], float]]:
    """Every target gets its own population of agents (same seeds, same histories).
    Requests are interleaved: in each round every target, in a shuffled order, gets one
    request from each of its agents (concurrently), so load from anything else on the
    machine hits all targets alike. Returns per target the measured latencies (s) and
    the time spent serving them (for requests/s)."""
    pops = {name: [Agent(seed * 1000 + a, size) for a in range(agents)] for name in targets}
    lat: dict[str, list[float]] = {name: [] for name in targets}
    busy: dict[str, float] = {name: 0.0 for name in targets}
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    rng = random.Random(seed)
    conn = aiohttp.TCPConnector(limit=agents * 2 * len(targets))
    async with aiohttp.ClientSession(connector=conn) as s:

        async def one(url: str, agent: Agent) -> float:
            body = agent.next_body()
            t0 = time.perf_counter()
            async with s.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                data = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"{url}: HTTP {r.status}: {data[:200]!r}")
            dt = time.perf_counter() - t0
            reply = json.loads(data)["choices"][0]["message"]
            agent.messages.append({"role": "assistant", "content": reply["content"]})
            agent.messages.append({"role": "user", "content": "continue"})
            return dt

        for k in range(warmup + requests):
            order = list(targets)
            rng.shuffle(order)
            for name in order:
                t0 = time.perf_counter()
                dts = await asyncio.gather(*[one(targets[name], a) for a in pops[name]])
                if k >= warmup:
                    busy[name] += time.perf_counter() - t0
                    lat[name].extend(dts)
    return {name: (lat[name], busy[name]) for name in targets}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# --------------------------------------------------------------------------- tracker CPU cost


def tracker_cost(size: int, requests: int = 50, agents: int = 4) -> float:
    """Mean CPU seconds of tracker work per request (``observe`` plus reply recording)
    for ``agents`` interleaved agents whose histories are ``size`` messages; in-process,
    memory store, no network. Bodies are parsed up front: the server's parse is not the
    tracker's cost."""
    from proxy.gate.tracker import Tracker
    from proxy.server.hooks import Exchange
    from proxy.state import MemoryStore

    async def main() -> float:
        tr = Tracker(MemoryStore())
        await tr.start()
        await tr.warm(["gpt-4o"])
        pop = [Agent(7 + a, size) for a in range(agents)]
        reply = json.dumps({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}).encode()
        exchanges = []
        for _ in range(requests + 3):
            for agent in pop:
                raw = agent.next_body()
                exchanges.append(Exchange("POST", "/v1/chat/completions", "", "openai", "chat", {}, "tenant", raw,
                                          json.loads(raw), False, "gpt-4o"))
                agent.messages.append({"role": "assistant", "content": "ok"})
        total = 0.0
        for k, ex in enumerate(exchanges):
            t0 = time.thread_time()  # CPU time: robust to other load on the machine
            obs = await tr.observe(ex)
            assert obs is not None
            tr.tap(obs).feed_json(200, reply)
            dt = time.thread_time() - t0
            if k >= 3 * agents:  # the first request of each agent is a new conversation
                total += dt
        await tr.close()
        return total / (requests * agents)

    return asyncio.run(main())


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=8, help="concurrent simulated agents (default 8)")
    ap.add_argument("--requests", type=int, default=40, help="measured requests per agent and size (default 40)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured requests per agent first (default 3)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="history sizes (default 100 1000)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)

    mp.set_start_method("spawn", force=True)
    state_dir = tempfile.mkdtemp(prefix="cg-bench-")
    procs: list[mp.Process] = []
    try:
        p, fake = start("fake", "", state_dir)
        procs.append(p)
        p, bare = start("bare", fake, state_dir)
        procs.append(p)
        p, gate = start("gate", fake, state_dir)
        procs.append(p)
        p, noop = start("gate-off", fake, state_dir)
        procs.append(p)
        targets = {"direct": fake, "bare": bare, "gate-off": noop, "gate": gate}
        results: dict[int, dict[str, dict[str, float]]] = {}
        print(f"agents={args.agents} requests/agent={args.requests} (+{args.warmup} warm-up), cpu={os.cpu_count()}")
        for size in args.sizes:
            results[size] = {}
            runs = asyncio.run(run_all(targets, size, args.agents, args.requests, args.warmup, seed=size))
            for name, (lat, wall) in runs.items():
                results[size][name] = {"p50": pct(lat, 50), "p99": pct(lat, 99), "rps": len(lat) / wall}
            d = results[size]["direct"]
            print(f"\nhistory ~{size} messages")
            print(f"  {'target':9} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10} {'req/s':>8}")
            for name in targets:
                r = results[size][name]
                r["added_p50"] = r["p50"] - d["p50"]
                r["added_p99"] = r["p99"] - d["p99"]
                print(f"  {name:9} {r['p50'] * 1e3:8.2f} {r['p99'] * 1e3:8.2f} {r['added_p50'] * 1e3:10.2f} "
                      f"{r['added_p99'] * 1e3:10.2f} {r['rps']:8.1f}")
            g, b = results[size]["gate"], results[size]["bare"]
            ratio = g["added_p50"] / b["added_p50"] if b["added_p50"] > 0 else float("inf")
            print(f"  gate added p50 / bare added p50 = {ratio:.2f}x")
        cost = {size: tracker_cost(size) for size in args.sizes}
        print("\ntracker CPU per request (observe + reply, in-process):")
        for size in args.sizes:
            print(f"  ~{size:5} messages: {cost[size] * 1e6:8.1f} us")
        if len(args.sizes) >= 2:
            lo, hi = min(args.sizes), max(args.sizes)
            r_lat = results[hi]["gate"]["added_p50"] / results[lo]["gate"]["added_p50"]
            r_cpu = cost[hi] / cost[lo]
            print(f"\nper-request cost {hi} vs {lo} messages: gate added p50 {r_lat:.2f}x, tracker CPU {r_cpu:.2f}x")
        if args.json:
            print(json.dumps({"latency": results, "tracker_cpu_s": cost}, indent=2))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
