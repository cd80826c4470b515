"""Route classification: which API a request path is and which dialect it speaks.

Pure functions over the path, method and header names; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.server.hooks import ApiKind, DialectName

__all__ = ["JSON_KINDS", "Route", "classify", "detect_dialect"]

_EXACT: dict[str, tuple[ApiKind, DialectName | None]] = {
    "/v1/chat/completions": ("chat", "openai"),
    "/v1/completions": ("completions", "openai"),
    "/v1/responses": ("responses", "openai"),
    "/v1/embeddings": ("embeddings", "openai"),
    "/v1/models": ("models", None),
    "/v1/messages": ("messages", "anthropic"),
    "/v1/messages/count_tokens": ("count_tokens", "anthropic"),
}

#: API kinds whose POST body must be a JSON object.
JSON_KINDS: frozenset[str] = frozenset(
    {"chat", "completions", "responses", "embeddings", "messages", "count_tokens"}
)

_ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta", "x-api-key")


@dataclass(frozen=True)
class Route:
    """Classification of one request."""

    kind: ApiKind
    dialect: DialectName
    #: The body must be a JSON object (POST to a known JSON API).
    expects_json: bool


def detect_dialect(headers: Mapping[str, str]) -> DialectName:
    """Guess the caller's dialect from header names (lower-cased keys).

    Anthropic SDKs always send ``anthropic-version``; ``x-api-key`` is Anthropic's
    credential header. Everything else is treated as OpenAI-compatible.
    """
    if any(name in headers for name in _ANTHROPIC_HEADERS):
        return "anthropic"
    return "openai"


def classify(method: str, path: str, headers: Mapping[str, str]) -> Route:
    """Classify a ``/v1/...`` request (``path`` without query, as received).

    Known endpoints map to their API kind; ``/v1/models/{id}`` is ``models``;
    anything else is ``raw``. Dialect comes from the route when it is unambiguous,
    else from the headers.
    """
    normalized = path.rstrip("/") or "/"
    kind: ApiKind
    fixed: DialectName | None
    if normalized in _EXACT:
        kind, fixed = _EXACT[normalized]
    elif normalized.startswith("/v1/models/"):
        kind, fixed = "models", None
    else:
        kind, fixed = "raw", None
    dialect = fixed or detect_dialect(headers)
    return Route(kind=kind, dialect=dialect, expects_json=method == "POST" and kind in JSON_KINDS)
