"""A proxy with the real gate (tracker + policy + interventions) in front of the fake
upstream, running in a background loop so sync SDK clients can call it."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from proxy.config import ProxyConfig, ServerSettings, StateSettings
from proxy.gate.interceptor import GateInterceptor
from proxy.gate.wiring import build_gate, install_gate
from proxy.server.app import create_app
from proxy.server.runner import RunningServer, start_server
from tests.support import BackgroundLoop, RunningStack, fake_upstreams
from tests.support.fake_upstream import FakeUpstream, Responder


class GateStack(RunningStack):
    def __init__(
        self, policy: str, responder: Responder, *, watch: bool = False, state: StateSettings | None = None
    ) -> None:
        self.bg = BackgroundLoop()
        self.fake = FakeUpstream(responder)
        try:
            self.bg.run(self.fake.start())
            self.config = ProxyConfig(
                server=ServerSettings(port=0),
                upstreams=fake_upstreams(self.fake),
                state=state or StateSettings(backend="memory"),
                policy=policy,
            )

            async def make() -> tuple[GateInterceptor, RunningServer]:
                gate = build_gate(self.config)
                app = create_app(self.config, gate)
                install_gate(app, gate, watch=watch, interval=0.05)
                server = await start_server(app, "127.0.0.1", 0, shutdown_grace_seconds=1.0)
                return gate, server

            self.gate, self.server = self.bg.run(make())
        except BaseException:
            self.bg.run(self.fake.close())
            self.bg.close()
            raise

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def events(self, **query: str) -> list[dict[str, Any]]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        status, body = self.get("/gate/events?limit=1000" + ("&" + qs if qs else ""))
        assert status == 200, body
        return body["events"]
