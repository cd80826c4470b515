"""The gate's operator surface without the forwarding proxy: ``/gate/`` (dashboard,
events, conversations, policy, spill), ``/metrics`` and ``/healthz``.

Used where something else forwards the traffic and the gate only decides — the LiteLLM
guardrail. The app's lifecycle is the gate's (tracker start/close, policy watcher), so
setting up its runner starts the gate even when no port is bound. Access rules are the
served proxy's (:mod:`proxy.dashboard.access`): the admin key when one is set, loopback
clients only otherwise.
"""

from __future__ import annotations

from aiohttp import web

from ..dashboard import setup_dashboard
from ..dashboard.access import gate_access_middleware
from ..gate.interceptor import GateInterceptor
from ..gate.wiring import install_gate
from ..metrics import METRICS_KEY, Metrics, metrics_handler
from ..server.app import healthz

__all__ = ["create_operator_app"]


def create_operator_app(gate: GateInterceptor, *, admin_key: str | None = None, watch: bool = True) -> web.Application:
    """An app serving the gate's own endpoints for ``gate`` (its decisions counted in the
    app's :class:`~proxy.metrics.Metrics`)."""
    app = web.Application(middlewares=[gate_access_middleware(admin_key)])
    app[METRICS_KEY] = Metrics()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_handler)
    setup_dashboard(app)
    install_gate(app, gate, watch=watch)
    return app
