"""Does one tenant's huge request stall everyone else? (issue 16)

Serves the product (tracking + the default policy, SQLite state) in its own process, in
front of two fake upstreams (one answers the large traffic, the other the probes, so a
probe never queues behind a 10 MB reply *in the fake*), and measures the
latency of two probes — ``GET /healthz`` and a small chat request of a conversation of
its own — in two phases of each round, in the same run:

- **quiet**: nothing else in flight;
- **loaded**: ``--big`` (default 4) requests of ``--mb`` (default 10) MB each — a single
  unbroken run of characters, the worst case for a tokenizer — are in flight, each
  answered with a reply of the same size (half of them streamed); each finished one is
  replaced at once by another, a new conversation every time.

It prints p50/p99 of each probe in each phase and the ratios loaded / quiet (goal:
p99 at most 2x), for the gate and, in the same run (rounds interleaved), for a bare
pass-through in front of the same upstreams (:mod:`bench.bare`), its large traffic
started no faster than the gate carried it in the same round (``--no-match-rate``: as
many in flight, which moves more bytes through a proxy that does less per byte): the
ratio a proxy that parses nothing gets on this machine under the same load, and the
gate's over it. Probes are sequential, ``--interval`` ms apart; a probe's time is from
sending its request to reading its whole response; the large traffic comes from a
process of its own, and it and its fake upstream run at a lower CPU priority (nice 10)
than the probes' client, so the harness's own work delays the probes as little as
possible and what is measured is the proxy. Placement as in
``bench.load``: the harness (clients, fake upstream) on one half of the CPUs, the proxy
on the other.

    python -m bench.stall [--rounds 3] [--seconds 8] [--big 4] [--mb 10] [--targets gate bare] [--no-match-rate] [--no-pin] [--trace DIR [--dump-after S] [--callbacks [MS]]]

``--trace DIR`` attributes the stalls: every time the proxy's event loop is more than
100 ms late, the stacks of all its threads (``DIR/stalls.txt``, with every cyclic-GC
pass over 25 ms), and, when py-spy is
installed, which thread holds the GIL while loaded (``DIR/gil-loaded-N.txt``, py-spy's
folded stacks per thread); when a probe times out (:data:`PROBE_TIMEOUT`), every
asyncio task's and thread's stack in the proxy (``DIR/tasks.txt``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from bench.bare import ROUTE_HEADER, serve_bare
from bench.load import cpu_seconds, cpu_split, pct

BIG_MODEL = "gpt-4o-big"


def _serve_fake(q: Any, cpus: set[int] | None, reply_bytes: int, nice: int) -> None:
    """A fake upstream: a reply of ``reply_bytes`` characters to ``BIG_MODEL``, "ok"
    otherwise; at ``nice`` (the large traffic's harness yields the CPU to the probes')."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.nice(nice)
    from tests.support.fake_upstream import FakeUpstream, Reply

    big = "B" * reply_bytes

    def reply(call: Any) -> Reply:
        fake.requests.clear()
        if call.model == BIG_MODEL:
            return Reply(text=big, chunks=[big[i : i + 65536] for i in range(0, len(big), 65536)])
        return Reply(text="ok")

    async def serve() -> None:
        await fake.start()
        q.put(fake.url)
        await asyncio.Event().wait()

    fake = FakeUpstream(reply)
    asyncio.run(serve())


def _watch_loop(trace: str, late: float) -> None:
    """Whenever the running loop is late by more than ``late`` seconds, the stacks of all
    threads go to ``trace``/stalls.txt (written by faulthandler's own C thread, which
    needs no GIL, so even a thread holding the GIL in one long C call is caught in it),
    followed by how late the loop was."""
    import faulthandler

    out = open(os.path.join(trace, "stalls.txt"), "a", buffering=1)  # noqa: SIM115 - open for the process's life
    loop = asyncio.get_running_loop()
    tick = 0.02
    due = time.perf_counter() + tick

    def beat() -> None:
        nonlocal due
        now = time.perf_counter()
        lag = now - due
        faulthandler.cancel_dump_traceback_later()
        if lag > late:
            out.write(f"LOOP LATE {lag * 1e3:.0f} ms at {time.time():.3f}\n\n")
        faulthandler.dump_traceback_later(late + tick, file=out)
        due = now + tick
        loop.call_later(tick, beat)

    beat()

    import gc

    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started and (took := time.perf_counter() - started[0]) > late / 4:
            out.write(f"GC generation {info['generation']} took {took * 1e3:.0f} ms "
                      f"({info['collected']} collected) at {time.time():.3f}\n\n")

    gc.callbacks.append(on_gc)


def _time_callbacks(trace: str, slow: float = 0.004) -> None:
    """Every event-loop callback that takes more than ``slow`` seconds goes to
    ``trace``/callbacks.txt: its wall time, the loop thread's own CPU time in it (wall much
    above CPU: the GIL or the core was elsewhere) and what it ran (for a task step, the
    coroutine and where it is suspended after the step)."""
    out = open(os.path.join(trace, "callbacks.txt"), "a", buffering=1)  # noqa: SIM115 - open for the process's life
    run = asyncio.events.Handle._run

    def describe(handle: asyncio.Handle) -> str:
        cb = getattr(handle, "_callback", None)
        task = getattr(cb, "__self__", None)
        if isinstance(task, asyncio.Task):
            where = []
            link: Any = task.get_coro()
            while link is not None:
                frame = getattr(link, "cr_frame", None) or getattr(link, "gi_frame", None)
                if frame is None:
                    break
                where.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
                link = getattr(link, "cr_await", None) or getattr(link, "gi_yieldfrom", None)
            return "task " + " > ".join(where[-4:])
        return f"{getattr(cb, '__qualname__', None) or cb!r:.200}"

    def timed(handle: asyncio.Handle) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        run(handle)
        wall = time.perf_counter() - t0
        if wall > slow:
            cpu = time.thread_time() - c0
            out.write(f"{time.time():.3f} {wall * 1e3:7.1f} {cpu * 1e3:7.1f} {describe(handle)}\n")

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


def _dump_tasks(trace: str) -> None:
    """Every asyncio task's stack and every thread's, to ``trace``/tasks.txt (on SIGUSR1:
    sent when a probe times out, to see what it waits for)."""
    import faulthandler
    import io

    out = io.StringIO()
    out.write(f"=== {time.time():.3f}: {len(asyncio.all_tasks())} tasks\n")
    for task in asyncio.all_tasks():
        out.write(f"{task.get_name()}:\n")
        # a suspended task's own stack is its outermost frame only: follow what it awaits
        link: Any = task.get_coro()
        while link is not None:
            frame = getattr(link, "cr_frame", None) or getattr(link, "gi_frame", None) or getattr(link, "ag_frame", None)
            if frame is None:
                out.write(f"    awaiting {link!r:.300}\n")
                break
            out.write(f"    {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}\n")
            link = getattr(link, "cr_await", None) or getattr(link, "gi_yieldfrom", None) or getattr(link, "ag_await", None)
    with open(os.path.join(trace, "tasks.txt"), "a") as f:
        f.write(out.getvalue())
        f.flush()
        faulthandler.dump_traceback(file=f)


def _serve_proxy(q: Any, cpus: set[int] | None, small_upstream: str, big_upstream: str, state_dir: str,
                 trace: str | None = None, callbacks: float | None = None) -> None:
    """The served product (tracking + the default policy, SQLite state), sending the
    large traffic to its own fake upstream so the probes' small requests never queue
    behind it there (only, if at all, in the proxy). With ``trace``, the loop's stalls
    are recorded there (:func:`_watch_loop`)."""
    if cpus:
        os.sched_setaffinity(0, cpus)

    async def serve() -> None:
        from pathlib import Path

        from proxy.accounting import TokenAccounting
        from proxy.config import ProxyConfig, ServerSettings, StateSettings, Upstream
        from proxy.gate.wiring import create_gate_app
        from proxy.server.runner import start_server

        config = ProxyConfig(
            server=ServerSettings(port=0, max_body_bytes=1 << 30),
            upstreams=(
                # the probes' upstream first: an openai-dialect request without a model
                # pattern of its own goes to the first openai upstream listed
                Upstream(name="openai", base_url=small_upstream + "/v1", dialect="openai"),
                Upstream(name="big", base_url=big_upstream + "/v1", dialect="openai", models=(BIG_MODEL,)),
            ),
            state=StateSettings(path=str(Path(state_dir) / "stall.sqlite3")),
        )
        server = await start_server(create_gate_app(config), "127.0.0.1", 0)
        await asyncio.get_running_loop().run_in_executor(None, TokenAccounting().preload_litellm)
        if trace:
            _watch_loop(trace, 0.1)
            if callbacks is not None:
                _time_callbacks(trace, callbacks / 1e3)
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks, trace)
        q.put((server.url, os.getpid()))
        await asyncio.Event().wait()

    asyncio.run(serve())


def _big_body(mb: int, n: int, stream: bool) -> bytes:
    run = chr(ord("a") + n % 26) * (mb << 20)  # one unbroken run: no whitespace, no punctuation
    return json.dumps({"model": BIG_MODEL, "stream": stream,
                       "messages": [{"role": "user", "content": f"{n} {run}"}]}).encode()


def _pump_process(url: str, big: int, mb: int, cpus: set[int] | None, ready: Any, done: Any,
                  rate: float | None = None) -> None:
    """The large traffic, in a process of its own: ``big`` requests kept in flight (each
    finished one replaced by another, a new conversation) until terminated; with
    ``rate``, at most that many started per second (spaced evenly from the start)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.nice(10)  # the probes' client comes first on the harness CPUs
    bodies = [_big_body(mb, n, stream=n % 2 == 1) for n in range(big * 2)]

    async def pumps() -> None:
        t0 = time.monotonic()
        started = 0

        async def paced() -> None:
            nonlocal started
            if rate:
                wait = t0 + started / rate - time.monotonic()
                started += 1
                if wait > 0:
                    await asyncio.sleep(wait)

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as bs:
            async def pump(slot: int) -> None:
                n = slot
                while True:
                    await paced()
                    body = bytearray(bodies[n % len(bodies)])
                    body[-11:-4] = f"{n:07d}".encode()[-7:]  # a new conversation each time
                    async with bs.post(url + "/v1/chat/completions", data=bytes(body),
                                       headers={"content-type": "application/json",
                                                "authorization": f"Bearer sk-bench-big-{slot}",
                                                ROUTE_HEADER[0]: ROUTE_HEADER[1]}) as r:
                        async for _ in r.content.iter_any():
                            pass
                    with done.get_lock():
                        done.value += 1
                    n += big

            ready.set()
            await asyncio.gather(*(pump(i) for i in range(big)))

    asyncio.run(pumps())


def _family(pid: int) -> list[int]:
    """``pid`` and its child processes (the proxy's workers)."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return [pid, *kids]


def _settle(pid: int, limit: float = 60.0) -> float:
    """Wait until the proxy and its workers are quiet (under 10% of a core over half a
    second: the workers it starts with itself have imported what they need); seconds
    waited."""
    t0 = time.perf_counter()

    def used() -> float:
        total = 0.0
        for p in _family(pid):
            with contextlib.suppress(OSError):
                total += cpu_seconds(p)
        return total

    before = used()
    while time.perf_counter() - t0 < limit:
        time.sleep(0.5)
        now = used()
        if now - before < 0.05:
            break
        before = now
    return time.perf_counter() - t0


#: Seconds a probe may take: one that takes longer is counted as taking this long (a
#: lower bound, reported as a timeout) and the probing goes on.
PROBE_TIMEOUT = 20.0


#: With ``--trace``: seconds after which a probe still in flight has the proxy dump its
#: tasks (``--dump-after``), so a stall shorter than :data:`PROBE_TIMEOUT` is attributed too.
DUMP_AFTER = PROBE_TIMEOUT


async def _timed(call: Callable[[], Any], on_slow: Callable[[], None] = lambda: None) -> tuple[float, bool]:
    """Seconds ``call()`` took, and whether it timed out (then: :data:`PROBE_TIMEOUT`);
    ``on_slow`` runs once if it is still in flight after :data:`DUMP_AFTER` seconds."""
    t = time.perf_counter()
    slow = asyncio.get_running_loop().call_later(DUMP_AFTER, on_slow) if DUMP_AFTER < PROBE_TIMEOUT else None
    try:
        await asyncio.wait_for(call(), PROBE_TIMEOUT)
    except asyncio.TimeoutError:
        return PROBE_TIMEOUT, True
    finally:
        if slow is not None:
            slow.cancel()
    return time.perf_counter() - t, False


async def _probe(s: aiohttp.ClientSession, url: str, small: bytes, key: str,
                 on_slow: Callable[[], None] = lambda: None) -> tuple[float, float, int]:
    """Latencies of ``/healthz`` and the small request, and how many of them timed out."""
    async def healthz() -> None:
        async with s.get(url + "/healthz") as r:
            await r.read()

    async def chat() -> None:
        async with s.post(url + "/v1/chat/completions", data=small,
                          headers={"content-type": "application/json", "authorization": f"Bearer {key}"}) as r:
            await r.read()
            assert r.status == 200, r.status

    hz, late_hz = await _timed(healthz, on_slow)
    sm, late_sm = await _timed(chat, on_slow)
    return hz, sm, late_hz + late_sm


async def _probes(url: str, seconds: float, interval: float, direct: str,
                  on_timeout: Callable[[], None] = lambda: None) -> tuple[list[float], list[float], list[float]]:
    """Probe latencies (healthz, small request; and the small request sent straight to
    its fake upstream, the harness's own share) over ``seconds``."""
    hz: list[float] = []
    sm: list[float] = []
    dr: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
        deadline = time.perf_counter() + seconds
        i = 0
        while time.perf_counter() < deadline:
            small = json.dumps({"model": "gpt-4o", "messages": [
                {"role": "user", "content": f"probe {i} of a small conversation"}]}).encode()
            h, m, late = await _probe(s, url, small, f"sk-bench-probe-{i % 7}", on_timeout)
            if late:
                if DUMP_AFTER >= PROBE_TIMEOUT:
                    on_timeout()
                print(f"  {late} probe(s) timed out after {PROBE_TIMEOUT:.0f} s (counted as {PROBE_TIMEOUT:.0f} s)",
                      flush=True)
            hz.append(h)
            sm.append(m)
            t = time.perf_counter()
            async with s.post(direct + "/v1/chat/completions", data=small,
                              headers={"content-type": "application/json"}) as r:
                await r.read()
            dr.append(time.perf_counter() - t)
            i += 1
            await asyncio.sleep(interval)
    return hz, sm, dr


def _spy(pid: int, trace: str | None, name: str) -> subprocess.Popen[bytes] | None:
    """With ``trace`` and py-spy installed: sample which thread of the proxy holds the GIL
    (``py-spy record --gil``, raw folded stacks per thread) into ``trace``/``name``."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not trace or not os.path.exists(spy):
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--gil", "--threads", "--nonblocking",
                             "--rate", "200", "--format", "raw", "--output", os.path.join(trace, name)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _phase(url: str, seconds: float, interval: float, big: int, mb: int, cpus: set[int] | None, direct: str,
           spy: Callable[[], subprocess.Popen[bytes] | None] = lambda: None,
           on_timeout: Callable[[], None] = lambda: None, rate: float | None = None,
           ) -> tuple[list[float], list[float], list[float], int]:
    """Probe latencies with ``big`` large requests kept in flight (0: quiet; ``rate``: at
    most that many started per second); returns the two lists and how many large
    requests completed meanwhile. ``spy`` starts a profiler for the probing (stopped
    after it)."""
    if not big:
        hz, sm, dr = asyncio.run(_probes(url, seconds, interval, direct, on_timeout))
        return hz, sm, dr, 0
    ready = mp.Event()
    done: Any = mp.Value("i", 0)
    p = mp.Process(target=_pump_process, args=(url, big, mb, cpus, ready, done, rate), daemon=True)
    p.start()
    try:
        ready.wait(120)
        time.sleep(1.5)  # the large requests are under way
        before = done.value
        sampler = spy()
        hz, sm, dr = asyncio.run(_probes(url, seconds, interval, direct, on_timeout))
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            sampler.wait(30)
        return hz, sm, dr, done.value - before
    finally:
        p.terminate()
        p.join(timeout=10)
        time.sleep(1.0)  # let the proxy finish what was cut



#: The probes, in the order :func:`_probes` returns their latencies.
PROBES = ("healthz", "small", "direct")


def _round(url: str, pid: int, r: int, target: str, args: argparse.Namespace, harness: set[int] | None,
           direct: str, trace: str | None, rate: float | None = None) -> dict[str, float]:
    """One quiet and one loaded phase against ``target`` (``rate``: large requests started
    per second at most); the row of its percentiles."""
    dump = (lambda: os.kill(pid, signal.SIGUSR1)) if trace else (lambda: None)
    if trace:  # to place the trace's lines (wall-clock stamps) in their phases
        print(f"round {r + 1}: quiet from {time.time():.3f}", flush=True)
    quiet = _phase(url, args.seconds, args.interval / 1e3, 0, args.mb, harness, direct, on_timeout=dump)
    if trace:
        print(f"round {r + 1}: loaded from {time.time():.3f}", flush=True)
    loaded = _phase(url, args.seconds, args.interval / 1e3, args.big, args.mb, harness, direct,
                    (lambda: _spy(pid, trace if args.gil_profile else None, f"gil-loaded-{r + 1}.txt")) if trace
                    else (lambda: None), dump, rate)
    row: dict[str, float] = {
        f"{phase}_{probe}_p{q}": pct(latencies[k], q)
        for phase, latencies in (("quiet", quiet), ("loaded", loaded))
        for k, probe in enumerate(PROBES)
        for q in (50, 99)
    }
    row.update(probes_quiet=len(quiet[0]), probes_loaded=len(loaded[0]), large_done=loaded[3],
               large_rate_cap=rate or 0.0)
    capped = f" (at most {rate:.1f}/s started)" if rate else ""
    print(f"round {r + 1}, {target}: {len(loaded[0])} probes under load, {loaded[3]} large requests completed{capped}; "
          f"healthz p99 {row['quiet_healthz_p99'] * 1e3:.1f} -> {row['loaded_healthz_p99'] * 1e3:.1f} ms, "
          f"small p99 {row['quiet_small_p99'] * 1e3:.1f} -> {row['loaded_small_p99'] * 1e3:.1f} ms",
          flush=True)
    return row


def _round_order(targets: list[str], match_rate: bool) -> list[str]:
    """The targets in the order each round measures them: as asked, except that with
    ``match_rate`` the gate comes first — the bare pass-through's cap is the rate the gate
    carried in the same round, so the gate's round must have run."""
    return sorted(targets, key=lambda t: t != "gate") if match_rate else list(targets)



def _report(rows: dict[str, list[dict[str, float]]], args: argparse.Namespace,
            split: tuple[set[int], set[int]] | None) -> None:
    """Print the medians of each target's rounds, their ratios and the gate's over the bare
    pass-through's (and, with ``--json``, all of it)."""
    where = (f"harness on CPUs {sorted(split[0])}, proxy on CPUs {sorted(split[1])}" if split
             else "not pinned")
    print(f"\n{args.big} x {args.mb} MB single-run requests and replies in flight; {where}; "
          f"medians of {args.rounds} rounds")
    print(f"{'target':7} {'probe':8} {'quiet p50':>10} {'quiet p99':>10} {'loaded p50':>11} {'loaded p99':>11} "
          f"{'p99 ratio':>10} {'large/phase':>12}")
    med: dict[str, dict[str, float]] = {}
    ratios: dict[str, dict[str, float]] = {}
    for target, trows in rows.items():
        med[target] = {k: statistics.median(row[k] for row in trows) for k in trows[0]}
        ratios[target] = {}
        for probe in PROBES:
            m = med[target]
            q50, q99 = m[f"quiet_{probe}_p50"], m[f"quiet_{probe}_p99"]
            l50, l99 = m[f"loaded_{probe}_p50"], m[f"loaded_{probe}_p99"]
            ratios[target][probe] = l99 / q99 if q99 else float("inf")
            print(f"{target:7} {probe:8} {q50 * 1e3:9.1f}ms {q99 * 1e3:9.1f}ms {l50 * 1e3:10.1f}ms "
                  f"{l99 * 1e3:10.1f}ms {ratios[target][probe]:9.2f}x {m['large_done']:12.0f}")
    print("ratio = loaded p99 / quiet p99 (goal <= 2x); direct = the small request sent straight to its\n"
          "fake upstream, not through the proxy: what the loaded harness itself adds; bare = a pass-through\n"
          "that parses nothing (bench.bare), in front of the same upstreams: what the machine alone costs;\n"
          "large/phase = large requests completed while loaded (median); with --match-rate (default) the bare\n"
          "one's are started no faster than the gate carried them in the same round (unmatched, the same number\n"
          "in flight move more bytes per second through a proxy that does less per byte)")
    if "gate" in ratios and "bare" in ratios:
        g, b = ratios["gate"], ratios["bare"]
        print("gate p99 ratio / bare p99 ratio: "
              + ", ".join(f"{probe} {g[probe] / b[probe]:.2f}x" for probe in ("healthz", "small") if b[probe]))
        mg, mb = med["gate"], med["bare"]
        print("gate loaded p99 / bare loaded p99: "
              + ", ".join(f"{probe} {mg[f'loaded_{probe}_p99'] / mb[f'loaded_{probe}_p99']:.2f}x"
                          for probe in ("healthz", "small") if mb[f"loaded_{probe}_p99"]))
    if args.json:
        print(json.dumps({"rounds": rows, "median": med, "ratios": ratios}, indent=2))

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="quiet+loaded rounds; figures are medians (default 3)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds of probing per phase (default 8)")
    ap.add_argument("--interval", type=float, default=20.0, help="ms between probes (default 20)")
    ap.add_argument("--big", type=int, default=4, help="large requests kept in flight (default 4)")
    ap.add_argument("--mb", type=int, default=10, help="size of each large request and reply, MB (default 10)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                    help="harness and proxy on separate halves of the CPUs (default on)")
    ap.add_argument("--targets", nargs="+", choices=("gate", "bare"), default=["gate", "bare"],
                    help="proxies measured, each round interleaved (default: the gate and the bare pass-through)")
    ap.add_argument("--match-rate", action=argparse.BooleanOptionalAction, default=True,
                    help="the bare pass-through's large traffic at most as fast as the gate carried it in the "
                    "same round (default on: the same bytes per second through both; off: the same number in flight)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    ap.add_argument("--trace", metavar="DIR", help="record the proxy's loop stalls (all threads' stacks when "
                    "its loop is >100 ms late) and, with py-spy installed, who holds the GIL under load, in DIR")
    ap.add_argument("--gil-profile", action=argparse.BooleanOptionalAction, default=True,
                    help="with --trace and py-spy installed: sample who holds the GIL under load (default on; "
                    "sampling slows the proxy, and so changes the load it sees)")
    ap.add_argument("--callbacks", type=float, nargs="?", const=4.0, default=None, metavar="MS",
                    help="with --trace: log every event-loop callback over MS ms (default 4), with its CPU time, to "
                    "callbacks.txt (timing every callback slows the loop a little)")
    ap.add_argument("--dump-after", type=float, default=PROBE_TIMEOUT, metavar="S",
                    help="with --trace: dump the proxy's tasks whenever a probe is still in flight after S "
                    f"seconds (default: only when it times out, {PROBE_TIMEOUT:.0f} s)")
    args = ap.parse_args(argv)
    global DUMP_AFTER
    DUMP_AFTER = min(args.dump_after, PROBE_TIMEOUT)
    split = cpu_split() if args.pin else None
    harness = split[0] if split else None
    if harness:
        os.sched_setaffinity(0, harness)
    mp.set_start_method("spawn", force=True)
    state_dir = tempfile.mkdtemp(prefix="cg-stall-")
    q: Any = mp.Queue()
    procs: list[mp.Process] = []
    try:
        urls = []
        for nice in (0, 10):  # the probes' upstream, then the large traffic's
            p = mp.Process(target=_serve_fake, args=(q, harness, args.mb << 20, nice), daemon=True)
            p.start()
            procs.append(p)
            urls.append(q.get(timeout=60))
        if args.trace:
            os.makedirs(args.trace, exist_ok=True)
        # not daemonic, as ``compaction-gate serve`` is not: the proxy may start a worker
        # process of its own (proxy.state.offload)
        servers: dict[str, tuple[str, int]] = {}
        for target in args.targets:
            if target == "gate":
                p = mp.Process(target=_serve_proxy, args=(q, split[1] if split else None, urls[0], urls[1], state_dir,
                                                          args.trace, args.callbacks), daemon=False)
            else:
                p = mp.Process(target=serve_bare, args=(q, split[1] if split else None, urls[0], urls[1]), daemon=True)
            p.start()
            procs.append(p)
            servers[target] = q.get(timeout=120)
            print(f"{target} quiet {_settle(servers[target][1]):.1f} s after it listened", flush=True)
        rows: dict[str, list[dict[str, float]]] = {t: [] for t in servers}
        for r in range(args.rounds):
            gate_rate: float | None = None
            for target in _round_order(list(servers), args.match_rate):  # interleaved: each round, every target
                url, pid = servers[target]
                traced = args.trace if target == "gate" else None
                # the bare pass-through at the large-traffic rate the gate just carried
                rate = max(gate_rate, 0.5 / args.seconds) if target == "bare" and args.match_rate and gate_rate is not None else None
                row = _round(url, pid, r, target, args, harness, urls[0], traced, rate)
                rows[target].append(row)
                if target == "gate":
                    gate_rate = row["large_done"] / args.seconds
        _report(rows, args, split)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():  # never left behind, nor waited for at exit (the proxy is not daemonic)
                p.kill()
                p.join(timeout=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
