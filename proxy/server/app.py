"""aiohttp application factory: routes, lifecycle, router-error rendering.

``create_app(config, interceptor)`` wires the proxy. Other components add their
own routes (``/gate/...``, ``/metrics``) to the returned app before it starts;
they never collide with ``/v1/...``. The upstream ``ClientSession`` is created and
closed by a ``cleanup_ctx`` so in-flight streams keep it until the server has
finished its graceful-shutdown wait.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from proxy import __version__
from proxy.config import ProxyConfig, ServerSettings
from proxy.dashboard import setup_dashboard
from proxy.dashboard.access import gate_access_middleware
from proxy.metrics import METRICS_KEY, Metrics, metrics_handler
from proxy.server.errors import ProxyError, error_response
from proxy.server.forward import _after_response, new_record, proxy_handler
from proxy.server.hooks import Interceptor, NoopInterceptor
from proxy.server.record import H_ACTION, H_CONVERSATION, UNKNOWN_CONVERSATION
from proxy.server.routes import detect_dialect
from proxy.server.state import CONFIG_KEY, INTERCEPTOR_KEY, SESSION_KEY

__all__ = ["create_app", "make_session"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: aiohttp adds these to every client request unless told not to; a transparent
#: proxy must send only what the client sent.
_SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


def make_session(config: ProxyConfig) -> aiohttp.ClientSession:
    """The pooled upstream session.

    ``auto_decompress=False`` keeps response bytes exactly as upstream sent them
    (the ``content-encoding`` header is relayed with them). No cookie jar: cookies
    from one client must never reach another.
    """
    server = config.server
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=None,
        sock_connect=server.connect_timeout,
        sock_read=server.read_timeout,
    )
    connector = aiohttp.TCPConnector(limit=server.max_connections, ttl_dns_cache=300, ssl=upstream_tls(server))
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=_SKIP_AUTO_HEADERS,
        trust_env=False,
    )


def upstream_tls(server: ServerSettings) -> ssl.SSLContext | bool:
    """How upstream certificates are verified: the system's CAs (``True``), plus those of
    ``server.upstream_ca_file`` when it is set. Never off."""
    if server.upstream_ca_file is None:
        return True
    return ssl.create_default_context(cafile=server.upstream_ca_file)  # as config checked it


async def _session_ctx(app: web.Application) -> AsyncIterator[None]:
    session = make_session(app[CONFIG_KEY])
    app[SESSION_KEY] = session
    yield
    await session.close()


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves requests (does not call upstream)."""
    return web.json_response({"status": "ok", "version": __version__})


@web.middleware
async def router_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render routing failures (unknown route, bad method) as dialect errors."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status not in (404, 405) or request.path.startswith("/gate/"):
            raise
        dialect = detect_dialect(request.headers)
        if exc.status == 404:
            hint = ""
            if not request.path.startswith("/v1/"):
                hint = (
                    " This proxy serves /v1/... (OpenAI SDKs: base URL http://HOST:PORT/v1;"
                    " Anthropic SDKs: http://HOST:PORT)."
                )
            err = ProxyError(
                404,
                f"Unknown route {request.method} {request.path}.{hint}",
                code="unknown_route",
            )
        else:
            err = ProxyError(
                405, f"Method {request.method} not allowed on {request.path}.", code="method_not_allowed"
            )
        resp = error_response(dialect, err)
        resp.headers[H_CONVERSATION] = UNKNOWN_CONVERSATION
        resp.headers[H_ACTION] = "none"
        if isinstance(exc, web.HTTPMethodNotAllowed):
            resp.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        # logged and counted like any request (the metric's route label is bounded:
        # an unknown path counts as "other" / "/v1/other", never as itself)
        rec = new_record(request)
        rec.status, rec.dialect, rec.error = exc.status, dialect, err.code
        asyncio.get_running_loop().call_soon(_after_response, request.app, rec)
        return resp


def create_app(
    config: ProxyConfig,
    interceptor: Interceptor | None = None,
    *,
    metrics: Metrics | None = None,
) -> web.Application:
    """Build the proxy application for ``config``.

    ``interceptor`` defaults to :class:`~proxy.server.hooks.NoopInterceptor`.
    ``metrics`` (a fresh :class:`~proxy.metrics.Metrics` by default) is stored under
    :data:`~proxy.metrics.METRICS_KEY` for every component and served at ``/metrics``;
    the dashboard is served at ``/gate/``. Both (and every ``/gate/`` route others add)
    sit behind :func:`~proxy.dashboard.access.gate_access_middleware`: the admin key
    when ``gate.admin_key`` is set, loopback clients only otherwise.
    """
    app = web.Application(
        middlewares=[gate_access_middleware(config.gate.admin_key), router_errors],
        client_max_size=config.server.max_body_bytes,
    )
    app[CONFIG_KEY] = config
    app[INTERCEPTOR_KEY] = interceptor if interceptor is not None else NoopInterceptor()
    app[METRICS_KEY] = metrics if metrics is not None else Metrics()
    app.cleanup_ctx.append(_session_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_handler)
    setup_dashboard(app)
    app.router.add_route("*", "/v1/{tail:.*}", proxy_handler)
    return app
