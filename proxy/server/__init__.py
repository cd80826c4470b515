"""The aiohttp layer: turns HTTP requests into Exchanges and Decisions into responses.

Public entry points: :func:`create_app`, :func:`start_server`, :func:`serve`, and the
hook contract in :mod:`proxy.server.hooks`.
"""

from proxy.server.app import create_app
from proxy.server.hooks import (
    Decision,
    Exchange,
    Interceptor,
    NoopInterceptor,
    Reject,
    ResponseTap,
)
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
