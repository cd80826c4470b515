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
share them. So by default the harness is :mod:`bench.wire`'s (raw HTTP/1.1, one
keep-alive connection per agent, an upstream that answers without parsing), which
costs ~0.3-0.5 ms of CPU per request where ``bench.load``'s aiohttp client and the
project's ``FakeUpstream`` cost ~3.5 ms — as much as the gate itself, which capped
``--workers 2`` at ~1x on 2 cores whatever the gate did (``--harness aiohttp`` for
that harness). The lean harness also gives, per target, the CPU milliseconds per
request of the server processes (supervisor and workers), of redis-server, of the fake
upstream and of the client, each counted over the target's own rounds; from them the
throughput the machine's CPUs allow ``--workers 2`` (every process of its rounds
counted, CPU-bound, perfectly balanced) as a multiple of what ``--workers 1``
measured, and the server CPU per request of one worker over two.

After the rounds it checks that every target tracked what it was sent (:func:`tracked`:
each conversation's requests recorded as one conversation in the shared state, every
worker serving some) and stops with an error otherwise. For a Redis target it counts,
per request, the round trips to ``redis-server``, the scripts and the commands run.

Before and after the rounds it measures how much more pure-Python work two processes do
than one in the same time on the machine as loaded then (:func:`machine_scaling`): on
two idle cores 2.0x, on cores shared with other processes less — the most
``--workers 2`` could reach over ``--workers 1`` if the gate were CPU-bound, whatever it
did.

With ``--load closed`` (:mod:`bench.closedloop`) each agent sends its next request as
soon as its last is answered, a target's block at a time, and what a server defers past
its last response (the sole SQLite store's batched commit, ``FLUSH_DELAY`` after its
first write) is drained and counted as its own; the rounds count it for nobody and let
it land in another target's round (the whole run's server CPU per request, printed
after the rounds' table, shows how much). Blocks should be several flush delays long:
``--requests 100`` or more.

Run:  python -m bench.replicas [--agents 8 32] [--requests 20] [--size 100] [--repeat 3]
                               [--harness lean|aiohttp] [--load rounds|closed]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import http.client
import json
import multiprocessing as mp
import os
import random
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

from bench.closedloop import closed_blocks, exchange
from bench.load import SETTLE_SECONDS, Agent, cpu_seconds, pct, run_all, start
from bench.wire import Connection, upstream_process
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
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
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


def _spin(n: int) -> float:
    """Pure-Python work (dict stores, a JSON encode every 7th): its wall seconds."""
    t0 = time.perf_counter()
    d: dict[int, object] = {}
    for i in range(n):
        d[i % 1000] = json.dumps(i) if i % 7 == 0 else i
    return time.perf_counter() - t0


def machine_scaling(n: int = 1_500_000, rounds: int = 3) -> float:
    """How much more pure-Python work two processes do than one in the same time on
    this machine as loaded now (median of ``rounds``): the ceiling the machine leaves
    ``--workers 2`` over ``--workers 1`` for CPU-bound work, whatever the gate does
    (2.0 on two idle cores; less when other processes share them)."""
    got = []
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [1000, 1000])  # both started
        for _ in range(rounds):
            one = pool.apply(_spin, (n,))
            two = max(pool.map(_spin, [n, n], chunksize=1))
            got.append(2 * one / two)
    return statistics.median(got)


def _figures(lat: list[float], busy: float, direct_p50: float) -> dict[str, float]:
    p50, p99 = pct(lat, 50), pct(lat, 99)
    return {"rps": len(lat) / busy, "p50": p50, "p99": p99, "added_p50": p50 - direct_p50, "added_p99": p99 - direct_p50}


def _tree(pid: int) -> list[int]:
    """``pid`` and its children (the workers of ``--workers N``)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid, *(int(x) for x in out)]


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += cpu_seconds(pid)
    return total


async def lean_rounds(targets: dict[str, str], cpu: dict[str, dict[str, list[int]]], agents: int,
                      args: argparse.Namespace, seed: int,
                      redis: RedisCounter | None = None) -> dict[str, dict[str, Any]]:
    """``bench.load.run_all``'s interleaved rounds on the lean harness (:mod:`bench.wire`):
    one keep-alive connection per agent, as an agent holds it. Per target the measured
    latencies, the time the rounds took, and CPU seconds per group of processes
    (``cpu[name]``: ``server``, ``redis``, ``fake``; plus ``client``, this process),
    each counted from the start of the target's round to the end of its pause; and for a
    Redis target the commands ``redis`` counted over the same span (``cmds``)."""
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    pops = {name: [Agent(seed * 1000 + a, args.size) for a in range(agents)] for name in targets}
    conns = {name: [Connection(*_host_port(url), headers) for _ in range(agents)] for name, url in targets.items()}
    out: dict[str, dict[str, Any]] = {name: {"lat": [], "busy": 0.0, "cpu": {}, "cmds": {}, "first": [], "last": []}
                                      for name in targets}
    rng = random.Random(seed)

    whole: dict[str, float] = {}
    gc.collect()
    gc.disable()  # the client's own GC pauses would land on whichever request is in flight
    try:
        for k in range(args.warmup + args.requests):
            if k == args.warmup:
                await asyncio.sleep(SETTLE_SECONDS)  # the warm-up's deferred writes land
                whole = {name: _cpu(cpu[name]["server"]) for name in targets if "server" in cpu[name]}
            order = list(targets)
            rng.shuffle(order)
            for name in order:
                bodies = [a.next_body() for a in pops[name]]
                groups = cpu[name]
                counted = redis is not None and name.startswith("redis")
                r0 = redis.snapshot() if counted and redis is not None else {}
                c0 = {g: _cpu(p) for g, p in groups.items()}
                me0 = time.process_time()
                t0 = time.perf_counter()
                dts = await asyncio.gather(*[exchange(c, a, b, name) for c, a, b in zip(conns[name], pops[name], bodies, strict=True)])
                busy = time.perf_counter() - t0
                me = time.process_time() - me0
                await asyncio.sleep(args.gap)
                if k >= args.warmup:
                    o = out[name]
                    o["lat"].extend(dts)
                    o["first"].append(min(dts))
                    o["last"].append(max(dts))
                    o["busy"] += busy
                    for g, p in groups.items():
                        o["cpu"][g] = o["cpu"].get(g, 0.0) + _cpu(p) - c0[g]
                    o["cpu"]["client"] = o["cpu"].get("client", 0.0) + me
                    if counted and redis is not None:
                        for cmd, n in redis.delta(r0, redis.snapshot()).items():
                            o["cmds"][cmd] = o["cmds"].get(cmd, 0) + n
        await asyncio.sleep(SETTLE_SECONDS)  # what the servers deferred past the last round
        for name, c0 in whole.items():
            # the whole run's server CPU: also what a server deferred past its own round
            # and pause into another target's (the sole SQLite store's batched commit)
            out[name]["cpu"]["server_all"] = _cpu(cpu[name]["server"]) - c0
    finally:
        gc.enable()
        for cs in conns.values():
            for c in cs:
                c.close()
    return out


class RedisCounter:
    """What ``redis-server`` did between two snapshots: commands executed (``INFO
    commandstats``: also those a Lua script runs) and ``reads`` — the reads of client
    sockets it processed (``total_reads_processed``), i.e. the round trips of the
    store's pipelines (each batch is one write), less this counter's own."""

    def __init__(self, url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        a = self.snapshot()
        self.own = self.snapshot()["reads"] - a["reads"]  # the reads of one snapshot

    def snapshot(self) -> dict[str, int]:
        stats = self.client.info("commandstats")
        out = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}
        stats = self.client.info("stats")
        out["reads"] = int(stats["total_reads_processed"])
        out["bytes_in"] = int(stats["total_net_input_bytes"])
        out["bytes_out"] = int(stats["total_net_output_bytes"])
        return out

    def delta(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        d = {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0)}
        d["reads"] = d.get("reads", 0) - self.own
        return d


def _get_json(conn: http.client.HTTPConnection, path: str) -> Any:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: HTTP {resp.status}")
    return json.loads(body)


def tracked(url: str, workers: int, conversations: int, requests: int) -> dict[str, Any]:
    """Check that target ``url`` tracked the traffic it was sent — ``conversations``
    conversations of ``requests`` requests in all, each request recorded as the next
    one of its conversation (``GET /gate/conversations``: the shared store's view) — and
    that every one of its ``workers`` tracked some itself (``GET /gate/memory`` on a
    connection ``/healthz`` says which process holds: a worker's hot histories are the
    conversations it served). Raises ``RuntimeError`` otherwise: a gate that failed
    open, forked every request or left a worker idle must not look fast."""
    host, port = _host_port(url)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        listed = _get_json(conn, "/gate/conversations?limit=10000")
    finally:
        conn.close()
    convs = listed["conversations"]
    got = {"conversations": len(convs), "requests": sum(int(c["requests"]) for c in convs), "workers": {}}
    for _ in range(50):
        if len(got["workers"]) == workers:
            break
        conn = http.client.HTTPConnection(host, port, timeout=30)  # a new connection: the next worker's
        try:
            pid = int(_get_json(conn, "/healthz")["pid"])
            got["workers"][pid] = int(_get_json(conn, "/gate/memory")["hot"])  # same connection, same worker
        finally:
            conn.close()
    problems = []
    if (got["conversations"], got["requests"]) != (conversations, requests):
        problems.append(f"{got['conversations']} conversations of {got['requests']} requests tracked, "
                        f"{conversations} of {requests} sent")  # fmt: skip
    if len(got["workers"]) != workers or not all(got["workers"].values()):
        problems.append(f"hot histories per worker {got['workers']} ({workers} workers)")
    if problems:
        raise RuntimeError(f"{url} did not track the traffic: " + "; ".join(problems))
    return got


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


def measure(targets: dict[str, str], agents: int, args: argparse.Namespace,
            cpu: dict[str, dict[str, list[int]]], redis: RedisCounter | None = None) -> dict[str, dict[str, float]]:
    """Median figures over ``args.repeat`` interleaved runs, each with fresh agents."""
    runs: list[dict[str, dict[str, float]]] = []
    for rep in range(args.repeat):
        seed = 7000 + agents * 100 + rep
        if args.harness == "lean":
            if args.load == "closed":
                got = asyncio.run(closed_blocks(targets, cpu, agents, args.requests, args.warmup, args.size, seed,
                                                drain=SETTLE_SECONDS, cpu_of=_cpu, counter=redis))  # fmt: skip
            else:
                got = asyncio.run(lean_rounds(targets, cpu, agents, args, seed, redis))
            direct = pct(got["direct"]["lat"], 50)
            run = {}
            for name, o in got.items():
                f = _figures(o["lat"], o["busy"], direct)
                if o.get("first"):  # a round's first and last answer (rounds load)
                    f["first_p50"], f["last_p50"] = statistics.median(o["first"]), statistics.median(o["last"])
                n = len(o["lat"])
                for g in ("server", "redis", "fake", "client", "server_all"):
                    if g in o["cpu"] or g != "server_all":
                        f[f"cpu_{g}"] = o["cpu"].get(g, 0.0) / n
                if o["cmds"]:
                    cmds = o["cmds"]
                    f["redis_round_trips"] = cmds.get("reads", 0) / n
                    f["redis_scripts"] = (cmds.get("evalsha", 0) + cmds.get("eval", 0)) / n
                    f["redis_commands"] = sum(v for k, v in cmds.items() if k not in ("multi", "exec", "reads", "bytes_in", "bytes_out")) / n
                    f["redis_kb_in"] = cmds.get("bytes_in", 0) / n / 1024
                    f["redis_kb_out"] = cmds.get("bytes_out", 0) / n / 1024
                run[name] = f
            runs.append(run)
        else:
            got2 = asyncio.run(run_all(targets, args.size, agents, args.requests, args.warmup, seed, gap=args.gap))
            direct = pct(got2["direct"][0], 50)
            runs.append({name: _figures(lat, busy, direct) for name, (lat, busy, _) in got2.items()})
    return {name: {k: statistics.median(r[name][k] for r in runs if k in r[name]) for k in runs[0][name]} for name in targets}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def report(agents: int, res: dict[str, dict[str, float]]) -> dict[str, float]:
    print(f"\n{agents} agents, ~history messages per request as given, medians of the repeats:")
    print(f"  {'target':10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10} {'added p99':>10}")
    cpu = "cpu_server" in next(iter(res.values()))
    if cpu:
        print(f"  {'':10} {'':8} {'':8} {'':8} {'':10} {'':10}   CPU ms per request: "
              f"{'server':>7} {'redis':>6} {'fake':>6} {'client':>6}")  # fmt: skip
    for name, f in res.items():
        line = (f"  {name:10} {f['rps']:8.1f} {f['p50'] * 1e3:8.2f} {f['p99'] * 1e3:8.2f} "
                f"{f['added_p50'] * 1e3:10.2f} {f['added_p99'] * 1e3:10.2f}")  # fmt: skip
        if cpu:
            line += f"   {'':20}{f['cpu_server'] * 1e3:7.2f} {f['cpu_redis'] * 1e3:6.2f} {f['cpu_fake'] * 1e3:6.2f} {f['cpu_client'] * 1e3:6.2f}"
        print(line)
    pairs = {
        "sqlite w2/w1 rps": ("sqlite-w2", "sqlite-w1", "rps"),
        "redis w2/w1 rps": ("redis-w2", "redis-w1", "rps"),
        "redis/sqlite added p50 (w1)": ("redis-w1", "sqlite-w1", "added_p50"),
        "redis/sqlite added p50 (w2)": ("redis-w2", "sqlite-w2", "added_p50"),
    }
    if any("first_p50" in f for f in res.values()):
        print("  a round's first / last answer, ms (medians over rounds; close together: every request of the "
              "round ended at about the time its last did): "
              + ", ".join(f"{n} {f['first_p50'] * 1e3:.2f} / {f['last_p50'] * 1e3:.2f}"
                          for n, f in res.items() if "first_p50" in f))  # fmt: skip
    if any("cpu_server_all" in f for f in res.values()):
        print("  server CPU ms per request over the whole run (also what it deferred into other targets' rounds): "
              + ", ".join(f"{n} {f['cpu_server_all'] * 1e3:.2f}" for n, f in res.items() if "cpu_server_all" in f))  # fmt: skip
    for name, f in res.items():
        if "redis_round_trips" in f:
            print(f"  {name}: per request {f['redis_round_trips']:.2f} round trips to redis (pipelines read), "
                  f"{f['redis_scripts']:.2f} scripts, {f['redis_commands']:.1f} commands executed (with the scripts' own), "
                  f"{f['redis_kb_in']:.1f} KB sent, {f['redis_kb_out']:.1f} KB received")  # fmt: skip
    ratios = {k: _ratio(res[a][f], res[b][f]) for k, (a, b, f) in pairs.items() if a in res and b in res}
    print("  ratios (rps = requests of the measured rounds / time the rounds took; "
          "added = p50 through the target - p50 direct):")  # fmt: skip
    for k, v in ratios.items():
        goal = "goal >= 1.7" if "rps" in k else "goal <= 1.3"
        print(f"    {k:30} {v:6.2f}x   ({goal})")
    if cpu:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        print(f"  what {cpus} CPUs allow (every process of a round counted; CPU-bound, perfectly balanced):")
        for b in ("sqlite", "redis"):
            if f"{b}-w1" not in res or f"{b}-w2" not in res:
                continue
            w1, w2 = res[f"{b}-w1"], res[f"{b}-w2"]
            total = sum(w2[f"cpu_{g}"] for g in ("server", "redis", "fake", "client"))
            harness = w2["cpu_fake"] + w2["cpu_client"]
            ceiling = cpus / total if total > 0 else float("nan")
            ratios[f"{b} w2/w1 rps ceiling"] = _ratio(ceiling, w1["rps"])
            ratios[f"{b} w1/w2 server CPU per request"] = _ratio(w1["cpu_server"], w2["cpu_server"])
            print(f"    {b}: w2 at most {ceiling:6.1f} req/s = {_ratio(ceiling, w1['rps']):4.2f}x w1's measured; "
                  f"server CPU per request w1/w2 {_ratio(w1['cpu_server'], w2['cpu_server']):4.2f}x; "
                  f"harness {harness * 1e3:.2f} ms of {total * 1e3:.2f} ms per request")  # fmt: skip
    return ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, nargs="+", default=[8, 32], help="concurrency levels (default 8 32)")
    ap.add_argument("--requests", type=int, default=20, help="measured requests per agent (default 20)")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured requests per agent first (default 2)")
    ap.add_argument("--size", type=int, default=100, help="history messages at the start (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per level; figures are medians (default 3)")
    ap.add_argument("--settle", type=float, default=5.0, help="pause after the servers start, s (default 5)")
    ap.add_argument("--gap", type=float, default=0.025, help="pause after each target's round, s (default 0.025)")
    ap.add_argument("--harness", choices=("lean", "aiohttp"), default="lean",
                    help="lean: bench.wire's raw HTTP client and upstream, with CPU per request "
                         "(default); aiohttp: bench.load's client and the project's FakeUpstream")  # fmt: skip
    ap.add_argument("--load", choices=("rounds", "closed"), default="rounds",
                    help="rounds: every agent's request at once, then a pause, targets interleaved "
                         "(default); closed: each agent's next request as soon as its last is answered, "
                         "a target's block at a time, its deferred work drained and counted (lean harness)")  # fmt: skip
    ap.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS),
                    help="targets to run (default all; the ratios need both of a pair)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)
    if args.load == "closed" and args.harness != "lean":
        ap.error("--load closed needs the lean harness")
    if not shutil.which("redis-server") and not Path("/usr/bin/redis-server").exists():
        print("bench.replicas needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2

    mp.set_start_method("spawn", force=True)
    workdir = Path(tempfile.mkdtemp(prefix="cg-bench-replicas-"))
    redis = RedisServer(workdir / "redis").start()
    if args.harness == "lean":
        q: Any = mp.Queue()
        fake_proc = mp.Process(target=upstream_process, args=(q,), daemon=True)
        fake_proc.start()
        fake = q.get(timeout=60)
    else:
        fake_proc, fake = start("fake", "", str(workdir))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        targets = {"direct": fake}
        for name in args.targets:
            proc, url = _serve(name, fake, redis.url, workdir)
            procs.append(proc)
            targets[name] = url
        assert fake_proc.pid is not None and redis.proc is not None
        cpu = {"direct": {"fake": [fake_proc.pid]}}
        for name, proc in zip(args.targets, procs, strict=True):
            cpu[name] = {"server": _tree(proc.pid), "fake": [fake_proc.pid]}
            if name.startswith("redis"):
                cpu[name]["redis"] = [redis.proc.pid]
        time.sleep(args.settle)  # the servers' start-up work (tokenizer, catalog) off the measure
        before = machine_scaling()
        print(f"cpus: {os.cpu_count()}  load average at start: {os.getloadavg()[0]:.2f}  "
              f"history ~{args.size} messages, {args.requests} measured requests per agent, {args.repeat} repeats, "
              f"harness {args.harness}, load {args.load}")  # fmt: skip
        counter = RedisCounter(redis.url) if args.harness == "lean" else None
        results = {n: measure(targets, n, args, cpu, counter) for n in args.agents}
        ratios = {n: report(n, r) for n, r in results.items()}
        sent = sum(n * (args.warmup + args.requests) * args.repeat for n in args.agents)
        convs = sum(n * args.repeat for n in args.agents)
        print(f"\ntracked (checked: every conversation and request sent, every worker serving; {convs} "
              f"conversations of {sent} requests sent per target):")  # fmt: skip
        for name in args.targets:
            got = tracked(targets[name], int(name.split("-w")[1]), convs, sent)
            print(f"  {name:10} {got['conversations']} conversations, {got['requests']} requests; "
                  f"conversations hot per worker: {sorted(got['workers'].values())}")  # fmt: skip
        after = machine_scaling()
        print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
        print(f"machine scaling (pure-Python work of 2 processes over 1 in the same time, at the start / end): "
              f"{before:.2f}x / {after:.2f}x — the most --workers 2 could reach over --workers 1 if CPU-bound")  # fmt: skip
        if args.json:
            print(json.dumps({"results": results, "ratios": ratios, "machine_scaling": [before, after]}, indent=2))
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
