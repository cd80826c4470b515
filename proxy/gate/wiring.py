"""Wiring the gate into the aiohttp app: routes, lifecycle, and a factory from config.

``build_gate(config)`` makes the tracker (state store from ``config.state``), the policy
holder (``config.policy``: preset name or file) and the :class:`GateInterceptor`;
``install_gate(app, gate)`` adds ``GET /gate/events``, ``GET /gate/spill/{handle}`` and
``GET /gate/policy`` and ties the tracker and the policy watcher (file change + SIGHUP)
to the app's lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from ..metrics import METRICS_KEY
from ..policy import PolicyHolder
from ..policy.detectors import policy_catalog
from ..state.protocol import StateUnavailable
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
        if tracker.shared:  # every replica's conversations: counted in the store at scrape

            async def count_conversations() -> None:
                with contextlib.suppress(StateUnavailable):
                    metrics.set_conversations_tracked((await tracker.recent(limit=1))[0])

            metrics.before_scrape.append(count_conversations)
        else:
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


def build_store(config: Any) -> Any:
    """The state store ``config.state`` names: Redis (shared by every replica), SQLite
    (one process; shared in WAL mode by ``server.workers`` > 1 processes) or memory."""
    state, workers = config.state, config.server.workers
    if state.backend == "redis":
        from ..state.redis import RedisStore

        return RedisStore(
            state.url,
            prefix=state.key_prefix,
            ttl_seconds=float(state.ttl_seconds),
            timeout=float(state.timeout_seconds),
        )
    if state.backend == "sqlite":
        if workers > 1:
            from ..state.sqlite_shared import SharedSQLiteStore

            return SharedSQLiteStore(state.file)
        from ..state.sqlite import SQLiteStore

        return SQLiteStore(state.file)
    if workers > 1:
        raise ValueError("state.backend memory cannot be shared by several workers: use sqlite or redis")
    from ..state.memory import MemoryStore

    return MemoryStore()


def build_tracker(config: Any) -> Any:
    from .tracker import Tracker, TrackerConfig

    state = config.state
    return Tracker(
        build_store(config),
        TrackerConfig(
            ttl_seconds=float(state.ttl_seconds),
            max_conversations=state.max_conversations,
            max_memory_bytes=None if state.max_memory_mb is None else int(state.max_memory_mb * 2**20),
            hot_conversations=state.hot_conversations,
        ),
    )


def spill_storage(config: Any, tracker: Any) -> Any:
    """Where spilled regions persist: with the Redis state; beside the SQLite state
    (``state.sqlite3`` → ``state.spill.sqlite3``); nowhere (memory only) with memory."""
    state = config.state
    if state.backend == "redis":
        return tracker.store.spills()
    if state.backend == "sqlite":
        from ..state.spill import SQLiteSpills

        return SQLiteSpills(state.file.with_suffix(".spill.sqlite3"))
    return None


def spill_path(config: Any) -> Path | None:
    """The spill file beside the SQLite state (``None`` for other backends)."""
    state = config.state
    return state.file.with_suffix(".spill.sqlite3") if state.backend == "sqlite" else None


def build_gate(config: Any, *, tracker: Any | None = None) -> GateInterceptor:
    """Raises :class:`proxy.yamlconf.ConfigError` (file:line) for a bad policy."""
    from .interceptor import GateConfig

    holder = PolicyHolder(config.policy)
    tracker = tracker if tracker is not None else build_tracker(config)
    spill = spill_mod.SpillStore(storage=spill_storage(config, tracker))
    events = events_mod.StoreEventLog(tracker) if tracker.shared else None
    return GateInterceptor(
        tracker, holder, spill=spill, events=events, config=GateConfig(fail_open=config.gate.fail_open)
    )


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
