"""Hot reload: the live policy behind a holder that swaps it atomically.

A reload happens on SIGHUP or when a watched file changes (the policy file and every file
of its ``extends`` chain; polled by mtime/size, no extra dependency). A file that fails
to load or validate never replaces the running policy: the holder keeps the old one,
logs why with ``file:line``, and exposes the error as ``last_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import yamlconf
from ..yamlconf import ConfigError
from .loader import load_policy, resolve_policy_path
from .model import Policy

log = logging.getLogger("compaction_gate.policy")


def policy_files(name_or_path: str) -> list[Path]:
    """The policy file and the files of its ``extends`` chain (best effort)."""
    out: list[Path] = []
    try:
        path = resolve_policy_path(name_or_path)
    except ConfigError:
        return out
    while path is not None and path.resolve() not in out and len(out) < 8:
        out.append(path.resolve())
        try:
            raw = yamlconf.load_file(path)
        except ConfigError:
            break
        ext = raw.get("extends") if isinstance(raw, dict) else None
        if not isinstance(ext, str):
            break
        try:
            path = resolve_policy_path(ext, relative_to=path.parent)
        except ConfigError:
            break
    return out


def _stamp(paths: list[Path]) -> tuple[tuple[str, float, int], ...]:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((str(p), st.st_mtime, st.st_size))
        except OSError:
            out.append((str(p), -1.0, -1))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    changed: bool
    error: str | None = None


class PolicyHolder:
    """Owns the live :class:`Policy`. ``policy`` is read without locks (an attribute swap
    is atomic); reloads are serialised."""

    def __init__(
        self,
        source: str,
        *,
        loader: Callable[[str], Policy] = load_policy,
        policy: Policy | None = None,
    ) -> None:
        self.source = source
        self._loader = loader
        self.policy: Policy = policy if policy is not None else loader(source)
        self.last_error: str | None = None
        self.generation = 1
        self._files = policy_files(source)
        self._stamp = _stamp(self._files)
        self._task: asyncio.Task[None] | None = None
        self._signal_installed = False

    @classmethod
    def fixed(cls, policy: Policy) -> PolicyHolder:
        """A holder for an in-memory policy (no file to watch)."""
        h = cls.__new__(cls)
        h.source = policy.source
        h._loader = lambda _s: policy
        h.policy = policy
        h.last_error = None
        h.generation = 1
        h._files = []
        h._stamp = ()
        h._task = None
        h._signal_installed = False
        return h

    def reload(self) -> ReloadResult:
        """Load the source again; on any error keep the running policy and log why."""
        try:
            new = self._loader(self.source)
        except ConfigError as exc:
            self.last_error = str(exc)
            log.error(
                "policy reload failed, keeping policy %r (%s): %s", self.policy.name, self.policy.source, exc
            )
            return ReloadResult(False, False, self.last_error)
        except Exception as exc:  # a loader bug must not take the old policy down
            self.last_error = f"{self.source}: {exc.__class__.__name__}: {exc}"
            log.exception("policy reload crashed, keeping policy %r", self.policy.name)
            return ReloadResult(False, False, self.last_error)
        self._files = policy_files(self.source) or self._files
        self._stamp = _stamp(self._files)
        changed = new != self.policy
        self.policy = new
        self.last_error = None
        self.generation += 1
        log.info("policy %r loaded from %s", new.name, new.source)
        return ReloadResult(True, changed)

    def check_files(self) -> ReloadResult | None:
        """Reload if a watched file changed since the last (attempted) load."""
        stamp = _stamp(self._files)
        if stamp == self._stamp:
            return None
        self._stamp = stamp  # a bad file is reported once, not on every poll
        return self.reload()

    # ------------------------------------------------------------------ asyncio glue

    def start(self, *, interval: float = 1.0, sighup: bool = True) -> None:
        """Start watching (in a running loop): poll the files, and reload on SIGHUP."""
        loop = asyncio.get_running_loop()
        if self._files and self._task is None:
            self._task = loop.create_task(self._watch(interval), name="policy-watch")
        if sighup and not self._signal_installed and hasattr(signal, "SIGHUP"):
            try:
                loop.add_signal_handler(signal.SIGHUP, self.reload)
                self._signal_installed = True
            except (NotImplementedError, RuntimeError, ValueError):
                log.debug("SIGHUP reload not available in this loop/thread")

    async def stop(self) -> None:
        if self._signal_installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._signal_installed = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.check_files()
            except Exception:  # never let the watcher die
                log.exception("policy watcher error")
