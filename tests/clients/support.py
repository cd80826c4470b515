"""Shared helpers of the real-client conformance tests (Claude Code, aider).

Each test drives a real client binary through the gate (:class:`tests.e2e.stack.GateStack`)
to a scripted upstream (:class:`tests.support.fake_upstream.FakeUpstream`, real wire
formats) that plays the migration story of :mod:`tests.clients.story`. The clients run
offline: ``HTTPS_PROXY`` points at a dead loopback port (``NO_PROXY`` exempts the gate),
telemetry and auto-update are off, ``HOME`` is a fresh temporary directory. The shell
commands the clients really run (``alembic upgrade``/``downgrade``) hit a small stand-in
``alembic`` on ``PATH`` that prints what Alembic prints and logs its arguments: the final
action of a story is read from that log, i.e. from what the client actually executed.

Binaries are found through an environment variable (``CG_CLAUDE_BIN``, ``CG_AIDER_BIN``),
else the path ``.ci/run`` installs them to (``/opt/cg-clients/…``), else ``PATH``; a test
whose binary is absent skips, saying which and how ``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: Where ``.ci/run`` installs the clients.
CLIENTS_ROOT = Path("/opt/cg-clients")

#: A dead loopback port: anything a client tries to reach on the internet fails at once.
DEAD_PROXY = "http://127.0.0.1:9"

_ALEMBIC = """#!/bin/sh
# stand-in for alembic (compaction-gate client tests): prints what alembic prints, logs argv
echo "$*" >> "$ALEMBIC_LOG"
case "$1" in
  upgrade)
    echo "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl."
    echo "INFO  [alembic.runtime.migration] Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d, add orders table";;
  downgrade)
    case "$2" in
      1a2b3c4d5e6f|-1) echo "INFO  [alembic.runtime.migration] Running downgrade 4f9a2c1e7b3d -> 1a2b3c4d5e6f, add orders table";;
      *) echo "FAILED: Can't locate revision identified by '$2'" >&2; exit 1;;
    esac;;
  *) echo "alembic $*";;
esac
"""


def find_binary(env_var: str, installed: Path, name: str, how: str) -> str:
    """The client binary, or skip the test saying which one is missing and how CI gets it."""
    given = os.environ.get(env_var)
    if given:
        if os.access(given, os.X_OK):
            return given
        pytest.skip(f"{env_var}={given} is not an executable file")
    if installed.exists() and os.access(installed, os.X_OK):
        return str(installed)
    found = shutil.which(name)
    if found:
        return found
    pytest.skip(f"{name} binary is absent (set {env_var}, or install it as .ci/run does: {how})")


@dataclass
class Workspace:
    """A client's sandbox: HOME, working directory, the stand-in alembic and its log."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cwd(self) -> Path:
        return self.root / "work"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def alembic_log(self) -> Path:
        return self.root / "alembic.log"

    @classmethod
    def create(cls, root: Path) -> Workspace:
        ws = cls(root)
        for d in (ws.home, ws.cwd, ws.bin):
            d.mkdir(parents=True, exist_ok=True)
        script = ws.bin / "alembic"
        script.write_text(_ALEMBIC)
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        ws.alembic_log.touch()
        return ws

    def env(self, **extra: str) -> dict[str, str]:
        """The offline environment every client runs with."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE"))}
        env.update(
            HOME=str(self.home),
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            ALEMBIC_LOG=str(self.alembic_log),
            HTTPS_PROXY=DEAD_PROXY,
            HTTP_PROXY=DEAD_PROXY,
            https_proxy=DEAD_PROXY,
            http_proxy=DEAD_PROXY,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        env.update(extra)
        return env

    def alembic_calls(self) -> list[str]:
        """Every alembic command line the client ran, in order."""
        return [line.strip() for line in self.alembic_log.read_text().splitlines() if line.strip()]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def run(argv: list[str], ws: Workspace, env: dict[str, str], *, stdin: str | None = None, timeout: float = 240) -> Run:
    """Run a client to completion (generous timeout: a loaded 2-core machine)."""
    p = subprocess.run(
        argv,
        cwd=ws.cwd,
        env=env,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(p.returncode, p.stdout, p.stderr)


def events_of(stack: Any, kind: str | None = None) -> list[dict[str, Any]]:
    evs: list[dict[str, Any]] = stack.events()
    return [e for e in evs if kind is None or e.get("kind") == kind]


def conversation_ids(stack: Any) -> list[str]:
    status, body = stack.get("/gate/conversations")
    assert status == 200, body
    return [c["id"] for c in body["conversations"]]
