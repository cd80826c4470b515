"""The operator dashboard served by the proxy at ``/gate/``.

Static HTML/JS/CSS shipped inside the package (``static/``), no front-end build step
and no external assets, so it works offline. The page reads the gate's JSON API
(``/gate/conversations``, ``/gate/conversations/{id}``, ``/gate/events``), which the
tracker and the gate interceptor serve.

Access control lives in :mod:`proxy.dashboard.access` and applies to the whole
``/gate/`` tree and ``/metrics``.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

__all__ = ["ASSETS", "asset_bytes", "setup_dashboard"]

#: Files served under ``/gate/assets/``, with their content types.
ASSETS: dict[str, str] = {
    "app.js": "text/javascript",
    "style.css": "text/css",
}

#: The page only talks to this proxy; everything else is refused by the browser.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def asset_bytes(name: str) -> bytes:
    """Read one packaged static file (``index.html`` or a name in :data:`ASSETS`)."""
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def _index(request: web.Request) -> web.Response:
    return web.Response(
        body=asset_bytes("index.html"),
        content_type="text/html",
        charset="utf-8",
        headers=_HEADERS,
    )


async def _redirect(request: web.Request) -> web.Response:
    location = "/gate/" + (f"?{request.query_string}" if request.query_string else "")
    return web.Response(status=308, headers={"Location": location})


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = ASSETS.get(name)
    if content_type is None:
        raise web.HTTPNotFound()
    return web.Response(
        body=asset_bytes(name), content_type=content_type, charset="utf-8", headers=_HEADERS
    )


def setup_dashboard(app: web.Application) -> None:
    """Add ``GET /gate``, ``/gate/`` and ``/gate/assets/{name}`` to ``app``."""
    app.router.add_get("/gate", _redirect)
    app.router.add_get("/gate/", _index)
    app.router.add_get("/gate/assets/{name}", _asset)
