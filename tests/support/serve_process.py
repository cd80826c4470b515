"""A real ``compaction-gate serve`` process (``python -m proxy serve``) for tests that
need the whole product: its stderr, its files, its signals and its exit."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ServeProcess:
    proc: asyncio.subprocess.Process
    url: str
    #: every stderr line so far (the listening line included)
    stderr: list[bytes] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.stderr.append(line)

    def log(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stderr:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"raw": line.decode("utf-8", "replace")})
        return out

    async def stop(self, timeout: float = 20.0, *, signal: bool = True) -> int:
        """SIGTERM (unless ``signal`` is false: it was sent already; a second one during
        the exit would kill the process), then wait for the exit (and the rest of stderr)."""
        if signal and self.proc.returncode is None:
            self.proc.terminate()
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, timeout)
        return code


async def start_serve(config: dict[str, Any], workdir: Path, *, extra_env: dict[str, str] | None = None) -> ServeProcess:
    """Write ``config`` to ``workdir/config.yaml`` and serve it (port 0); returns once the
    process logged that it listens."""
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_GATE_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra_env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(path), "--port", "0",
        cwd=str(workdir), env=env, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    lines: list[bytes] = []
    try:
        while True:
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
            if not line:
                raise AssertionError(f"serve exited before listening: {b''.join(lines)!r}")
            lines.append(line)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("msg") == "listening":
                break
    except BaseException:  # never leave a process behind that the caller cannot stop
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    sp = ServeProcess(proc, record["url"], lines)
    sp._reader = asyncio.create_task(sp._read())
    return sp
