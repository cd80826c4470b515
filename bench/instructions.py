"""Instructions per request of the served gate, counted by callgrind: a before/after
figure that the shared machine's load does not move (CPU time swings ±15% here).

The served gate (the ``policy`` target of :mod:`bench.load`: tracking plus the default
policy, SQLite state) runs under ``valgrind --tool=callgrind`` with instrumentation off;
the agents of :mod:`bench.patterns` play ``--warmup`` rounds, the store settles, then
instrumentation is switched on (``callgrind_control -i on``) for ``--requests`` rounds
and the settle after them (the deferred bookkeeping and the SQLite writer included:
every thread of the process is counted), and the total is divided by the requests.
litellm is not imported in the process under valgrind (its import is start-up cost, and
minutes under callgrind); tiktoken reads the encodings litellm bundles, so token counts
are what they are in production.

Compare two revisions by running this from each worktree (``PYTHONPATH`` at it): the
same seeds give the same requests, so the difference is the code's. Repeated runs of
one revision agree within ~1%.

Run:  python -m bench.instructions [--patterns echo replaced reserialised] [--size 100]
                                   [--agents 8] [--requests 15] [--warmup 3] [--stream] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import load, patterns

#: Seconds for the store's batched writes and the deferred bookkeeping to land, under
#: valgrind (~50x slower than native), before and after the measured rounds.
SETTLE_SECONDS = 8.0


def _serve(upstream: str, url_file: str, state_dir: str) -> None:
    """The gate, in this process (run under valgrind by :func:`measure`)."""
    sys.modules["litellm"] = None  # type: ignore[assignment]  # not imported: see above
    spec = importlib.util.find_spec("tiktoken")
    if spec is not None and not os.environ.get("TIKTOKEN_CACHE_DIR"):
        # the encodings litellm ships, found without importing it (proxy.tokenizer would)
        for base in sys.path:
            d = Path(base) / "litellm" / "litellm_core_utils" / "tokenizers"
            if d.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(d)
                break

    async def main() -> None:
        from proxy.config import ProxyConfig, ServerSettings, StateSettings, Upstream
        from proxy.gate.wiring import create_gate_app
        from proxy.server.runner import start_server

        config = ProxyConfig(
            server=ServerSettings(port=0, max_body_bytes=1 << 30),
            upstreams=(Upstream(name="openai", base_url=upstream + "/v1", dialect="openai"),),
            state=StateSettings(path=str(Path(state_dir) / "policy.sqlite3")),
        )
        server = await start_server(create_gate_app(config), "127.0.0.1", 0)
        Path(url_file + ".tmp").write_text(server.url)
        os.rename(url_file + ".tmp", url_file)
        await asyncio.Event().wait()

    asyncio.run(main())


def _totals(out: str) -> int:
    """Instructions in callgrind's dumps ``out*`` (their ``totals:`` lines)."""
    total = 0
    for f in Path(out).parent.glob(Path(out).name + "*"):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total


async def _play(url: str, pid: int, pattern: str, stream: bool, size: int, agents: int,
                requests: int, warmup: int, settle: float) -> None:
    pop = [patterns.PatternAgent(1000 + a, size, pattern, stream) for a in range(agents)]
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:

        async def one(agent: patterns.PatternAgent, body: bytes) -> None:
            async with s.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                data = await r.read()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
            agent.take(data)

        for k in range(warmup + requests):
            if k == warmup:
                await asyncio.sleep(settle)
                subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
            bodies = [a.next_body() for a in pop]
            await asyncio.gather(*[one(a, b) for a, b in zip(pop, bodies, strict=True)])
        await asyncio.sleep(settle)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)


def measure(pattern: str, stream: bool, size: int, agents: int, requests: int, warmup: int,
            settle: float = SETTLE_SECONDS) -> float:
    """Instructions per measured request of the served gate for one pattern."""
    fake, upstream = load.start("fake-tools", "", "")
    folder = tempfile.mkdtemp(prefix="cg-instr-")
    url_file, out = os.path.join(folder, "url"), os.path.join(folder, "callgrind.out")
    gate = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, "-m", "bench.instructions", "--serve", upstream, url_file, folder],
        cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # its worker processes end with it
    )
    try:
        t0 = time.monotonic()
        while not os.path.exists(url_file):
            if gate.poll() is not None or time.monotonic() - t0 > 600:
                raise RuntimeError("the gate did not start under valgrind")
            time.sleep(0.2)
        url = Path(url_file).read_text()
        asyncio.run(_play(url, gate.pid, pattern, stream, size, agents, requests, warmup, settle))
        time.sleep(1.0)  # the dump is written
        return _totals(out) / (requests * agents)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(gate.pid, signal.SIGTERM)
        gate.wait(60)
        fake.terminate()
        fake.join(10)
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        _serve(*argv[1:4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patterns", nargs="+", choices=patterns.PATTERNS, default=list(patterns.PATTERNS))
    ap.add_argument("--stream", action="store_true", help="streamed requests")
    ap.add_argument("--size", type=int, default=100, help="history size in messages (default 100)")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--requests", type=int, default=15, help="measured rounds (default 15)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured rounds first (default 3)")
    ap.add_argument("--settle", type=float, default=SETTLE_SECONDS,
                    help=f"seconds for deferred work to land around the measured rounds (default {SETTLE_SECONDS:g})")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench.instructions needs valgrind (callgrind) installed", file=sys.stderr)
        return 2
    results: dict[str, float] = {}
    for pattern in args.patterns:
        n = measure(pattern, args.stream, args.size, args.agents, args.requests, args.warmup, args.settle)
        results[pattern] = n
        print(f"{pattern:13} stream={'on' if args.stream else 'off'} {args.size} messages, {args.agents} agents: "
              f"{n / 1e6:.3f} M instructions per request", flush=True)
    if args.json:
        print(json.dumps({"instructions_per_request": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
