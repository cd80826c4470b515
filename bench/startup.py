"""The first five minutes, timed (``python -m bench.startup``).

Medians of ``--repeat`` runs (default 5), each beside ``python -c pass`` measured in the
same run on the same machine:

- ``compaction-gate --help`` and ``--version`` (target ≤ 150 ms);
- ``compaction-gate check`` on a small before/after pair (target ≤ 300 ms);
- ``compaction-gate serve`` until ``/healthz`` answers (target ≤ 1.5 s), its resident
  memory once idle after start-up (``--idle`` seconds later), whether litellm got
  imported, and how long SIGTERM takes to end it.

Every command is the console script next to this interpreter (the one a user runs),
with its state in a temporary ``XDG_STATE_HOME``, and with bytecode as a user has it: an
installed package is byte-compiled by pip, so ``PYTHONDONTWRITEBYTECODE`` is not passed
on and each command runs once, untimed, before the measured rounds (an editable checkout
writes its ``__pycache__`` then).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["main"]

TARGETS = {"--help": 0.150, "--version": 0.150, "check": 0.300, "serve": 1.5}


def _script() -> list[str]:
    exe = Path(sys.executable).parent / "compaction-gate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "proxy"]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _timed_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    c0, t0 = _children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0, _children_cpu() - c0


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pair(folder: Path) -> tuple[str, str]:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "alembic upgrade head"})}}
    before = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are a database operations agent."},
        {"role": "user", "content": "Apply the pending migration."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Running upgrade -> add orders table\nrevision 3f9a1c2b7d4e applied"},
        {"role": "assistant", "content": "Applied."}]}
    after = {"model": "gpt-4o", "messages": [
        before["messages"][0],
        {"role": "user", "content": "This session is being continued from a previous conversation. Summary: the migration was applied."},
        {"role": "user", "content": "Roll back the migration."}]}
    (folder / "before.json").write_text(json.dumps(before))
    (folder / "after.json").write_text(json.dumps(after))
    return str(folder / "before.json"), str(folder / "after.json")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _serve_once(env: dict[str, str], idle: float) -> tuple[float, float, float, bool, float]:
    """(seconds until /healthz, idle RSS MB, seconds from SIGTERM to exit, litellm
    loaded, CPU seconds until /healthz)."""
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([*_script(), "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                    if json.loads(resp.read()).get("status") == "ok":
                        break
            except OSError:
                time.sleep(0.005)
        ready = time.perf_counter() - t0
        cpu = _cpu_of(proc.pid)
        time.sleep(idle)
        rss = _rss_mb(proc.pid)
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        litellm = "/litellm/" in maps  # litellm's compiled extensions are mapped once imported
        t1 = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        return ready, rss, time.perf_counter() - t1, litellm, cpu
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median; default 5)")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds after /healthz before reading RSS (default 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("COMPACTION_GATE_CONFIG", "PYTHONDONTWRITEBYTECODE")}
        env["XDG_STATE_HOME"] = tmp
        before, after = _pair(Path(tmp))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--help": [*_script(), "--help"],
            "--version": [*_script(), "--version"],
            "check": [*_script(), "check", before, after],
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        serve: list[tuple[float, float, float, bool, float]] = []
        for cmd in commands.values():  # untimed: writes bytecode where a checkout lacks it
            _timed_run(cmd, env)
        _serve_once(env, 0)
        for _ in range(args.repeat):  # interleaved: machine load hits every figure alike
            for name, cmd in commands.items():
                times[name].append(_timed_run(cmd, env))
            serve.append(_serve_once(env, args.idle))
    wall = {name: statistics.median(t[0] for t in runs) for name, runs in times.items()}
    cpu = {name: statistics.median(t[1] for t in runs) for name, runs in times.items()}
    base, base_cpu = wall["python -c pass"], cpu["python -c pass"]
    print(f"startup, medians of {args.repeat} ({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f});"
          " CPU = the process's own user+system time, less sensitive to other load")
    print(f"  {'':<34} {'wall':>8} {'':>16} {'CPU':>8}")
    print(f"  {'python -c pass':<34} {base * 1000:6.0f} ms {'(baseline)':>16} {base_cpu * 1000:6.0f} ms")
    for name in ("--help", "--version", "check"):
        label = f"compaction-gate {name}" + (" (small pair)" if name == "check" else "")
        print(f"  {label:<34} {wall[name] * 1000:6.0f} ms {wall[name] / base:7.1f}x baseline {cpu[name] * 1000:6.0f} ms"
              f"   target ≤ {TARGETS[name] * 1000:.0f} ms")
    ready = statistics.median(s[0] for s in serve)
    ready_cpu = statistics.median(s[4] for s in serve)
    rss = statistics.median(s[1] for s in serve)
    stop = statistics.median(s[2] for s in serve)
    loaded = sum(s[3] for s in serve)
    print(f"  {'serve until /healthz':<34} {ready * 1000:6.0f} ms {ready / base:7.1f}x baseline {ready_cpu * 1000:6.0f} ms"
          f"   target ≤ {TARGETS['serve'] * 1000:.0f} ms")
    print(f"  {'serve idle RSS':<34} {rss:6.0f} MB   ({args.idle:g} s after /healthz; litellm imported in {loaded}/{len(serve)} runs)")
    print(f"  {'serve SIGTERM to exit':<34} {stop * 1000:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
