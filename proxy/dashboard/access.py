"""Access control for the operator surfaces: ``/gate/…`` and ``/metrics``.

Contract:

- With an admin key configured, every protected request must present it, from any
  address: header ``x-gate-admin-key: KEY``, ``Authorization: Bearer KEY`` (what
  Prometheus scrapers send), or the session cookie set after opening the dashboard
  once as ``/gate/?key=KEY`` (the key is then stripped from the URL by a redirect).
  The cookie holds an HMAC derived from the key, never the key itself.
- With no admin key, protected paths are served to loopback clients only
  (127.0.0.0/8, ::1, IPv4-mapped loopback); anyone else gets 403.
- ``/gate/spill/…`` is *not* protected here: spill handles are tenant-scoped by the
  API key of the caller and are meant to be fetched by agents.
- Keys are compared in constant time and never logged or echoed.

Use :func:`gate_access_middleware` as an aiohttp middleware (it ignores every other
path, so proxied ``/v1/`` traffic is untouched), or call :func:`check_access` from a
handler.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.typedefs import Middleware

from ..server.errors import gate_error

__all__ = [
    "ADMIN_COOKIE",
    "ADMIN_HEADER",
    "ADMIN_KEY",
    "check_access",
    "gate_access_middleware",
    "is_loopback",
    "is_protected_path",
]

ADMIN_HEADER = "x-gate-admin-key"
ADMIN_COOKIE = "compaction_gate_admin"

#: The configured admin key (``None`` or empty: loopback-only access).
ADMIN_KEY: web.AppKey[str | None] = web.AppKey("compaction_gate_admin_key", str)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_protected_path(path: str) -> bool:
    """True for the dashboard, the gate API and ``/metrics`` (not spill, not /healthz)."""
    if path == "/metrics" or path.startswith("/metrics/"):
        return True
    if path == "/gate" or path.startswith("/gate/"):
        return not (path == "/gate/spill" or path.startswith("/gate/spill/"))
    return False


def is_loopback(remote: str | None) -> bool:
    """True when ``remote`` is a loopback address (IPv4, IPv6 or IPv4-mapped)."""
    if not remote:
        return False
    try:
        ip = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _cookie_value(admin_key: str) -> str:
    mac = hmac.new(admin_key.encode(), b"compaction-gate dashboard session", hashlib.sha256)
    return mac.hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _error(status: int, message: str) -> web.Response:
    """The refusal as every other error the proxy itself answers: ``{"error": {…}}`` with a
    code, and ``x-compaction-gate-error`` (so it is never taken for upstream's)."""
    resp = gate_error(status, message, "gate_access_denied")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def check_access(request: web.Request, admin_key: str | None) -> web.StreamResponse | None:
    """Return ``None`` when ``request`` may proceed, else the response to send."""
    if not admin_key:
        if is_loopback(request.remote):
            return None
        return _error(
            403,
            f"The gate dashboard and metrics are served to loopback clients only, and this "
            f"request came from {request.remote or 'an unknown address'} (behind `docker run -p`, "
            "the host's requests arrive from the bridge network). To allow it, set an admin "
            "key: gate.admin_key in the config file (the Docker image reads "
            "COMPACTION_GATE_ADMIN_KEY), then send it as the x-gate-admin-key header or "
            "Authorization: Bearer KEY, or open /gate/?key=KEY once in a browser.",
        )
    header = request.headers.get(ADMIN_HEADER)
    if header is not None and _same(header, admin_key):
        return None
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer " and _same(auth[7:].strip(), admin_key):
        return None
    cookie = request.cookies.get(ADMIN_COOKIE)
    if cookie is not None and _same(cookie, _cookie_value(admin_key)):
        return None
    query_key = request.query.get("key")
    if query_key is not None and _same(query_key, admin_key) and request.method == "GET":
        rest = [(k, v) for k, v in request.query.items() if k != "key"]
        location = request.path + ("?" + urlencode(rest) if rest else "")
        response = web.Response(status=303, headers={"Location": location})
        response.set_cookie(
            ADMIN_COOKIE,
            _cookie_value(admin_key),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        response.headers["Cache-Control"] = "no-store"
        return response
    return _error(401, f"An admin key is required: send it as the {ADMIN_HEADER} header.")


def gate_access_middleware(admin_key: str | None) -> Middleware:
    """An aiohttp middleware applying :func:`check_access` to protected paths.

    ``admin_key`` is captured at construction; pass ``None`` for loopback-only.
    If the app also holds :data:`ADMIN_KEY`, that value wins (lets a config reload
    change the key without rebuilding the middleware chain).
    """

    @web.middleware
    async def middleware(request: web.Request, handler: _Handler) -> web.StreamResponse:
        if not is_protected_path(request.path):
            return await handler(request)
        key = request.app.get(ADMIN_KEY, admin_key)
        denied = check_access(request, key)
        if denied is not None:
            return denied
        return await handler(request)

    return middleware
