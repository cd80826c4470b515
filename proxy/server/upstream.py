"""Upstream selection, URL joining, credential substitution and the outbound proxy.
No I/O (the environment is read, for ``server.proxy_from_env``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from urllib import request as _urllib_request
from urllib.parse import urlsplit
from urllib.request import getproxies_environment

from multidict import CIMultiDict
from yarl import URL

from proxy.config import ProxyConfig, ServerSettings, Upstream
from proxy.server.hooks import DialectName

__all__ = ["apply_credentials", "proxy_for", "select_upstream", "target_url"]

#: urllib's NO_PROXY matching (names, domain suffixes, host:port, ``*``); typeshed
#: does not declare it.
_proxy_bypass: Callable[[str, Mapping[str, str]], bool] = _urllib_request.proxy_bypass_environment  # type: ignore[attr-defined]


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
    """See :func:`_target_url` (cached: the same few paths are asked for all the time)."""
    return _target_url(upstream.base_url, dialect, raw_path)


@functools.lru_cache(maxsize=1024)
def _target_url(base_url: str, dialect: DialectName, raw_path: str) -> URL:
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
    parts = urlsplit(base_url)
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


def proxy_for(url: URL, server: ServerSettings, env: Mapping[str, str] | None = None) -> str | None:
    """The HTTP(S) proxy a request to ``url`` goes through, or ``None`` (direct):
    ``server.upstream_proxy`` if set; else, with ``server.proxy_from_env``, the
    environment's ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` for the URL's scheme
    unless ``NO_PROXY`` names its host (``env``: the environment, for tests)."""
    if server.upstream_proxy:
        return server.upstream_proxy
    if not server.proxy_from_env:
        return None
    proxies = _env_proxies(env)
    scheme = url.scheme or "http"
    chosen = proxies.get(scheme) or proxies.get("all")
    if not chosen or url.host is None:
        return None
    host = f"{url.host}:{url.port}" if url.port else url.host
    if _proxy_bypass(host, proxies):  # NO_PROXY, as urllib reads it
        return None
    return chosen


def _env_proxies(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return getproxies_environment()
    out: dict[str, str] = {}
    for name, value in env.items():  # as urllib reads them: lower case wins
        low = name.lower()
        if value and low.endswith("_proxy"):
            key = low[: -len("_proxy")]
            if name == low or key not in out:
                out[key] = value
    return out
