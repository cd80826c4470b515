"""Many cores, shared state: ``serve --workers 1`` against ``--workers 2``, and the Redis
state against SQLite, in one run.

Targets, each the real ``compaction-gate serve`` (the default policy, as served) in its
own process tree, all measured in the same interleaved rounds as ``bench.load`` does:

  direct     the fake upstream itself (the baseline of *added* latency);
  sqlite-w1  --workers 1, SQLite state (the embedded default);
  sqlite-w2  --workers 2, one SQLite file in WAL mode shared by both workers;
  redis-w1   --workers 1, state in a real redis-server;
  redis-w2   --workers 2, both workers on that redis-server.

N simulated agents (``bench.load.Agent``: histories that grow by a tool turn per request,
identifiers in every tool result) send OpenAI chat requests; every round each target, in
a shuffled order, gets one request from each of its agents at once. For each
concurrency level it prints requests per second (the round's requests over the time
the round took), p50/p99 latency and the latency added over ``direct``; then the
ratios: throughput of ``--workers 2`` over ``--workers 1`` (goal: at least 1.7x on a
2-core machine) and Redis's added p50 over SQLite's (goal: at most 1.3x).

Nothing is pinned: two workers need both cores, and the client and the fake upstream
share them (on a 2-core machine the harness competes with the servers; the figures
say what this machine does, not what a server with the agents elsewhere would).

Run:  python -m bench.replicas [--agents 8 32] [--requests 20] [--size 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.load import pct, run_all, start
from tests.support.redis_server import RedisServer, free_port

TARGETS = ("sqlite-w1", "sqlite-w2", "redis-w1", "redis-w2")
REPO = Path(__file__).resolve().parent.parent


def _serve(name: str, fake: str, redis_url: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start target ``name`` (``compaction-gate serve``) and wait until every worker
    answers ``/healthz``."""
    backend, workers = name.split("-w")
    state: dict[str, Any] = (
        {"backend": "redis", "url": redis_url, "key_prefix": f"bench{workers}"}
        if backend == "redis"
        else {"backend": "sqlite", "path": str(workdir / f"{name}.sqlite3")}
    )
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning", "workers": int(workers),
                   "max_body_bytes": 1 << 30, "shutdown_grace_seconds": 1},
        "upstreams": [{"name": "openai", "base_url": fake + "/v1", "dialect": "openai"}],
        "state": state,
    }  # fmt: skip
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k not in ("COMPACTION_GATE_CONFIG", "PROMETHEUS_MULTIPROC_DIR")}
    env["PYTHONPATH"] = str(REPO)
    log = (workdir / f"{name}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--config", str(path)],
                            stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=str(workdir))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    pids: set[int] = set()
    deadline = time.monotonic() + 120
    while len(pids) < int(workers):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start: {(workdir / f'{name}.log').read_text()[-800:]}")
        try:
            req = urllib.request.Request(url + "/healthz", headers={"connection": "close"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                pids.add(int(json.loads(resp.read())["pid"]))
        except OSError:
            time.sleep(0.1)
    return proc, url


def _figures(lat: list[float], busy: float, direct_p50: float) -> dict[str, float]:
    p50, p99 = pct(lat, 50), pct(lat, 99)
    return {"rps": len(lat) / busy, "p50": p50, "p99": p99, "added_p50": p50 - direct_p50, "added_p99": p99 - direct_p50}


def measure(targets: dict[str, str], agents: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median figures over ``args.repeat`` interleaved runs, each with fresh agents."""
    runs: list[dict[str, dict[str, float]]] = []
    for rep in range(args.repeat):
        seed = 7000 + agents * 100 + rep
        got = asyncio.run(run_all(targets, args.size, agents, args.requests, args.warmup, seed, gap=args.gap))
        direct = pct(got["direct"][0], 50)
        runs.append({name: _figures(lat, busy, direct) for name, (lat, busy, _) in got.items()})
    return {name: {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]} for name in targets}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def report(agents: int, res: dict[str, dict[str, float]]) -> dict[str, float]:
    print(f"\n{agents} agents, ~history messages per request as given, medians of the repeats:")
    print(f"  {'target':10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10}")
    for name, f in res.items():
        print(f"  {name:10} {f['rps']:8.1f} {f['p50'] * 1e3:8.2f} {f['p99'] * 1e3:8.2f} "
              f"{f['added_p50'] * 1e3:10.2f} {f['added_p99'] * 1e3:10.2f}")  # fmt: skip
    ratios = {
        "sqlite w2/w1 rps": _ratio(res["sqlite-w2"]["rps"], res["sqlite-w1"]["rps"]),
        "redis w2/w1 rps": _ratio(res["redis-w2"]["rps"], res["redis-w1"]["rps"]),
        "redis/sqlite added p50 (w1)": _ratio(res["redis-w1"]["added_p50"], res["sqlite-w1"]["added_p50"]),
        "redis/sqlite added p50 (w2)": _ratio(res["redis-w2"]["added_p50"], res["sqlite-w2"]["added_p50"]),
    }
    print("  ratios (rps = requests of the measured rounds / time the rounds took; "
          "added = p50 through the target - p50 direct):")  # fmt: skip
    for k, v in ratios.items():
        goal = "goal >= 1.7" if "rps" in k else "goal <= 1.3"
        print(f"    {k:30} {v:6.2f}x   ({goal})")
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[8, 32], help="concurrency levels (default 8 32)")
    ap.add_argument("--requests", type=int, default=20, help="measured requests per agent (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured requests per agent first (default 2)")
    ap.add_argument("--size", type=int, default=100, help="history messages at the start (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per level; figures are medians (default 3)")
    ap.add_argument("--gap", type=float, default=0.025, help="pause after each target's round, s (default 0.025)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)
    if not shutil.which("redis-server") and not Path("/usr/bin/redis-server").exists():
        print("bench.replicas needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2

    mp.set_start_method("spawn", force=True)
    workdir = Path(tempfile.mkdtemp(prefix="cg-bench-replicas-"))
    redis = RedisServer(workdir / "redis").start()
    fake_proc, fake = start("fake", "", str(workdir))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        targets = {"direct": fake}
        for name in TARGETS:
            proc, url = _serve(name, fake, redis.url, workdir)
            procs.append(proc)
            targets[name] = url
        print(f"cpus: {os.cpu_count()}  load average at start: {os.getloadavg()[0]:.2f}  "
              f"history ~{args.size} messages, {args.requests} measured requests per agent, {args.repeat} repeats")  # fmt: skip
        results = {n: measure(targets, n, args) for n in args.agents}
        ratios = {n: report(n, r) for n, r in results.items()}
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
        if args.json:
            print(json.dumps({"results": results, "ratios": ratios}, indent=2))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        fake_proc.terminate()
        fake_proc.join(5)
        redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
