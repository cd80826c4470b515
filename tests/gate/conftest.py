"""Helpers for tracker tests: Exchanges built from bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from proxy.server.hooks import Exchange

PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def exchange(body: Mapping[str, Any], kind: str = "chat", *, tenant: str = "tenant-a",
             headers: Mapping[str, str] | None = None) -> Exchange:
    return Exchange(
        method="POST",
        path=PATHS[kind],
        query="",
        dialect="anthropic" if kind == "messages" else "openai",
        kind=kind,  # type: ignore[arg-type]
        headers=dict(headers or {}),
        tenant=tenant,
        body=json.dumps(body).encode(),
        json=body,
        stream=bool(body.get("stream")),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )
