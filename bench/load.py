"""Load generator: what does conversation tracking cost per request?

N simulated agents with growing histories (tool results carrying identifiers) send
OpenAI chat requests, in the same run, to

  (a) the fake upstream directly,
  (b) a bare aiohttp pass-through that parses nothing,
  (c) compaction-gate with tracking on (SQLite state, the default),

plus compaction-gate with tracking off (``gate-off``, the no-op interceptor) to separate
the proxy's own cost (it validates every JSON body) from tracking's, and with
``--policy`` the served product (tracking and the default policy). Each server runs in
its own process. For history sizes 100 and 1,000 messages it prints p50/p99 latency, the
latency *added* over (a), requests per second and each server process's CPU per
request; then the in-process CPU of the body parse and of the tracker, and the ratios of
issue 3 with their formulas (see bench/README.md).

By default the harness (this client and the fake upstream) runs on one half of the
CPUs and the servers under test on the other (``--no-pin`` to share them), and each
target's round is followed by a short pause (``--gap``); see bench/README.md.

Run:  python -m bench.load [--agents 8] [--requests 40] [--sizes 100 1000] [--repeat N]
                           [--no-pin] [--gap MS] [--model-latency MS]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.bare import bare_app, start_site
from proxy.gate.quiet import MAX_DELAY_SECONDS
from proxy.state.sqlite import FLUSH_DELAY

#: Pause between the warm-up and the measured rounds: twice the SQLite store's flush
#: delay, so the warm-up's batched writes are not counted as measured CPU.
SETTLE_SECONDS = 2 * FLUSH_DELAY
#: Default pause after each target's round: a little over the longest a tracked reply
#: waits before it is recorded (:data:`proxy.gate.quiet.MAX_DELAY_SECONDS`), so the
#: work a server defers past its responses is done before the next target's round.
GAP_SECONDS = MAX_DELAY_SECONDS + 0.005

SYSTEM = "You are an operations agent. Keep every identifier you will need to undo a step."


# --------------------------------------------------------------------------- workload


def _hex(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


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

    def grow(self) -> None:
        """The next tool turn joins the history."""
        self.messages += tool_turn(self.rng, self.i)
        self.i += 1

    def next_body(self) -> bytes:
        self.grow()
        return json.dumps({"model": "gpt-4o", "messages": self.messages}).encode()

    def take(self, raw: bytes) -> None:
        """The reply's body: its text goes into the history, then the user's next word."""
        reply = json.loads(raw)["choices"][0]["message"]
        self.messages.append({"role": "assistant", "content": reply["content"]})
        self.messages.append({"role": "user", "content": "continue"})


# --------------------------------------------------------------------------- servers (own processes)


def cpu_split() -> tuple[set[int], set[int]] | None:
    """``(harness CPUs, server CPUs)``: this process's CPUs split in two halves, the
    first for the harness (the client and the fake upstream), the rest for the servers
    under test; ``None`` with fewer than two CPUs or no ``sched_setaffinity``."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


#: What the fake upstream says: a text (kind ``fake``) or a tool call (``fake-tools``).
REPLY_TEXT = "ok, continuing."
REPLY_TOOL = ("bash", {"cmd": "kubectl rollout status deploy/api -n prod", "timeout": 30})


def _serve(kind: str, upstream: str, q: Any, state_dir: str, cpus: set[int] | None = None,
           model_latency: float = 0.0) -> None:
    """Serve target ``kind`` in this process (on ``cpus`` if given); put its URL on ``q``.
    ``model_latency``: seconds the fake upstream takes to answer, as a model does.
    ``fake`` answers :data:`REPLY_TEXT`, ``fake-tools`` the tool call :data:`REPLY_TOOL`."""
    if cpus:
        os.sched_setaffinity(0, cpus)

    async def main() -> None:
        if kind in ("fake", "fake-tools"):
            from tests.support.fake_upstream import FakeUpstream, Reply, ToolCall

            tools = [ToolCall(*REPLY_TOOL)] if kind == "fake-tools" else []

            async def reply(call: Any) -> Reply:
                fake.requests.clear()  # the fake records every request: keep its memory flat
                if model_latency:
                    await asyncio.sleep(model_latency)
                # with a tool call the content is null, as OpenAI's is
                return Reply(text=None if tools else REPLY_TEXT, tool_calls=tools)

            fake = FakeUpstream(reply)
            await fake.start()
            q.put(fake.url)
        elif kind == "bare":
            q.put(await start_site(bare_app(lambda request: upstream)))
        elif kind == "policy":
            # the served product: tracking + the default policy (analysis, interventions)
            from proxy.config import ProxyConfig, ServerSettings, StateSettings, Upstream
            from proxy.gate.wiring import create_gate_app
            from proxy.server.runner import start_server

            config = ProxyConfig(
                server=ServerSettings(port=0, max_body_bytes=1 << 30),
                upstreams=(Upstream(name="openai", base_url=upstream + "/v1", dialect="openai"),),
                state=StateSettings(path=str(Path(state_dir) / "policy.sqlite3")),
            )
            server = await start_server(create_gate_app(config), "127.0.0.1", 0)
            from proxy.accounting import TokenAccounting

            # the tracker imports litellm in the background at start: wait for it, as the
            # gate target does (its warm-up), so it is not counted as per-request CPU
            await asyncio.get_running_loop().run_in_executor(None, TokenAccounting().preload_litellm)
            q.put(server.url)
        else:
            from proxy.config import ProxyConfig, ServerSettings, Upstream
            from proxy.gate.tracker import Tracker
            from proxy.gate.tracking import TrackingInterceptor
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
        if kind in ("fake", "fake-tools", "bare"):
            # harness processes: keep the cyclic GC out of the way (the gate processes run
            # exactly as the product does)
            gc.collect()
            gc.freeze()
        await asyncio.Event().wait()

    asyncio.run(main())


def start(kind: str, upstream: str, state_dir: str, cpus: set[int] | None = None,
          model_latency: float = 0.0) -> tuple[mp.Process, str]:
    q: Any = mp.Queue()
    p = mp.Process(target=_serve, args=(kind, upstream, q, state_dir, cpus, model_latency), daemon=True)
    p.start()
    return p, q.get(timeout=60)


# --------------------------------------------------------------------------- client


def cpu_seconds(pid: int) -> float:
    """CPU time consumed so far by every thread of process ``pid`` (Linux: the sum of
    ``/proc/PID/task/*/schedstat``, nanosecond resolution; else ``/proc/PID/stat``)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_all(targets: dict[str, str], size: int, agents: int, requests: int, warmup: int,
                  seed: int, pids: dict[str, int] | None = None, settle: float = SETTLE_SECONDS,
                  gap: float = 0.0, make_agent: Callable[[int, int], Agent] = Agent,
                  first: dict[str, list[float]] | None = None,
                  ) -> dict[str, tuple[list[float], float, float]]:
    """Every target gets its own population of agents (same seeds, same histories), each
    built by ``make_agent(seed, size)``: it makes each request's body (``next_body``) and
    takes its reply's bytes (``take``). ``first``, if given, gets per target the latencies
    of the first round (each agent's history seen for the first time; not measured).
    Requests are interleaved: in each round every target, in a shuffled order, gets one
    request from each of its agents (concurrently), so load from anything else on the
    machine hits all targets alike, followed by ``gap`` seconds of pause (so work a
    server defers past its responses is not done during another target's round).
    Bodies are serialised before a round is timed.
    Returns per target the measured latencies (s), the time spent serving them (for
    requests/s) and, for targets in ``pids``, the server process's CPU seconds per
    measured request (all its threads; warm-up rounds, and ``settle`` seconds after them
    for the servers' deferred work, excluded)."""
    pops = {name: [make_agent(seed * 1000 + a, size) for a in range(agents)] for name in targets}
    lat: dict[str, list[float]] = {name: [] for name in targets}
    busy: dict[str, float] = {name: 0.0 for name in targets}
    cpu0: dict[str, float] = {}
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    rng = random.Random(seed)
    conn = aiohttp.TCPConnector(limit=agents * 2 * len(targets))
    gc.collect()
    gc.disable()  # the client's own GC pauses would land on whichever request is in flight
    try:
        async with aiohttp.ClientSession(connector=conn) as s:

            async def one(url: str, agent: Agent, body: bytes) -> float:
                for attempt in (1, 2):
                    t0 = time.perf_counter()
                    try:
                        async with s.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                            data = await r.read()
                            if r.status != 200:
                                raise RuntimeError(f"{url}: HTTP {r.status}: {data[:200]!r}")
                        break
                    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                        # a server that closes idle keep-alive connections (uvicorn's 5 s):
                        # the pooled connection was gone; the new one is timed from scratch
                        if attempt == 2:
                            raise
                dt = time.perf_counter() - t0
                agent.take(data)
                return dt

            for k in range(warmup + requests):
                if k == warmup:
                    # a conversation's first request is a one-time cost (its whole history
                    # is normalised, counted and written); its batched state write lands up
                    # to the store's flush delay later. Let it land before measuring the
                    # steady state of the growing conversations.
                    await asyncio.sleep(settle)
                    cpu0 = {name: cpu_seconds(pid) for name, pid in (pids or {}).items()}
                order = list(targets)
                rng.shuffle(order)
                for name in order:
                    bodies = [a.next_body() for a in pops[name]]
                    t0 = time.perf_counter()
                    dts = await asyncio.gather(*[one(targets[name], a, b) for a, b in zip(pops[name], bodies, strict=True)])
                    if k >= warmup:
                        busy[name] += time.perf_counter() - t0
                        lat[name].extend(dts)
                    elif k == 0 and first is not None:
                        first.setdefault(name, []).extend(dts)
                    if gap:
                        await asyncio.sleep(gap)
            cpu = {name: (cpu_seconds(pid) - cpu0[name]) / (requests * agents) for name, pid in (pids or {}).items()}
    finally:
        gc.enable()
    return {name: (lat[name], busy[name], cpu.get(name, float("nan"))) for name in targets}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


# --------------------------------------------------------------------------- tracker CPU cost


def tracker_cost(size: int, requests: int = 50, agents: int = 4) -> tuple[float, float]:
    """Mean CPU seconds per request, in-process (memory store, no network), for
    ``agents`` interleaved agents whose histories are ``size`` messages: ``(parse,
    track)`` — the server's body parse (:data:`proxy.server.forward.BODY_CACHE`'s kind
    of incremental parse, as the server does it) and the tracker's work (``observe`` plus
    reply recording)."""
    from proxy.core.jsonbody import BodyCache
    from proxy.gate.tracker import Tracker
    from proxy.server.hooks import Exchange
    from proxy.state import MemoryStore

    async def main() -> tuple[float, float]:
        tr = Tracker(MemoryStore())
        await tr.start()
        await tr.warm(["gpt-4o"])
        bodies = BodyCache()
        pop = [Agent(7 + a, size) for a in range(agents)]
        reply = json.dumps({"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}).encode()
        raws = []
        for k in range((requests + 3) * agents):  # bodies first: the client's work is not timed
            agent = pop[k % agents]
            raws.append(agent.next_body())
            agent.messages.append({"role": "assistant", "content": "ok"})
        del pop
        gc.collect()
        parse = track = 0.0
        for k, raw in enumerate(raws):
            t0 = time.thread_time()  # CPU time: robust to other load on the machine
            parsed = bodies.loads(raw, "tenant")
            t1 = time.thread_time()
            ex = Exchange("POST", "/v1/chat/completions", "", "openai", "chat", {}, "tenant", raw,
                          parsed, False, "gpt-4o")
            obs = await tr.observe(ex)
            assert obs is not None
            tr.tap(obs).feed_json(200, reply)
            t2 = time.thread_time()
            if k >= 3 * agents:  # the first request of each agent is a new conversation
                parse += t1 - t0
                track += t2 - t1
        await tr.close()
        n = requests * agents
        return parse / n, track / n

    return asyncio.run(main())


# --------------------------------------------------------------------------- main


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def measure(targets: dict[str, str], pids: dict[str, int], agents: int, args: argparse.Namespace,
            ) -> dict[int, dict[str, dict[str, float]]]:
    """Per history size and target, the medians over ``args.repeat`` interleaved runs of
    p50/p99 latency, added latency, requests/s and server CPU per request; printed."""
    med = statistics.median
    results: dict[int, dict[str, dict[str, float]]] = {}
    print(f"\n=== agents={agents} requests/agent={args.requests} (+{args.warmup} warm-up), "
          f"repeats={args.repeat}, cpu={os.cpu_count()}, {_placement(args)}")
    for size in args.sizes:
        reps: list[dict[str, dict[str, float]]] = []
        for rep in range(args.repeat):
            # a fresh population for every level, size and repeat: the servers keep their
            # state across runs, and an agent replaying a history they have already seen
            # would be a fork of it, not the growing conversation measured here
            runs = asyncio.run(run_all(targets, size, agents, args.requests, args.warmup,
                                       seed=(agents * 10_000 + size) * 100 + rep, pids=pids, gap=args.gap / 1e3))
            one: dict[str, dict[str, float]] = {}
            for name, (lat, wall, cpu) in runs.items():
                one[name] = {"p50": pct(lat, 50), "p99": pct(lat, 99), "rps": len(lat) / wall, "cpu": cpu}
            for name in targets:
                one[name]["added_p50"] = one[name]["p50"] - one["direct"]["p50"]
                one[name]["added_p99"] = one[name]["p99"] - one["direct"]["p99"]
            reps.append(one)
        results[size] = {name: {k: med([r[name][k] for r in reps]) for k in reps[0][name]} for name in targets}
        print(f"\nhistory ~{size} messages, {agents} agents" + (f" (medians of {args.repeat} runs)" if args.repeat > 1 else ""))
        print(f"  {'target':9} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10} {'req/s':>8} "
              f"{'CPU ms/req':>11}")
        for name in targets:
            r = results[size][name]
            cpu_text = f"{r['cpu'] * 1e3:11.2f}" if name in pids else f"{'-':>11}"
            print(f"  {name:9} {r['p50'] * 1e3:8.2f} {r['p99'] * 1e3:8.2f} {r['added_p50'] * 1e3:10.2f} "
                  f"{r['added_p99'] * 1e3:10.2f} {r['rps']:8.1f} {cpu_text}")
        g, b = results[size]["gate"], results[size]["bare"]
        print(f"  gate added p50 / bare added p50 = {_ratio(g['added_p50'], b['added_p50']):.2f}x")
    return results


def print_ratios(agents: int, results: dict[int, dict[str, dict[str, float]]],
                 cost: dict[int, tuple[float, float]], sizes: list[int]) -> None:
    lo = min(sizes)
    gl, bl = results[lo]["gate"], results[lo]["bare"]
    print(f"  {agents} agents [target 1] at {lo} messages: gate added p50 / bare added p50 = "
          f"{gl['added_p50'] * 1e3:.2f} / {bl['added_p50'] * 1e3:.2f} ms = {_ratio(gl['added_p50'], bl['added_p50']):.2f}x")
    for hi in sorted(sizes):
        if hi == lo:
            continue
        gh, bh = results[hi]["gate"], results[hi]["bare"]
        print(f"  {agents} agents [target 2] gate added p50 at {hi} / at {lo} messages = "
              f"{gh['added_p50'] * 1e3:.2f} / {gl['added_p50'] * 1e3:.2f} ms = {_ratio(gh['added_p50'], gl['added_p50']):.2f}x")
        print(f"  {agents} agents [target 2] gate CPU per request at {hi} / at {lo} messages = "
              f"{gh['cpu'] * 1e3:.2f} / {gl['cpu'] * 1e3:.2f} ms = {_ratio(gh['cpu'], gl['cpu']):.2f}x")
        own_hi, own_lo = gh["cpu"] - bh["cpu"], gl["cpu"] - bl["cpu"]
        print(f"  {agents} agents [target 2] gate's own CPU per request (gate - bare) at {hi} / at {lo} messages = "
              f"{own_hi * 1e3:.2f} / {own_lo * 1e3:.2f} ms = {_ratio(own_hi, own_lo):.2f}x")
        print(f"  {agents} agents (context) bare added p50 at {hi} / at {lo} = {_ratio(bh['added_p50'], bl['added_p50']):.2f}x;"
              f" bare CPU per request {_ratio(bh['cpu'], bl['cpu']):.2f}x;"
              f" in-process parse+track CPU {_ratio(sum(cost[hi]), sum(cost[lo])):.2f}x")


def setup_of(args: argparse.Namespace) -> dict[str, Any]:
    """Where the processes run and how the rounds are paced (reported with the results)."""
    split = args.split
    return {"harness_cpus": sorted(split[0]) if split else None,
            "server_cpus": sorted(split[1]) if split else None,
            "gap_ms": args.gap, "model_latency_ms": args.model_latency}


def _placement(args: argparse.Namespace) -> str:
    setup = setup_of(args)
    where = (f"harness on CPUs {setup['harness_cpus']}, servers on CPUs {setup['server_cpus']}" if args.split
             else "not pinned (harness and servers share the CPUs)")
    return f"{where}, gap {args.gap:g} ms, model latency {args.model_latency:g} ms"


def add_placement_args(ap: argparse.ArgumentParser) -> None:
    """The options that decide where the processes run and how the rounds are paced
    (shared with :mod:`bench.ab`)."""
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="run the harness (client, fake upstream) and the servers under test on separate "
                         "halves of the CPUs, so a server's CPU never slows the client or the model "
                         "(default: on, when there are 2 or more CPUs)")
    ap.add_argument("--gap", type=float, default=GAP_SECONDS * 1e3,
                    help=f"ms of pause after each target's round (default {GAP_SECONDS * 1e3:g})")
    ap.add_argument("--model-latency", type=float, default=0.0,
                    help="ms the fake upstream takes to answer each request, as a model does (default 0)")


def placement(args: argparse.Namespace) -> None:
    """Resolve ``--pin`` into ``args.split`` and move this process (the client) onto
    the harness CPUs."""
    args.split = cpu_split() if args.pin else None
    if args.split:
        os.sched_setaffinity(0, args.split[0])


def harness(ap: argparse.ArgumentParser, argv: list[str] | None, name: str) -> tuple[argparse.Namespace, str]:
    """A bench's start: ``ap`` given the placement options and parsed, this process
    placed (:func:`placement`), processes spawned (never forked: the servers run event
    loops and threads), and a fresh state directory ``cg-NAME-…``; the arguments and
    the directory."""
    add_placement_args(ap)
    args = ap.parse_args(argv)
    placement(args)
    mp.set_start_method("spawn", force=True)
    return args, tempfile.mkdtemp(prefix=f"cg-{name}-")


def cpus_for(args: argparse.Namespace, kind: str) -> set[int] | None:
    """The CPUs ``args`` place process ``kind`` on: the harness's for the fake upstream,
    the servers' for every other kind; ``None`` when not pinned."""
    split: tuple[set[int], set[int]] | None = args.split
    if not split:
        return None
    return split[0] if kind == "fake" else split[1]


def start_as(args: argparse.Namespace, kind: str, upstream: str, state_dir: str) -> tuple[mp.Process, str]:
    """:func:`start` a harness (``fake``) or server process where ``args`` place it."""
    return start(kind, upstream, state_dir, cpus_for(args, kind), args.model_latency / 1e3 if kind == "fake" else 0.0)


def stop_all(procs: Any) -> None:
    """Terminate the harness's processes, then wait up to 5 s for each."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(timeout=5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[8],
                    help="concurrent simulated agents; several values measure each in turn (default 8)")
    ap.add_argument("--requests", type=int, default=40, help="measured requests per agent and size (default 40)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured requests per agent first (default 3)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="history sizes (default 100 1000)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="repeat the interleaved run per size; figures are medians over repeats (default 1)")
    ap.add_argument("--policy", action="store_true",
                    help="also measure the served product (tracking + default policy) as target 'policy'")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args, state_dir = harness(ap, argv, "bench")
    procs: dict[str, mp.Process] = {}
    try:
        p, fake = start_as(args, "fake", "", state_dir)
        procs["direct"] = p
        p, bare = start_as(args, "bare", fake, state_dir)
        procs["bare"] = p
        p, gate = start_as(args, "gate", fake, state_dir)
        procs["gate"] = p
        p, noop = start_as(args, "gate-off", fake, state_dir)
        procs["gate-off"] = p
        targets = {"direct": fake, "bare": bare, "gate-off": noop, "gate": gate}
        if args.policy:
            p, targets["policy"] = start_as(args, "policy", fake, state_dir)
            procs["policy"] = p
        pids = {name: p.pid for name, p in procs.items() if name != "direct" and p.pid}
        by_agents = {n: measure(targets, pids, n, args) for n in args.agents}
        cost = {size: tracker_cost(size) for size in args.sizes}
        print("\nin-process CPU per request (no network; parse = the server's incremental body parse, "
              "track = Tracker.observe + reply):")
        for size in args.sizes:
            parse, track = cost[size]
            print(f"  ~{size:5} messages: parse {parse * 1e6:8.1f} us   track {track * 1e6:8.1f} us")
        print("\nratios (added = p50 latency through the target minus p50 latency direct to the fake upstream;"
              "\n        CPU = CPU seconds of the target's server process, all threads, per measured request):")
        for n, results in by_agents.items():
            print_ratios(n, results, cost, args.sizes)
        if args.json:
            print(json.dumps({"setup": setup_of(args), "latency": {str(n): r for n, r in by_agents.items()},
                              "inprocess_cpu_s": cost}, indent=2))
    finally:
        stop_all(procs.values())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
