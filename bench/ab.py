"""A/B: the same target served by two revisions of compaction-gate, in one run.

Single runs of ``bench.load`` vary ±20% on a shared machine, more than most changes
move the figures. This runs ``gate`` (or ``gate-off``, ``policy``) at a base revision
(a ``git worktree`` in a temporary folder) and at the working tree, next to the fake
upstream and the bare pass-through, with requests interleaved round by round as
``bench.load`` does, repeats the whole run and prints medians, per revision, of the
added p50 latency and of the server CPU per request, with their ratio to the base.

Run:  python -m bench.ab BASE_REV [--target gate] [--agents 4] [--size 100] [--repeat 9]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load

ROOT = Path(__file__).resolve().parent.parent


def _serve_at(checkout: str, kind: str, upstream: str, q: Any, state_dir: str, cpus: set[int] | None) -> None:
    """``bench.load``'s server ``kind``, importing ``proxy`` from ``checkout``."""
    for name in [n for n in sys.modules if n == "proxy" or n.startswith("proxy.")]:
        del sys.modules[name]
    sys.path.insert(0, checkout)
    try:  # revisions before proxy/gate/tracking.py kept the interceptor in tracker.py
        import proxy.gate.tracking  # noqa: F401
    except ImportError:
        import proxy.gate.tracker as tracker

        sys.modules["proxy.gate.tracking"] = tracker
    load._serve(kind, upstream, q, state_dir, cpus)


def _start_at(checkout: str, kind: str, upstream: str, state_dir: str,
              cpus: set[int] | None) -> tuple[mp.Process, str]:
    q: Any = mp.Queue()
    p = mp.Process(target=_serve_at, args=(checkout, kind, upstream, q, state_dir, cpus), daemon=True)
    p.start()
    return p, q.get(timeout=90)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="git revision to compare the working tree with")
    ap.add_argument("--target", choices=["gate", "gate-off", "policy"], default="gate")
    ap.add_argument("--agents", type=int, default=4, help="concurrent simulated agents (default 4)")
    ap.add_argument("--size", type=int, default=100, help="history size in messages (default 100)")
    ap.add_argument("--requests", type=int, default=30, help="measured requests per agent and run (default 30)")
    ap.add_argument("--repeat", type=int, default=9, help="runs; figures are medians (default 9)")
    args, state_dir = load.harness(ap, argv, "ab")
    worktree = Path(tempfile.mkdtemp(prefix="cg-ab-base-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.base],
                   check=True, capture_output=True)
    procs: list[mp.Process] = []
    try:
        p, fake = load.start_as(args, "fake", "", state_dir)
        procs.append(p)
        p, bare = load.start_as(args, "bare", fake, state_dir)
        procs.append(p)
        p, base = _start_at(str(worktree), args.target, fake, state_dir + "/base", load.cpus_for(args, args.target))
        procs.append(p)
        base_pid = p.pid
        p, head = _start_at(str(ROOT), args.target, fake, state_dir + "/head", load.cpus_for(args, args.target))
        procs.append(p)
        names = {"base": f"{args.target}@{args.base}", "head": f"{args.target}@working tree"}
        targets = {"direct": fake, "bare": bare, names["base"]: base, names["head"]: head}
        pids = {names["base"]: base_pid or 0, names["head"]: p.pid or 0, "bare": procs[1].pid or 0}
        rows: list[dict[str, tuple[float, float]]] = []
        for rep in range(args.repeat):
            runs = asyncio.run(load.run_all(targets, args.size, args.agents, args.requests, 3,
                                            seed=(args.agents * 10_000 + args.size) * 100 + rep, pids=pids,
                                            gap=args.gap / 1e3))
            direct = load.pct(runs["direct"][0], 50)
            rows.append({n: ((load.pct(lat, 50) - direct) * 1e3, cpu * 1e3) for n, (lat, _, cpu) in runs.items()
                         if n != "direct"})
        med = statistics.median
        print(f"{args.agents} agents, ~{args.size} messages, medians of {args.repeat} runs; {load._placement(args)}:")
        print(f"  {'target':34} {'added p50 ms':>13} {'CPU ms/req':>11}")
        fig = {n: (med(r[n][0] for r in rows), med(r[n][1] for r in rows)) for n in rows[0]}
        for n, (added, cpu) in fig.items():
            print(f"  {n:34} {added:13.2f} {cpu:11.3f}")
        (ba, bc), (ha, hc) = fig[names["base"]], fig[names["head"]]
        print(f"  working tree / base: added p50 {ha / ba:.2f}x, CPU per request {hc / bc:.2f}x;"
              f" over bare added p50: base {ba / fig['bare'][0]:.2f}x, working tree {ha / fig['bare'][0]:.2f}x")
    finally:
        for p in procs:
            p.terminate()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
