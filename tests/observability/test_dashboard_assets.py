"""The dashboard's static files are packaged, self-contained and served with a strict CSP."""

from __future__ import annotations

import re

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from proxy.dashboard import ASSETS, asset_bytes, setup_dashboard


def test_assets_have_no_external_references() -> None:
    for name in ["index.html", *ASSETS]:
        text = asset_bytes(name).decode()
        assert not re.search(r"(src|href)=[\"']?(https?:)?//", text), name
        assert "cdn" not in text.lower(), name


def test_untrusted_values_are_never_written_as_html() -> None:
    js = asset_bytes("app.js").decode()
    assert "innerHTML" not in js and "outerHTML" not in js and "insertAdjacentHTML" not in js
    assert "eval(" not in js and "document.write" not in js


async def test_served_under_gate_with_csp() -> None:
    app = web.Application()
    setup_dashboard(app)
    async with TestClient(TestServer(app)) as client:
        index = await client.get("/gate/")
        assert index.status == 200
        assert "text/html" in index.headers["Content-Type"]
        assert "script-src 'self'" in index.headers["Content-Security-Policy"]
        assert "assets/app.js" in await index.text()
        for name, ctype in ASSETS.items():
            r = await client.get(f"/gate/assets/{name}")
            assert r.status == 200 and ctype in r.headers["Content-Type"]
        assert (await client.get("/gate/assets/../../config.py")).status == 404
        assert (await client.get("/gate/assets/nope.js")).status == 404
        redirect = await client.get("/gate", allow_redirects=False)
        assert redirect.status == 308 and redirect.headers["Location"] == "/gate/"
