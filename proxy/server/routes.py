"""Route classification: which API a request path is and which dialect it speaks.

Pure functions over the path, method and header names; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from proxy.server.hooks import ApiKind, DialectName

__all__ = [
    "JSON_KINDS",
    "Route",
    "classify",
    "detect_dialect",
    "dialect_of_path",
    "has_dot_segment",
    "route_template",
]

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
    dialect = fixed or dialect_of_path(normalized) or detect_dialect(headers)
    return Route(kind=kind, dialect=dialect, expects_json=method == "POST" and kind in JSON_KINDS)


#: A path segment kept verbatim in a route template: a plain lower-case word (``files``,
#: ``batches``, ``vector_stores``); anything else (ids, keys) becomes ``{id}``.
_WORD = re.compile(r"[a-z][a-z_]{0,31}")


def route_template(path: str) -> str:
    """The route a path belongs to, for logs: the path itself for the known endpoints,
    ``/v1/models/{id}``, and for the raw pass-through its plain-word segments with every
    other segment as ``{id}`` (``/v1/files/{id}/content``). A raw path — which may carry
    an id or a key — is never logged."""
    normalized = path.rstrip("/") or "/"
    if normalized in _EXACT:
        return normalized
    if normalized.startswith("/v1/models/"):
        return "/v1/models/{id}"
    if not normalized.startswith("/v1/"):
        return "{unknown}"
    segments = normalized[4:].split("/")[:6]
    return "/v1/" + "/".join(s if _WORD.fullmatch(s) else "{id}" for s in segments)


def dialect_of_path(path: str) -> DialectName | None:
    """The dialect a path fixes, if it does (``/v1/messages…`` is Anthropic)."""
    normalized = path.split("?", 1)[0].rstrip("/")
    if normalized in _EXACT:
        return _EXACT[normalized][1]
    if normalized.startswith("/v1/messages/"):
        return "anthropic"
    return None


def has_dot_segment(raw_path: str) -> bool:
    """Whether a request target's path has a ``.`` or ``..`` segment, raw or
    percent-encoded (``%2e``, ``%2E``, mixed, doubly encoded), or an encoded slash or
    backslash that could hide one. Such a path is refused before routing: forwarded
    verbatim it could address a different upstream path than the one routed here."""
    path = raw_path.split("?", 1)[0]
    for _ in range(3):  # %252e%252e -> %2e%2e -> ..
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return any(seg in (".", "..") for seg in re.split(r"[/\\]", path))
