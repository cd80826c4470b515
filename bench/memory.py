"""Memory per tracked conversation: RSS of the served gate against the bare pass-through.

Drives ``--conversations`` conversations of ``--size`` messages (a system prompt, a user
task, then tool calls and their results carrying opaque identifiers, as
:mod:`bench.load`'s agents) through ``compaction-gate serve`` (its own process: the
console script next to this interpreter, default policy, SQLite state in a temporary
folder, ``state.max_memory_mb`` when given) and, with the very same bodies in the same
run, through the bare aiohttp pass-through. Each conversation sends ``--turns`` requests:
its history seen for the first time, then (for each further turn) the model's reply sent
back with the next tool result. ``--concurrency`` conversations are in flight at once on
each target.

At each checkpoint (every ``--every`` conversations) it prints both processes' RSS, the
gate's growth per conversation since the first checkpoint's baseline (the RSS after the
warm-up conversations) against the bare's, the state on disk, and the tracker's own
accounting of what it keeps (``GET /gate/memory``). The goal of issue 15: at most 30 KB of
RSS per tracked 100-message conversation, RSS after 10,000 conversations at most 500 MB,
and a configured bound that holds.

Run:  python -m bench.memory [--conversations 10000] [--size 100] [--turns 2]
                             [--concurrency 8] [--every 2000] [--warmup 200] [--max-memory-mb MB] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.startup import _free_port, _rss_mb, _script

#: Conversations played before the baseline RSS is taken (imports, caches, first pages).
WARMUP = 200


def history(seed: int, size: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": load.SYSTEM},
        {"role": "user", "content": f"Agent {seed}: roll out release {load._hex(rng, 12)} and keep rollback targets."},
    ]
    i = 0
    while len(msgs) < size:
        msgs += load.tool_turn(rng, i)
        i += 1
    return msgs


# --------------------------------------------------------------------------- servers


def start_gate(upstream: str, folder: Path, cpus: set[int] | None, max_memory_mb: float | None,
               max_conversations: int) -> tuple[subprocess.Popen[bytes], str]:
    """``compaction-gate serve`` (default policy, SQLite state in ``folder``)."""
    port = _free_port()
    state: dict[str, Any] = {"backend": "sqlite", "path": str(folder / "state.sqlite3"),
                             "max_conversations": max_conversations}
    if max_memory_mb is not None:
        state["max_memory_mb"] = max_memory_mb
    config = {"server": {"host": "127.0.0.1", "port": port, "max_body_bytes": 1 << 30},
              "upstreams": [{"name": "openai", "base_url": upstream + "/v1", "dialect": "openai"}],
              "state": state, "policy": "default"}
    (folder / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    env = {**os.environ, "XDG_STATE_HOME": str(folder / "xdg")}
    log = (folder / "gate.log").open("wb")
    proc = subprocess.Popen([*_script(), "serve", "--config", str(folder / "config.yaml")], env=env,
                            stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the gate did not start:\n{(folder / 'gate.log').read_text(errors='replace')[-3000:]}")


def _disk_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("state.sqlite3*")) / 2**20


def gate_memory(url: str) -> dict[str, Any] | None:
    """The tracker's accounting of what it keeps (``GET /gate/memory``), if served."""
    try:
        with urllib.request.urlopen(url + "/gate/memory", timeout=30) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- driving


async def play(targets: dict[str, str], first: int, count: int, size: int, turns: int, concurrency: int) -> int:
    """Conversations ``first`` … ``first + count - 1`` on every target; returns how many
    requests failed."""
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    failures = 0
    conn = aiohttp.TCPConnector(limit=concurrency * 2 * len(targets))
    async with aiohttp.ClientSession(connector=conn) as s:

        async def conversation(url: str, seed: int, msgs: list[dict[str, Any]]) -> None:
            nonlocal failures
            rng = random.Random(-seed)
            for t in range(turns):
                async with s.post(url + "/v1/chat/completions", data=json.dumps({"model": "gpt-4o", "messages": msgs}),
                                  headers=headers) as r:
                    data = await r.read()
                if r.status != 200:
                    failures += 1
                    return
                if t + 1 < turns:
                    reply = json.loads(data)["choices"][0]["message"]
                    _call, result = load.tool_turn(rng, 10_000 + t)
                    result["tool_call_id"] = reply["tool_calls"][0]["id"]
                    msgs = [*msgs, reply, result]

        for start in range(first, first + count, concurrency):
            seeds = range(start, min(start + concurrency, first + count))
            hists = {seed: history(seed, size) for seed in seeds}
            await asyncio.gather(*[conversation(url, seed, hists[seed]) for url in targets.values() for seed in seeds])
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=100, help="messages per conversation (default 100)")
    ap.add_argument("--turns", type=int, default=2, help="requests per conversation (default 2)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--every", type=int, default=2000, help="conversations between checkpoints (default 2000)")
    ap.add_argument("--max-memory-mb", type=float, default=None, help="the gate's state.max_memory_mb")
    ap.add_argument("--max-conversations", type=int, default=100_000,
                    help="the gate's state.max_conversations (default 100000: not the bound measured)")
    ap.add_argument("--warmup", type=int, default=WARMUP,
                    help=f"conversations played before the baseline RSS is taken (default {WARMUP})")
    ap.add_argument("--json", action="store_true")
    args, state = load.harness(ap, argv, "memory")
    folder = Path(state)
    procs: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    try:
        procs["direct"], fake = load.start("fake-tools", "", str(folder), load.cpus_for(args, "fake"))  # harness CPUs
        procs["bare"], bare = load.start_as(args, "bare", fake, str(folder))
        procs["gate"], gate = start_gate(fake, folder, load.cpus_for(args, "gate"), args.max_memory_mb,
                                         args.max_conversations)
        targets = {"bare": bare, "gate": gate}
        pids = {"bare": procs["bare"].pid, "gate": procs["gate"].pid}
        print(f"{load._placement(args)}; load average {os.getloadavg()[0]:.1f}; "
              f"{args.size}-message conversations, {args.turns} requests each, {args.concurrency} at once"
              + (f", state.max_memory_mb {args.max_memory_mb:g}" if args.max_memory_mb is not None else ""))
        idle = {name: _rss_mb(pid) for name, pid in pids.items()}
        failures = asyncio.run(play(targets, 0, args.warmup, args.size, args.turns, args.concurrency))
        time.sleep(1.0)
        base = {name: _rss_mb(pid) for name, pid in pids.items()}
        print(f"idle RSS: gate {idle['gate']:.0f} MB, bare {idle['bare']:.0f} MB; after {args.warmup} warm-up "
              f"conversations: gate {base['gate']:.0f} MB, bare {base['bare']:.0f} MB")
        print(f"  {'conversations':>13} {'gate MB':>8} {'bare MB':>8} {'gate KB/conv':>13} {'bare KB/conv':>13} "
              f"{'disk MB':>8} {'tracked KB':>11} {'conv/s':>7}")
        done = args.warmup
        t0 = time.perf_counter()
        while done < args.conversations:
            n = min(args.every, args.conversations - done)
            failures += asyncio.run(play(targets, done, n, args.size, args.turns, args.concurrency))
            done += n
            time.sleep(1.0)
            rss = {name: _rss_mb(pid) for name, pid in pids.items()}
            grown = done - args.warmup
            mem = gate_memory(gate)
            row = {"conversations": done, "gate_mb": rss["gate"], "bare_mb": rss["bare"],
                   "gate_kb_per_conv": (rss["gate"] - base["gate"]) * 1024 / grown,
                   "bare_kb_per_conv": (rss["bare"] - base["bare"]) * 1024 / grown,
                   "disk_mb": _disk_mb(folder), "tracked": mem,
                   "conv_per_s": grown / (time.perf_counter() - t0)}
            rows.append(row)
            tracked = f"{mem['bytes'] / 1024:11.0f}" if mem and "bytes" in mem else f"{'-':>11}"
            print(f"  {done:13} {row['gate_mb']:8.0f} {row['bare_mb']:8.0f} {row['gate_kb_per_conv']:13.1f} "
                  f"{row['bare_kb_per_conv']:13.1f} {row['disk_mb']:8.0f} {tracked} {row['conv_per_s']:7.1f}")
        if failures:
            print(f"{failures} requests failed (see {folder}/gate.log)")
        last = rows[-1] if rows else None
        if last is not None:
            print(f"\ngoal: <= 30 KB RSS per tracked {args.size}-message conversation: "
                  f"{last['gate_kb_per_conv']:.1f} KB (bare {last['bare_kb_per_conv']:.1f} KB); RSS after "
                  f"{last['conversations']} conversations <= 500 MB: {last['gate_mb']:.0f} MB")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        if args.json:
            print(json.dumps({"setup": load.setup_of(args), "idle": idle, "base": base, "rows": rows,
                              "failures": failures}, indent=2))
    finally:
        gp = procs.get("gate")
        if isinstance(gp, subprocess.Popen):
            gp.send_signal(signal.SIGTERM)
            try:
                gp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                gp.kill()
                gp.wait()
        for name, p in procs.items():
            if name != "gate":
                p.terminate()
                p.join(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
