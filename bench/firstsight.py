"""The first sight of a long history: what one request costs the event loop.

A client that starts through the gate mid-task, or any request after a cold start, sends
a long history the gate has never seen. This bench sends, round after round, one fresh
conversation of ``--size`` messages (``bench.load``'s tool turns, opaque identifiers in
every result) to the bare aiohttp pass-through and to the served gate (tracking plus the
default policy, SQLite state) — each its own process, placed as ``bench.load`` places
them, the two targets interleaved in a shuffled order per round — and measures, per
request:

- its latency;
- the CPU time of the server's **main thread** (its event loop) from just before the
  request is sent until ``--settle`` ms after its response (so the loop's deferred work
  for it — recording the reply, counting what was not counted in a worker thread — is
  counted too; nothing else is in flight). That is the time every other request on the
  process would wait behind this one: issue 15's goal is at most 50 ms for a first-seen
  1,000-message history.

It prints the median and the largest of both per target, and the gate's figures as
multiples of bare's in the same run.

Run:  python -m bench.firstsight [--size 1000] [--rounds 15] [--settle 300] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load

#: The goal of issue 15: loop time of a first-seen 1,000-message history.
GOAL_MS = 50.0


def loop_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``'s main thread (its event loop), from ``schedstat``."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return load.cpu_seconds(pid)  # no per-thread figures: the whole process


async def run(targets: dict[str, str], pids: dict[str, int], size: int, rounds: int, settle: float,
              seed: int) -> dict[str, dict[str, list[float]]]:
    """Per target the latencies and the main-thread CPU (s) of ``rounds`` first sights."""
    out: dict[str, dict[str, list[float]]] = {name: {"latency": [], "loop": []} for name in targets}
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    rng = random.Random(seed)
    async with aiohttp.ClientSession() as s:
        for r in range(rounds + 1):  # round 0 warms the connections and the servers' caches
            order = list(targets)
            rng.shuffle(order)
            for name in order:
                body = load.Agent(seed * 100_000 + r * 10 + order.index(name), size).next_body()
                c0 = loop_cpu(pids[name])
                t0 = time.perf_counter()
                async with s.post(targets[name] + "/v1/chat/completions", data=body, headers=headers) as resp:
                    data = await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{name}: HTTP {resp.status}: {data[:200]!r}")
                dt = time.perf_counter() - t0
                await asyncio.sleep(settle)
                if r:
                    out[name]["latency"].append(dt)
                    out[name]["loop"].append(loop_cpu(pids[name]) - c0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1000, help="messages per first-seen history (default 1000)")
    ap.add_argument("--rounds", type=int, default=15, help="measured first sights per target (default 15)")
    ap.add_argument("--settle", type=float, default=300.0,
                    help="ms after each response still counted (the loop's deferred work; default 300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args, state_dir = load.harness(ap, argv, "firstsight")
    procs: dict[str, Any] = {}
    try:
        procs["direct"], fake = load.start("fake-tools", "", state_dir, load.cpus_for(args, "fake"))
        procs["bare"], bare = load.start_as(args, "bare", fake, state_dir)
        procs["gate"], gate = load.start_as(args, "policy", fake, state_dir)
        targets = {"bare": bare, "gate": gate}
        pids = {name: procs[name].pid for name in targets}
        print(f"{load._placement(args)}; load average {os.getloadavg()[0]:.1f}")
        res = asyncio.run(run(targets, pids, args.size, args.rounds, args.settle / 1e3, args.seed))
        figs: dict[str, dict[str, float]] = {}
        print(f"\nfirst sight of a {args.size}-message history, {args.rounds} rounds, settle {args.settle:g} ms")
        print(f"  {'target':8} {'latency p50':>12} {'max':>9} {'loop CPU p50':>13} {'max':>9}")
        for name, r in res.items():
            figs[name] = {"latency_p50": statistics.median(r["latency"]), "latency_max": max(r["latency"]),
                          "loop_p50": statistics.median(r["loop"]), "loop_max": max(r["loop"])}
            f = figs[name]
            print(f"  {name:8} {f['latency_p50'] * 1e3:9.1f} ms {f['latency_max'] * 1e3:6.1f} ms "
                  f"{f['loop_p50'] * 1e3:10.1f} ms {f['loop_max'] * 1e3:6.1f} ms")
        g, b = figs["gate"], figs["bare"]
        print(f"  gate/bare: latency p50 {load._ratio(g['latency_p50'], b['latency_p50']):.2f}x, "
              f"loop CPU p50 {load._ratio(g['loop_p50'], b['loop_p50']):.2f}x "
              f"(goal: gate loop CPU <= {GOAL_MS:g} ms at 1,000 messages: "
              f"{'met' if g['loop_p50'] * 1e3 <= GOAL_MS else 'not met'} at p50, "
              f"{'met' if g['loop_max'] * 1e3 <= GOAL_MS else 'not met'} at max)")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        if args.json:
            print(json.dumps({"setup": load.setup_of(args), "size": args.size, "results": figs, "raw": res}, indent=2))
    finally:
        load.stop_all(procs.values())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
