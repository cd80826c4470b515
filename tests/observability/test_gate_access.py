"""Access control for /gate/ and /metrics: admin key, cookie, loopback-only default."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from proxy.dashboard.access import (
    ADMIN_COOKIE,
    ADMIN_HEADER,
    check_access,
    gate_access_middleware,
    is_loopback,
    is_protected_path,
)

KEY = "admin-key-for-tests-5f1c"


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _app(admin_key: str | None) -> web.Application:
    app = web.Application(middlewares=[gate_access_middleware(admin_key)])
    for path in ("/gate/", "/gate/events", "/metrics", "/gate/spill/abc", "/healthz", "/v1/models"):
        app.router.add_get(path, _ok)
    return app


@pytest.mark.parametrize(
    ("path", "protected"),
    [
        ("/gate", True), ("/gate/", True), ("/gate/events", True), ("/gate/assets/app.js", True),
        ("/metrics", True), ("/gate/spill/abc", False), ("/healthz", False),
        ("/v1/chat/completions", False), ("/gateway", False),
    ],
)
def test_protected_paths(path: str, protected: bool) -> None:
    assert is_protected_path(path) is protected


@pytest.mark.parametrize(
    ("remote", "loopback"),
    [("127.0.0.1", True), ("127.8.9.1", True), ("::1", True), ("::ffff:127.0.0.1", True),
     ("10.0.0.5", False), ("::ffff:10.0.0.5", False), ("192.168.1.2", False), (None, False),
     ("not-an-ip", False)],
)
def test_loopback_detection(remote: str | None, loopback: bool) -> None:
    assert is_loopback(remote) is loopback


def test_without_admin_key_remote_clients_are_refused() -> None:
    request = make_mocked_request("GET", "/gate/", transport=_Transport("10.1.2.3"))
    denied = check_access(request, None)
    assert denied is not None and denied.status == 403
    # the refusal says how to fix it (the Docker bridge case is the common one)
    import json

    message = json.loads(denied.text or "")["error"]["message"]
    assert "10.1.2.3" in message and "gate.admin_key" in message and "COMPACTION_GATE_ADMIN_KEY" in message
    assert "x-gate-admin-key" in message and "/gate/?key=" in message
    # the proxy's own answer, marked as such (never taken for upstream's)
    assert denied.headers["x-compaction-gate-error"] == "gate_access_denied"
    assert json.loads(denied.text or "")["error"]["code"] == "gate_access_denied"
    wrong = check_access(make_mocked_request("GET", "/gate/", transport=_Transport("10.1.2.3")), "k" * 24)
    assert wrong is not None and wrong.status == 401 and wrong.headers["x-compaction-gate-error"] == "gate_access_denied"


class _Transport:
    def __init__(self, host: str) -> None:
        self._host = host

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self._host, 40000) if name == "peername" else default


def test_with_admin_key_remote_clients_need_it() -> None:
    remote = _Transport("10.1.2.3")
    assert check_access(make_mocked_request("GET", "/metrics", transport=remote), KEY).status == 401
    ok = make_mocked_request("GET", "/metrics", headers={ADMIN_HEADER: KEY}, transport=remote)
    assert check_access(ok, KEY) is None
    bearer = make_mocked_request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"}, transport=remote)
    assert check_access(bearer, KEY) is None
    wrong = make_mocked_request("GET", "/metrics", headers={ADMIN_HEADER: KEY + "x"}, transport=remote)
    assert check_access(wrong, KEY).status == 401


async def test_loopback_only_by_default_and_other_paths_untouched() -> None:
    async with TestClient(TestServer(_app(None))) as client:
        for path in ("/gate/", "/gate/events", "/metrics", "/gate/spill/abc", "/healthz", "/v1/models"):
            assert (await client.get(path)).status == 200, path


async def test_admin_key_header_query_and_cookie() -> None:
    async with TestClient(TestServer(_app(KEY))) as client:
        denied = await client.get("/gate/events")
        assert denied.status == 401
        body = await denied.text()
        assert KEY not in body
        assert (await client.get("/gate/spill/abc")).status == 200
        assert (await client.get("/v1/models")).status == 200
        assert (await client.get("/gate/events", headers={ADMIN_HEADER: KEY})).status == 200
        # ?key= sets an HttpOnly cookie (not the key itself) and strips the key from the URL
        response = await client.get("/gate/?key=" + KEY + "&c=1", allow_redirects=False)
        assert response.status == 303
        assert response.headers["Location"] == "/gate/?c=1"
        cookie = response.cookies[ADMIN_COOKIE]
        assert cookie.value != KEY and KEY not in cookie.value
        assert cookie["httponly"]
        # the session cookie now opens every protected path
        assert (await client.get("/gate/events")).status == 200
        assert (await client.get("/metrics")).status == 200
        client.session.cookie_jar.clear()
        assert (await client.get("/gate/?key=wrong", allow_redirects=False)).status == 401
