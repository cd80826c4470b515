"""``compaction-gate serve --workers N``: N processes on one machine serving one port.

The supervisor (this module, the process the user started) listens on the address,
prepares the shared state (the SQLite schema, once), makes a private, empty
``PROMETHEUS_MULTIPROC_DIR``, and starts N workers: ``compaction-gate serve`` again, each
given the connections the supervisor accepts in turn (round-robin,
:mod:`proxy.server.handoff`) and each its own event loop and core, sharing the state through the configured
store (SQLite in WAL mode, or Redis; the memory backend cannot be shared and is
refused). A worker that dies is started again (its metrics files stay: counters keep
their totals). SIGTERM/SIGINT are passed on; each worker drains its requests for
``server.shutdown_grace_seconds`` and the supervisor exits once they have.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from proxy.config import ProxyConfig
from proxy.server.handoff import HANDOFF_FD_ENV, Dispatcher

__all__ = ["READY_FD_ENV", "refuse_reason", "run_workers", "worker_ready"]

#: The pipe a worker writes "ready" to once it listens (set by the supervisor).
READY_FD_ENV = "COMPACTION_GATE_READY_FD"
#: Restarts of crashed workers allowed per minute before the supervisor gives up.
MAX_RESTARTS_PER_MINUTE = 10
START_TIMEOUT = 120.0


def refuse_reason(config: ProxyConfig) -> str | None:
    """Why ``config`` cannot be served by several workers (``None``: it can)."""
    if config.server.workers > 1 and config.state.backend == "memory":
        return (
            "state.backend memory cannot be shared by several workers (each would keep its own "
            "conversations, and a compaction reaching another worker would not be protected): "
            "use state.backend sqlite (one machine) or redis, or --workers 1"
        )
    return None


def worker_ready() -> None:
    """Tell the supervisor this worker listens (no-op outside ``--workers``)."""
    fd = os.environ.get(READY_FD_ENV)
    if not fd:
        return
    with contextlib.suppress(OSError, ValueError):
        os.write(int(fd), b"ready\n")
        os.close(int(fd))


def _listen(host: str, port: int) -> socket.socket:
    """The socket listening on ``host:port`` (``0`` picks a port) for the workers."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, addr = infos[0]
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(addr)
        s.listen(1024)
    except BaseException:
        s.close()
        raise
    return s


def _metrics_dir() -> tuple[Path, bool]:
    """The multiprocess metrics directory, emptied; ``True`` when made here (removed at
    exit)."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for f in path.glob("*.db"):
            f.unlink()
        return path, False
    return Path(tempfile.mkdtemp(prefix="compaction-gate-metrics-")), True


def _prepare_state(config: ProxyConfig) -> None:
    """Create the shared SQLite schema once, before the workers race to."""
    if config.state.backend != "sqlite":
        return
    import asyncio

    from proxy.state.sqlite_shared import SharedSQLiteStore

    async def init() -> None:
        store = SharedSQLiteStore(config.state.file)
        await store.open()
        await store.close()

    asyncio.run(init())


def _worker_argv(args: argparse.Namespace, port: int, index: int, workers: int) -> list[str]:
    argv = [sys.executable, "-m", "proxy.cli", "serve", "--port", str(port), "--workers", str(workers)]
    argv += ["--worker-index", str(index)]
    for flag, value in (("--config", args.config), ("--host", args.host), ("--upstream", args.upstream), ("--policy", args.policy)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


class _Worker:
    def __init__(self, index: int, argv: list[str], env: dict[str, str], dispatcher: Dispatcher) -> None:
        self.index = index
        self.argv = argv
        self.env = env
        self.dispatcher = dispatcher
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_r: int | None = None

    def start(self) -> None:
        r, w = os.pipe()
        channel = self.dispatcher.channel_for(self.index)
        env = {**self.env, READY_FD_ENV: str(w), HANDOFF_FD_ENV: str(channel)}
        try:
            self.proc = subprocess.Popen(self.argv, env=env, pass_fds=(w, channel))
        finally:
            os.close(w)
            os.close(channel)
        self.ready_r = r

    def wait_ready(self, deadline: float) -> bool:
        r = self.ready_r
        if r is None:
            return True
        import select

        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            ready, _, _ = select.select([r], [], [], 0.2)
            if ready:
                data = os.read(r, 64)
                os.close(r)
                self.ready_r = None
                return data.startswith(b"ready")
        return False


def run_workers(
    config: ProxyConfig, args: argparse.Namespace, banner: Callable[[ProxyConfig, str, int], None]
) -> int:
    """Supervise ``config.server.workers`` workers until SIGTERM/SIGINT (see the module
    docstring). ``banner(config, host, port)`` is printed once every worker listens."""
    reason = refuse_reason(config)
    if reason is not None:
        print(f"compaction-gate: {reason}", file=sys.stderr)
        return 2
    n = config.server.workers
    try:
        listener = _listen(config.server.host, config.server.port)
    except OSError as exc:
        print(f"compaction-gate: cannot listen on {config.server.host}:{config.server.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    port = int(listener.getsockname()[1])
    dispatcher = Dispatcher(listener, n)
    metrics_dir, made = _metrics_dir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    workers = [_Worker(i, _worker_argv(args, port, i, n), env, dispatcher) for i in range(n)]
    try:
        _prepare_state(config)
        for w in workers:
            w.start()
        dispatcher.start()
        deadline = time.monotonic() + START_TIMEOUT
        if not all(w.wait_ready(deadline) for w in workers):
            print("compaction-gate: a worker failed to start (see its log above)", file=sys.stderr)
            return 1
        banner(config, config.server.host, port)
        restarts: list[float] = []
        while not stopping:
            time.sleep(0.2)
            for w in workers:
                if stopping or w.proc is None or w.proc.poll() is None:
                    continue
                _dead(metrics_dir, w.proc.pid)
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < 60] + [now]
                if len(restarts) > MAX_RESTARTS_PER_MINUTE:
                    print("compaction-gate: workers keep dying; giving up", file=sys.stderr)
                    return 1
                print(f"compaction-gate: worker {w.index} exited ({w.proc.returncode}); starting it again", file=sys.stderr)
                w.start()
        return 0
    finally:
        dispatcher.stop()
        listener.close()
        _stop_all(workers, config.server.shutdown_grace_seconds + 5.0)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if made:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _dead(metrics_dir: Path, pid: int) -> None:
    with contextlib.suppress(Exception):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(metrics_dir))  # type: ignore[no-untyped-call]


def _stop_all(workers: list[_Worker], grace: float) -> None:
    procs = [w.proc for w in workers if w.proc is not None and w.proc.poll() is None]
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
