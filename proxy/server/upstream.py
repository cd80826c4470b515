"""Upstream selection, URL joining and credential substitution. Pure; no I/O."""

from __future__ import annotations

from urllib.parse import urlsplit

from multidict import CIMultiDict
from yarl import URL

from proxy.config import ProxyConfig, Upstream
from proxy.server.hooks import DialectName

__all__ = ["apply_credentials", "select_upstream", "target_url"]


def select_upstream(config: ProxyConfig, dialect: DialectName, model: str | None) -> Upstream:
    """Pick the upstream for a request; first match wins.

    1. the first upstream with a ``models`` pattern matching ``model``;
    2. the first upstream whose ``dialect`` equals the request's dialect;
    3. ``default_upstream`` (or the first upstream listed).
    """
    if model:
        for upstream in config.upstreams:
            if upstream.matches_model(model):
                return upstream
    for upstream in config.upstreams:
        if upstream.dialect == dialect:
            return upstream
    return config.default


def target_url(upstream: Upstream, dialect: DialectName, raw_path: str) -> URL:
    """Join a client request path (``/v1/...`` plus raw query) onto ``base_url``.

    The base URL behaves as the caller's SDK would treat it, and works with or
    without a trailing ``/v1``:

    * empty base path (``https://api.anthropic.com``): the path is appended as is;
    * base path ending in ``/v1`` (``https://api.openai.com/v1``): it replaces the
      request's leading ``/v1``;
    * any other base path: for OpenAI-dialect requests it replaces the leading ``/v1``
      (OpenAI SDK semantics, e.g. ``…/v1beta/openai``); for Anthropic-dialect
      requests the full path is appended (Anthropic SDK semantics, e.g. a gateway's
      ``…/anthropic`` prefix).

    The request path and query are kept byte-for-byte (already percent-encoded).
    """
    parts = urlsplit(upstream.base_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    base_path = parts.path.rstrip("/")
    suffix = raw_path
    has_v1 = raw_path == "/v1" or raw_path.startswith(("/v1/", "/v1?"))
    if base_path and has_v1 and (base_path.endswith("/v1") or dialect == "openai"):
        suffix = raw_path[3:]
    return URL(origin + base_path + suffix, encoded=True)


def apply_credentials(headers: CIMultiDict[str], upstream: Upstream, dialect: DialectName) -> None:
    """Replace the client's credential with the upstream's configured key, if any."""
    if upstream.api_key is None:
        return
    for name in ("authorization", "x-api-key", "api-key"):
        headers.popall(name, None)
    if dialect == "anthropic":
        headers["x-api-key"] = upstream.api_key
    else:
        headers["authorization"] = f"Bearer {upstream.api_key}"
