"""Pure routing pieces: route classification, upstream choice, URL joining, headers."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.config import ProxyConfig, Upstream
from proxy.server.headers import (
    HOP_BY_HOP,
    credential,
    downstream_headers,
    is_secret_header,
    safe_headers,
    tenant_of,
    upstream_headers,
)
from proxy.server.routes import classify
from proxy.server.upstream import apply_credentials, select_upstream, target_url

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "kind", "dialect", "expects_json"),
    [
        ("POST", "/v1/chat/completions", {}, "chat", "openai", True),
        ("POST", "/v1/completions", {}, "completions", "openai", True),
        ("POST", "/v1/responses", {}, "responses", "openai", True),
        ("GET", "/v1/responses", {}, "responses", "openai", False),
        ("POST", "/v1/responses/resp_1/cancel", {}, "raw", "openai", False),
        ("POST", "/v1/embeddings", {}, "embeddings", "openai", True),
        ("GET", "/v1/models", {}, "models", "openai", False),
        ("GET", "/v1/models", ANTHROPIC, "models", "anthropic", False),
        ("GET", "/v1/models/gpt-4o", {}, "models", "openai", False),
        ("POST", "/v1/messages", {}, "messages", "anthropic", True),
        ("POST", "/v1/messages/", {}, "messages", "anthropic", True),
        ("POST", "/v1/messages/count_tokens", {}, "count_tokens", "anthropic", True),
        ("POST", "/v1/messages/batches", ANTHROPIC, "raw", "anthropic", False),
        ("POST", "/v1/files", {}, "raw", "openai", False),
        ("POST", "/v1/files", {"x-api-key": "k"}, "raw", "anthropic", False),
    ],
)
def test_classify(
    method: str, path: str, headers: dict[str, str], kind: str, dialect: str, expects_json: bool
) -> None:
    route = classify(method, path, CIMultiDictProxy(CIMultiDict(headers)))
    assert (route.kind, route.dialect, route.expects_json) == (kind, dialect, expects_json)


CONFIG = ProxyConfig(
    upstreams=(
        Upstream(name="local", base_url="http://localhost:11434/v1", models=("llama*", "qwen*")),
        Upstream(name="openai", base_url="https://api.openai.com/v1", dialect="openai"),
        Upstream(
            name="anthropic",
            base_url="https://api.anthropic.com",
            models=("claude-*",),
            dialect="anthropic",
        ),
    ),
    default_upstream="openai",
)


@pytest.mark.parametrize(
    ("dialect", "model", "expected"),
    [
        ("openai", "llama3.1:8b", "local"),
        ("openai", "gpt-4o", "openai"),
        ("openai", "claude-sonnet-4", "anthropic"),  # Anthropic's OpenAI-compatible endpoint
        ("anthropic", "claude-opus-4", "anthropic"),
        ("anthropic", None, "anthropic"),
        ("openai", None, "openai"),
    ],
)
def test_select_upstream(dialect: str, model: str | None, expected: str) -> None:
    assert select_upstream(CONFIG, dialect, model).name == expected  # type: ignore[arg-type]


def test_select_falls_back_to_default() -> None:
    config = ProxyConfig(
        upstreams=(
            Upstream(name="a", base_url="http://a"),
            Upstream(name="b", base_url="http://b"),
        ),
        default_upstream="b",
    )
    assert select_upstream(config, "anthropic", "x").name == "b"


@pytest.mark.parametrize(
    ("base", "dialect", "raw_path", "expected"),
    [
        (
            "https://api.openai.com/v1",
            "openai",
            "/v1/chat/completions",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "https://api.openai.com/v1/",
            "openai",
            "/v1/chat/completions",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "https://api.openai.com",
            "openai",
            "/v1/chat/completions",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "https://api.anthropic.com",
            "anthropic",
            "/v1/messages",
            "https://api.anthropic.com/v1/messages",
        ),
        (
            "https://api.anthropic.com/v1",
            "anthropic",
            "/v1/messages",
            "https://api.anthropic.com/v1/messages",
        ),
        (
            "https://openrouter.ai/api/v1",
            "openai",
            "/v1/chat/completions",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "openai",
            "/v1/chat/completions",
            "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
        ),
        (
            "https://gateway.example/acc/anthropic",
            "anthropic",
            "/v1/messages?beta=true",
            "https://gateway.example/acc/anthropic/v1/messages?beta=true",
        ),
        (
            "http://127.0.0.1:9/v1",
            "openai",
            "/v1/models?after=a%2Fb",
            "http://127.0.0.1:9/v1/models?after=a%2Fb",
        ),
    ],
)
def test_target_url(base: str, dialect: str, raw_path: str, expected: str) -> None:
    url = target_url(Upstream(name="u", base_url=base), dialect, raw_path)  # type: ignore[arg-type]
    assert str(url) == expected


def test_apply_credentials() -> None:
    headers: CIMultiDict[str] = CIMultiDict(
        {"Authorization": "Bearer client", "x-api-key": "client"}
    )
    apply_credentials(headers, Upstream(name="u", base_url="http://u", api_key="up"), "anthropic")
    assert dict(headers) == {"x-api-key": "up"}
    headers = CIMultiDict({"Authorization": "Bearer client"})
    apply_credentials(headers, Upstream(name="u", base_url="http://u", api_key="up"), "openai")
    assert dict(headers) == {"authorization": "Bearer up"}
    headers = CIMultiDict({"Authorization": "Bearer client"})
    apply_credentials(headers, Upstream(name="u", base_url="http://u"), "openai")
    assert dict(headers) == {"Authorization": "Bearer client"}


def proxy_of(pairs: list[tuple[str, str]]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


_NAMES = ["Host", "Content-Length", "Connection", "Keep-Alive", "TE", "Upgrade", "Authorization", "X-Api-Key",
          "Cookie", "X-Session-Token", "X-Auth-Thing", "Accept-Encoding", "X-Drop", "Anthropic-Beta", "X-Request-Id"]
_header_lists = st.lists(
    st.tuples(
        st.sampled_from(_NAMES).flatmap(lambda n: st.sampled_from([n, n.lower(), n.upper()])),
        st.sampled_from(["1", "keep-alive", "keep-alive, x-drop", "X-Request-Id", "close, Anthropic-Beta", ""]),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_header_lists)
def test_header_filters_match_their_definition(pairs: list[tuple[str, str]]) -> None:
    """Whatever the names' case and the Connection tokens, the filters keep exactly what
    their definitions say (checked against a plain re-statement of them)."""
    client = proxy_of(pairs)
    tokens = {t.strip().lower() for v in client.getall("connection", []) for t in v.split(",") if t.strip()}

    def hop(name: str) -> bool:
        return name.lower() in HOP_BY_HOP or name.lower() in tokens

    def secret(name: str) -> bool:
        low = name.lower()
        return low in {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
                       "cookie", "set-cookie"} or any(f in low for f in ("token", "secret", "password", "api-key",
                                                                        "apikey", "auth", "credential"))

    up = upstream_headers(client, identity_encoding=False)
    assert list(up.items()) == [(n, v) for n, v in pairs if not hop(n) and n.lower() not in ("host", "content-length")]
    down = downstream_headers(client)
    assert list(down.items()) == [(n, v) for n, v in pairs if not hop(n) and n.lower() != "content-length"]
    expected: dict[str, str] = {}
    for n, v in pairs:
        if not hop(n) and not secret(n):
            low = n.lower()
            expected[low] = f"{expected[low]}, {v}" if low in expected else v
    assert dict(safe_headers(client)) == expected
    assert all(is_secret_header(n) == secret(n) for n, _ in pairs)


def test_header_filters() -> None:
    client = proxy_of(
        [
            ("Host", "proxy"),
            ("Content-Length", "10"),
            ("Connection", "keep-alive, X-Drop"),
            ("X-Drop", "1"),
            ("Keep-Alive", "5"),
            ("Transfer-Encoding", "chunked"),
            ("Authorization", "Bearer sk-1"),
            ("Accept-Encoding", "gzip"),
            ("X-Stainless-Arch", "x64"),
            ("Cookie", "a=b"),
            ("X-Session-Token", "t"),
            ("Anthropic-Beta", "a"),
            ("Anthropic-Beta", "b"),
        ]
    )
    up = upstream_headers(client, identity_encoding=False)
    assert [k for k, _ in up.items()] == [
        "Authorization",
        "Accept-Encoding",
        "X-Stainless-Arch",
        "Cookie",
        "X-Session-Token",
        "Anthropic-Beta",
        "Anthropic-Beta",
    ]
    assert upstream_headers(client, identity_encoding=True)["accept-encoding"] == "identity"
    safe = safe_headers(client)
    assert safe == {
        "host": "proxy",
        "content-length": "10",
        "accept-encoding": "gzip",
        "x-stainless-arch": "x64",
        "anthropic-beta": "a, b",
    }
    down = downstream_headers(
        proxy_of(
            [
                ("Content-Length", "3"),
                ("Set-Cookie", "a"),
                ("Set-Cookie", "b"),
                ("Transfer-Encoding", "chunked"),
                ("Content-Encoding", "br"),
            ]
        )
    )
    assert list(down.items()) == [
        ("Set-Cookie", "a"),
        ("Set-Cookie", "b"),
        ("Content-Encoding", "br"),
    ]


def test_credential_and_tenant() -> None:
    assert credential(proxy_of([("Authorization", "Bearer  sk-1 ")])) == "sk-1"
    assert credential(proxy_of([("x-api-key", "k2")])) == "k2"
    assert credential(proxy_of([("api-key", "azure")])) == "azure"
    assert credential(proxy_of([])) is None
    assert tenant_of(None) == "anonymous"
    assert tenant_of("sk-1") == hashlib.sha256(b"sk-1").hexdigest()[:16]
