"""The aiohttp layer: turns HTTP requests into Exchanges and Decisions into responses.

Public entry points: :func:`create_app`, :func:`start_server`, :func:`serve`, and the
hook contract in :mod:`proxy.server.hooks`.

The app and the runner are imported on first use (PEP 562): they import the dashboard,
whose modules import this package's leaf modules (``proxy.server.errors``), so importing
them here, at once, made ``import proxy.dashboard.access`` fail on a fresh interpreter
(the dashboard module half-initialised when the app asked it for its middleware).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from proxy.server.hooks import (
    Decision,
    Exchange,
    Interceptor,
    NoopInterceptor,
    Reject,
    ResponseTap,
)

if TYPE_CHECKING:
    from proxy.server.app import create_app
    from proxy.server.runner import RunningServer, serve, start_server

__all__ = [
    "Decision",
    "Exchange",
    "Interceptor",
    "NoopInterceptor",
    "Reject",
    "ResponseTap",
    "RunningServer",
    "create_app",
    "serve",
    "start_server",
]

_LAZY = {
    "create_app": "proxy.server.app",
    "RunningServer": "proxy.server.runner",
    "serve": "proxy.server.runner",
    "start_server": "proxy.server.runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
