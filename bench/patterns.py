"""Traffic we did not write: three ways real clients send the model's reply back.

- ``echo``          the client sends the reply back as it received it (every field);
- ``replaced``      the client drops the reply and drives the loop with its own next
                    assistant message (its own tool call and result);
- ``reserialised``  the client sends the reply back re-serialised with the harmless
                    differences real clients introduce: fields in another order,
                    ``content: null`` as ``""``, ``refusal``/``annotations`` dropped,
                    reasoning stripped, tool-call arguments re-encoded as JSON with
                    other separators.

The fake model answers every request with a tool call (``content: null``); in ``echo``
and ``reserialised`` the client then appends that call's result (a tool output carrying
opaque identifiers). Each pattern is played streamed and not, at each history size and
concurrency level, against the fake upstream directly, a bare aiohttp pass-through, the
served compaction-gate (tracking plus the default policy, SQLite state) and, when the
``litellm`` console script is installed, the LiteLLM proxy (1 worker, no guardrail), all
in one run with requests interleaved round by round (:func:`bench.load.run_all`).

For every cell it prints requests/s, p50/p99 latency, CPU per request of each server
process (all threads), its RSS after the cell and the slowest first request of the
cell's agents (their histories seen for the first time, in the unmeasured warm-up), then the issue-15 ratios: gate rps /
bare rps, gate rps / LiteLLM rps, gate p99 / bare p99, and per pattern the growth of
gate CPU per request from the smallest to the largest history against bare's growth.

Run:  python -m bench.patterns [--agents 1 8] [--sizes 100 1000] [--patterns echo replaced reserialised]
                               [--requests 20] [--no-litellm] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load
from bench.startup import _free_port, _rss_mb

PATTERNS = ("echo", "replaced", "reserialised")
#: Seconds LiteLLM may take to answer its liveness probe after start (it imports a lot).
LITELLM_START_TIMEOUT = 180.0


# --------------------------------------------------------------------------- the client's side


def reassemble(raw: bytes) -> dict[str, Any]:
    """The assistant message of an OpenAI chat SSE stream, as the SDKs accumulate it."""
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    for line in raw.decode().splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        chunk = json.loads(line[5:])
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content") is not None:
                msg["content"] = (msg["content"] or "") + delta["content"]
            for tc in delta.get("tool_calls") or ():
                call = calls.setdefault(tc.get("index", 0), {"id": None, "type": "function",
                                                           "function": {"name": "", "arguments": ""}})
                call["id"] = tc.get("id") or call["id"]
                fn = tc.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                call["function"]["arguments"] += fn.get("arguments") or ""
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return msg


def reserialise(msg: dict[str, Any]) -> dict[str, Any]:
    """``msg`` as a client that rebuilds its history from its own types sends it back:
    harmless differences only (nothing the model said is changed)."""
    out: dict[str, Any] = {}
    for key in reversed(list(msg)):  # another field order
        if key in ("refusal", "annotations", "reasoning", "reasoning_content", "audio"):
            continue  # dropped, or reasoning stripped
        value = msg[key]
        if key == "content" and not value:
            value = "" if value is None else None  # null <-> ""
        elif key == "tool_calls":
            value = [{"function": {"arguments": json.dumps(json.loads(tc["function"]["arguments"]), indent=1),
                                   "name": tc["function"]["name"]},
                      "type": "function", "id": tc["id"]} for tc in value]
        out[key] = value
    return out


class PatternAgent(load.Agent):
    """A :class:`bench.load.Agent` that sends its history as it is (optionally streamed)
    and takes each reply the way ``pattern`` says."""

    def __init__(self, seed: int, size: int, pattern: str, stream: bool) -> None:
        super().__init__(seed, size)
        self.pattern, self.stream = pattern, stream

    def next_body(self) -> bytes:
        body: dict[str, Any] = {"model": "gpt-4o", "messages": self.messages}
        if self.stream:
            body["stream"] = True
        return json.dumps(body).encode()

    def take(self, raw: bytes) -> None:
        reply = reassemble(raw) if self.stream else json.loads(raw)["choices"][0]["message"]
        call, result = load.tool_turn(self.rng, self.i)
        self.i += 1
        if self.pattern == "replaced":  # the client's own tool call and its result instead
            self.messages += [call, result]
            return
        self.messages.append(reply if self.pattern == "echo" else reserialise(reply))
        result["tool_call_id"] = reply["tool_calls"][0]["id"]
        self.messages.append(result)


# --------------------------------------------------------------------------- the LiteLLM proxy


def start_litellm(upstream: str, folder: Path, cpus: set[int] | None) -> tuple[subprocess.Popen[bytes], str] | None:
    """The LiteLLM proxy (``litellm --config``, 1 worker, no guardrail, offline) in front
    of ``upstream``; ``None`` when the console script is not installed."""
    exe = Path(sys.executable).parent / "litellm"
    if not exe.exists():
        return None
    port = _free_port()
    config = {
        "model_list": [{"model_name": "gpt-4o", "litellm_params": {
            "model": "openai/gpt-4o", "api_base": upstream + "/v1", "api_key": "sk-upstream-fake"}}],
        "litellm_settings": {"num_retries": 0, "request_timeout": 120},
        # no key checks: the harness sends the same bearer token to every target, and
        # skipping LiteLLM's auth only makes it faster
        "general_settings": {"dangerously_permit_weak_or_unset_master_key": True},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    dead = f"http://127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "DATABASE_URL", "OPENAI_"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_TELEMETRY="False", LITELLM_LOG="ERROR",
               HTTPS_PROXY=dead, HTTP_PROXY=dead, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    log = (folder / "litellm.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "--config", str(folder / "config.yaml"), "--host", "127.0.0.1", "--port", str(port),
         "--num_workers", "1"],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    deadline = time.monotonic() + LITELLM_START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.3)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"LiteLLM did not start:\n{(folder / 'litellm.log').read_text(errors='replace')[-3000:]}")


# --------------------------------------------------------------------------- measuring


def cell(targets: dict[str, str], pids: dict[str, int], pattern: str, stream: bool, size: int, agents: int,
         requests: int, warmup: int, seed: int, gap: float) -> dict[str, dict[str, float]]:
    """One interleaved run of ``pattern``: per target rps, p50, p99 (s), CPU s/request and
    RSS MB after it."""
    first: dict[str, list[float]] = {}
    runs = asyncio.run(load.run_all(
        targets, size, agents, requests, warmup, seed, pids=pids, gap=gap,
        make_agent=lambda s, n: PatternAgent(s, n, pattern, stream), first=first))
    out: dict[str, dict[str, float]] = {}
    for name, (lat, busy, cpu) in runs.items():
        out[name] = {"rps": len(lat) / busy, "p50": load.pct(lat, 50), "p99": load.pct(lat, 99), "cpu": cpu,
                     "rss_mb": _rss_mb(pids[name]) if name in pids else float("nan"),
                     "first_max": max(first.get(name, [float("nan")]))}
    return out


def _print_cell(key: str, fig: dict[str, dict[str, float]]) -> None:
    print(f"\n{key}")
    print(f"  {'target':8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>9} {'CPU ms/req':>11} {'RSS MB':>7} "
          f"{'first-seen ms':>14}")
    for name, r in fig.items():
        cpu = f"{r['cpu'] * 1e3:11.2f}" if r["cpu"] == r["cpu"] else f"{'-':>11}"
        rss = f"{r['rss_mb']:7.0f}" if r["rss_mb"] == r["rss_mb"] else f"{'-':>7}"
        print(f"  {name:8} {r['rps']:8.1f} {r['p50'] * 1e3:8.2f} {r['p99'] * 1e3:9.2f} {cpu} {rss} "
              f"{r['first_max'] * 1e3:14.1f}")
    g, b = fig["gate"], fig["bare"]
    line = (f"  gate/bare rps {load._ratio(g['rps'], b['rps']):.2f}x, gate p99 / bare p99 "
            f"{load._ratio(g['p99'], b['p99']):.2f}x")
    if "litellm" in fig:
        line += f", gate/LiteLLM rps {load._ratio(g['rps'], fig['litellm']['rps']):.2f}x"
    print(line)


def _key(pattern: str, stream: bool, size: int, agents: int) -> str:
    return f"{pattern}{' streamed' if stream else ''}, {size} messages, {agents} agents"


def print_summary(results: dict[str, dict[str, dict[str, float]]], args: argparse.Namespace) -> None:
    lo, hi = min(args.sizes), max(args.sizes)
    print("\nsummary (issue 15 goals: gate/bare rps >= 0.7x and gate/LiteLLM >= 8x at "
          f"{lo} messages, p99 <= 2x bare, CPU growth {lo}->{hi} <= 1.5x bare's growth):")
    print(f"  {'cell':44} {'gate/bare rps':>13} {'gate/LiteLLM':>12} {'p99 g/b':>8} {'CPU growth g/b':>15}")
    for agents in args.agents:
        for pattern in args.patterns:
            for stream in args.stream:
                for size in args.sizes:
                    fig = results.get(_key(pattern, stream, size, agents))
                    if fig is None:
                        print(f"  {_key(pattern, stream, size, agents):44} failed (see above)")
                        continue
                    g, b = fig["gate"], fig["bare"]
                    vs_l = f"{load._ratio(g['rps'], fig['litellm']['rps']):11.2f}x" if "litellm" in fig else f"{'-':>12}"
                    growth = f"{'':>15}"
                    small = results.get(_key(pattern, stream, lo, agents))
                    if size == hi and hi != lo and small is not None:
                        gg = load._ratio(g["cpu"], small["gate"]["cpu"])
                        bg = load._ratio(b["cpu"], small["bare"]["cpu"])
                        growth = f"{gg:5.2f}/{bg:4.2f}={load._ratio(gg, bg):4.2f}x"
                    print(f"  {_key(pattern, stream, size, agents):44} {load._ratio(g['rps'], b['rps']):12.2f}x "
                          f"{vs_l} {load._ratio(g['p99'], b['p99']):7.2f}x {growth:>15}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--patterns", nargs="+", choices=PATTERNS, default=list(PATTERNS))
    ap.add_argument("--stream", type=lambda v: v == "on", nargs="+", default=[False, True],
                    metavar="on|off", help="streamed, not streamed or both (default: off on)")
    ap.add_argument("--requests", type=int, default=20, help="measured requests per agent and cell (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured requests per agent first (default 2)")
    ap.add_argument("--litellm", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure the LiteLLM proxy when its console script is installed (default on)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args, state_dir = load.harness(ap, argv, "patterns")
    procs: dict[str, Any] = {}
    try:
        # the fake upstream is harness: on the harness's CPUs, as bench.load places its fake
        procs["direct"], fake = load.start("fake-tools", "", state_dir, load.cpus_for(args, "fake"),
                                           args.model_latency / 1e3)
        procs["bare"], bare = load.start_as(args, "bare", fake, state_dir)
        procs["gate"], gate = load.start_as(args, "policy", fake, state_dir)
        targets = {"direct": fake, "bare": bare, "gate": gate}
        lite = start_litellm(fake, Path(state_dir) / "litellm", load.cpus_for(args, "litellm")) if args.litellm else None
        if lite:
            procs["litellm"], targets["litellm"] = lite
        elif args.litellm:
            print("LiteLLM: not measured (no litellm console script next to this Python)")
        pids = {name: p.pid for name, p in procs.items() if name != "direct" and p.pid}
        print(f"{load._placement(args)}; load average {os.getloadavg()[0]:.1f}")
        results: dict[str, dict[str, dict[str, float]]] = {}
        seed = 0
        for agents in args.agents:
            for size in args.sizes:
                for pattern in args.patterns:
                    for stream in args.stream:
                        seed += 1  # a fresh population per cell: the servers keep their state
                        key = _key(pattern, stream, size, agents)
                        try:
                            results[key] = cell(targets, pids, pattern, stream, size, agents, args.requests,
                                                args.warmup, seed, args.gap / 1e3)
                        except (RuntimeError, aiohttp.ClientError) as exc:  # say so, measure the rest
                            print(f"\n{key}: FAILED: {str(exc)[:300]}")
                            continue
                        _print_cell(key, results[key])
        print_summary(results, args)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        if args.json:
            print(json.dumps({"setup": load.setup_of(args), "cells": results}, indent=2))
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            if isinstance(p, subprocess.Popen):
                p.wait(timeout=30)
            else:
                p.join(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
