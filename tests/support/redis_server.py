"""A real ``redis-server`` (Debian's ``redis-server`` package) for the tests that need one.

Each :class:`RedisServer` runs its own server on a free loopback port with its own temp
dir: ``--save ''`` (no snapshots) unless ``aof`` asks for an append-only file with
``appendfsync always``. Tests skip, saying why, when the binary is absent
(:func:`require_redis`); ``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

__all__ = ["REDIS_BIN", "RedisServer", "free_port", "require_redis"]

REDIS_BIN = os.environ.get("CG_REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


def require_redis() -> str:
    """The redis-server binary, or skip the test saying why."""
    if not Path(REDIS_BIN).is_file():
        pytest.skip(f"needs redis-server ({REDIS_BIN} not found; apt-get install redis-server, as .ci/run does)")
    return REDIS_BIN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``start()`` / ``stop()`` / ``kill()`` / ``restart()`` a redis-server in ``dir``.
    ``aof``: append-only file, fsynced on every write (an acknowledged write survives a
    crash of the server). ``password``: ``requirepass``."""

    def __init__(self, dir: Path, *, aof: bool = False, password: str | None = None, port: int | None = None) -> None:
        self.bin = require_redis()
        self.dir = dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof = aof
        self.password = password
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _args(self) -> list[str]:
        args = [self.bin, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        return args

    def start(self, timeout: float = 10.0) -> RedisServer:
        log = (self.dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(self._args(), stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.dir / 'redis.log').read_text()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """SIGKILL (a crash: only what was fsynced survives)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
