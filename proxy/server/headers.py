"""Header policy: hop-by-hop stripping, secret removal, tenant identity.

Pure functions over header multidicts; no I/O.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from multidict import CIMultiDict, CIMultiDictProxy

__all__ = [
    "HOP_BY_HOP",
    "credential",
    "downstream_headers",
    "is_secret_header",
    "safe_headers",
    "tenant_of",
    "upstream_headers",
]

#: RFC 9110 §7.6.1 connection-specific headers, plus common non-standard ones.
HOP_BY_HOP: frozenset[str] = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)

_SECRET_NAMES: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
    }
)
_SECRET_FRAGMENTS = ("token", "secret", "password", "api-key", "apikey", "auth", "credential")

#: Headers carrying the caller's credential, in precedence order.
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


@functools.lru_cache(maxsize=2048)  # header names repeat on every request
def _name_info(name: str) -> tuple[str, bool, bool]:
    """``name`` lower-cased, whether it is hop-by-hop, whether it may carry a secret."""
    low = name.lower()
    return low, low in HOP_BY_HOP, low in _SECRET_NAMES or any(f in low for f in _SECRET_FRAGMENTS)


def _connection_tokens(headers: Mapping[str, str] | CIMultiDictProxy[str]) -> set[str]:
    tokens: set[str] = set()
    if "connection" not in headers:
        return tokens
    getall = getattr(headers, "getall", None)
    values: Iterable[str] = (
        getall("connection", []) if getall is not None else [headers.get("connection", "")]
    )
    for value in values:
        for token in value.split(","):
            token = token.strip().lower()
            if token:
                tokens.add(token)
    return tokens


def _strip(headers: CIMultiDictProxy[str] | CIMultiDict[str], drop: frozenset[str]) -> CIMultiDict[str]:
    tokens = _connection_tokens(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        low, hop, _ = _name_info(name)
        if not hop and low not in drop and low not in tokens:
            out.add(name, value)
    return out


_UPSTREAM_DROP = frozenset({"host", "content-length"})
_DOWNSTREAM_DROP = frozenset({"content-length"})


def upstream_headers(client: CIMultiDictProxy[str], *, identity_encoding: bool) -> CIMultiDict[str]:
    """Headers to send upstream: the client's, minus hop-by-hop, Host and length.

    ``identity_encoding`` asks upstream for an uncompressed body (needed when a tap
    must read it); otherwise the client's ``Accept-Encoding`` is forwarded and the
    response is relayed still encoded.
    """
    out = _strip(client, _UPSTREAM_DROP)
    if identity_encoding:
        out.popall("accept-encoding", None)
        out["accept-encoding"] = "identity"
    return out


def downstream_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """Headers to relay to the client: upstream's minus hop-by-hop and length."""
    return _strip(upstream, _DOWNSTREAM_DROP)


def is_secret_header(name: str) -> bool:
    """True for headers that may carry credentials or session secrets."""
    return _name_info(name)[2]


def safe_headers(client: CIMultiDictProxy[str]) -> Mapping[str, str]:
    """Lower-cased, secret-free, hop-by-hop-free request headers (repeats joined)."""
    out: dict[str, str] = {}
    tokens = _connection_tokens(client)
    for name, value in client.items():
        low, hop, secret = _name_info(name)
        if hop or secret or low in tokens:
            continue
        out[low] = f"{out[low]}, {value}" if low in out else value
    return MappingProxyType(out)


def credential(client: CIMultiDictProxy[str] | Mapping[str, str]) -> str | None:
    """The caller's API key or bearer token, if any (never log this)."""
    for name in CREDENTIAL_HEADERS:
        value = client.get(name)
        if value:
            value = value.strip()
            if name == "authorization":
                scheme, _, rest = value.partition(" ")
                if scheme.lower() == "bearer" and rest.strip():
                    return rest.strip()
            return value
    return None


@functools.lru_cache(maxsize=1024)  # per request otherwise; keys stay in this process only
def tenant_of(secret: str | None) -> str:
    """Stable, non-reversible tenant id: first 16 hex chars of sha256(key)."""
    if not secret:
        return "anonymous"
    # aiohttp decodes header bytes as UTF-8 with surrogateescape: hash the bytes as sent
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()[:16]
