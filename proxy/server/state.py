"""Typed application state keys (``web.AppKey``) shared by the server modules."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from proxy.config import ProxyConfig
from proxy.server.hooks import Interceptor

__all__ = ["CONFIG_KEY", "INTERCEPTOR_KEY", "SESSION_KEY"]

#: The validated, frozen configuration the app was built with.
CONFIG_KEY = web.AppKey("compaction_gate.config", ProxyConfig)
#: The interceptor consulted for every proxied request.
INTERCEPTOR_KEY: web.AppKey[Interceptor] = web.AppKey("compaction_gate.interceptor")
#: The pooled upstream session; exists between startup and cleanup (cleanup_ctx).
SESSION_KEY = web.AppKey("compaction_gate.upstream_session", aiohttp.ClientSession)
