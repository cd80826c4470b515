"""Wiring the gate into the aiohttp app: routes, lifecycle, and a factory from config.

``build_gate(config)`` makes the tracker (state store from ``config.state``), the policy
holder (``config.policy``: preset name or file) and the :class:`GateInterceptor`;
``install_gate(app, gate)`` adds ``GET /gate/events``, ``GET /gate/spill/{handle}`` and
``GET /gate/policy`` and ties the tracker and the policy watcher (file change + SIGHUP)
to the app's lifecycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from ..metrics import METRICS_KEY
from ..policy import PolicyHolder
from ..policy.detectors import policy_catalog
from . import events as events_mod
from . import spill as spill_mod
from .interceptor import GateInterceptor

GATE_KEY: web.AppKey[GateInterceptor] = web.AppKey("compaction_gate.gate", GateInterceptor)


async def policy_info(request: web.Request) -> web.Response:
    holder = request.app[GATE_KEY].policies
    return web.json_response(
        {
            "policy": holder.policy.describe(),
            "generation": holder.generation,
            "last_error": holder.last_error,
        }
    )


def install_gate(
    app: web.Application,
    gate: GateInterceptor,
    *,
    watch: bool = True,
    interval: float = 1.0,
    conversations_api: bool = True,
) -> None:
    """Register the gate's routes and lifecycle on ``app``. With ``conversations_api``
    the tracker's ``/gate/conversations`` API is added too (it owns the tracker's
    start/close); ``/gate/events`` is always the gate's decision log."""
    app[GATE_KEY] = gate
    metrics = app.get(METRICS_KEY)
    if metrics is not None:  # count the gate's decisions where /metrics serves them
        gate.metrics = metrics
        tracker = gate.tracker
        metrics.track_conversations(lambda: len(tracker.conversations()))
    if conversations_api:
        from .api import add_gate_routes

        add_gate_routes(app, gate.tracker, events=False)
    events_mod.add_routes(app, gate.events)
    spill_mod.add_routes(app, gate.spill)
    app.router.add_get("/gate/policy", policy_info)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        if not conversations_api:
            await gate.tracker.start()
        if watch:
            gate.policies.start(interval=interval)
        # Compile the policy's identifier catalogue now, off the event loop, rather than
        # on the first request (it is cached per policy object afterwards). Not awaited:
        # the server listens at once; a request arriving before it is done waits for it.
        gate.warming = asyncio.get_running_loop().run_in_executor(None, warm_catalog, gate.policies.policy)
        yield
        await gate.policies.stop()
        gate.spill.close()
        if not conversations_api:
            await gate.tracker.close()

    app.cleanup_ctx.append(lifecycle)


def warm_catalog(policy: Any) -> None:
    """Build what the first analysis would otherwise build: the policy's catalogue, or
    the built-in one it falls back to."""
    if policy_catalog(policy) is None:
        from ..core.identifiers.catalog import Catalog

        Catalog.load_default()


def build_tracker(config: Any) -> Any:
    from ..state.memory import MemoryStore
    from .tracker import Tracker, TrackerConfig

    state = config.state
    if state.backend == "sqlite":
        from ..state.sqlite import SQLiteStore

        store: Any = SQLiteStore(state.file)
    else:
        store = MemoryStore()
    return Tracker(store, TrackerConfig(ttl_seconds=float(state.ttl_seconds), max_conversations=state.max_conversations))


def spill_path(config: Any) -> Path | None:
    """Where spilled regions are kept: beside the SQLite state (``state.sqlite3`` →
    ``state.spill.sqlite3``); ``None`` (memory only) with the memory backend."""
    state = config.state
    return state.file.with_suffix(".spill.sqlite3") if state.backend == "sqlite" else None


def build_gate(config: Any, *, tracker: Any | None = None) -> GateInterceptor:
    """Raises :class:`proxy.yamlconf.ConfigError` (file:line) for a bad policy."""
    holder = PolicyHolder(config.policy)
    spill = spill_mod.SpillStore(path=spill_path(config))
    return GateInterceptor(tracker if tracker is not None else build_tracker(config), holder, spill=spill)


def create_gate_app(config: Any) -> web.Application:
    """The served application (``compaction-gate serve``): forwarding, tracking, the gate
    under ``config.policy`` (hot-reloaded on file change or SIGHUP), its API, the
    dashboard and ``/metrics``. Raises :class:`proxy.yamlconf.ConfigError` for a bad
    policy so ``serve`` exits 2 with file:line."""
    from ..server.app import create_app

    gate = build_gate(config)
    app = create_app(config, gate)
    install_gate(app, gate, watch=True)
    return app
