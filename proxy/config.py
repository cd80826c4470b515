"""Proxy configuration: frozen dataclasses, embedded defaults, YAML loading, overrides.

The embedded defaults are a complete, working configuration (loopback only; OpenAI
for everything except ``claude-*`` models and Anthropic-dialect requests, which go to
Anthropic). A YAML file overrides sections it names; ``upstreams`` replaces the whole
list. Command-line flags override the file (:func:`apply_overrides`).

Secrets: ``Upstream.api_key`` is excluded from ``repr`` and is only ever produced by
``${VAR}`` expansion or literal YAML; it is never logged or written back.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from proxy import yamlconf
from proxy.yamlconf import ConfigError, Invalid

__all__ = [
    "ConfigError",
    "GateSettings",
    "Overrides",
    "ProxyConfig",
    "ServerSettings",
    "StateSettings",
    "Upstream",
    "apply_overrides",
    "load_config",
    "state_dir",
]

Dialect = Literal["openai", "anthropic"]

DEFAULT_PORT = 8788
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
CONFIG_ENV_VAR = "COMPACTION_GATE_CONFIG"


@dataclass(frozen=True)
class ServerSettings:
    """Listening socket, limits and timeouts (seconds)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    #: Largest request body accepted (bytes); 64 MiB holds a 1M-token history.
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Time to establish the upstream TCP/TLS connection.
    connect_timeout: float = 10.0
    #: Longest silence allowed between two reads from upstream (also time to headers).
    read_timeout: float = 600.0
    #: How long in-flight requests (e.g. streams) may run on after a shutdown signal.
    shutdown_grace_seconds: float = 30.0
    #: Longest a client may take to send a request's head (request line and headers),
    #: from its first byte or from the connection's opening (nginx's default, 60 s).
    client_header_timeout: float = 60.0
    #: Longest silence allowed between two reads of a request body from the client.
    client_body_timeout: float = 60.0
    #: An idle client connection (no request under way) is closed after this long.
    keepalive_timeout: float = 75.0
    #: Upstream connection pool size (0 = unlimited).
    max_connections: int = 100
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: HTTP(S) proxy every upstream request goes through (``http://[user:pass@]host:port``;
    #: HTTPS upstreams are tunnelled with CONNECT). Never logged.
    upstream_proxy: str | None = field(default=None, repr=False)
    #: Take the upstream proxy from ``HTTPS_PROXY``/``HTTP_PROXY`` (``ALL_PROXY``),
    #: honouring ``NO_PROXY``, as curl and most HTTP clients do. Off by default so that
    #: a proxy meant for something else (a package mirror) never captures model traffic.
    proxy_from_env: bool = False
    #: PEM file of extra CA certificates trusted for upstream TLS, beside the system's
    #: (a gateway with a private CA, or a TLS-inspecting corporate proxy).
    upstream_ca_file: str | None = None
    #: Processes serving the port (``serve --workers N``): each its own event loop and
    #: core, sharing the state through ``state`` (SQLite or Redis; not memory).
    workers: int = 1

    def __post_init__(self) -> None:
        if not self.host:
            raise Invalid("host must not be empty", key="host")
        if not 0 <= self.port <= 65535:
            raise Invalid("port must be between 0 and 65535", key="port")
        if self.max_body_bytes <= 0:
            raise Invalid("max_body_bytes must be positive", key="max_body_bytes")
        for name in ("connect_timeout", "read_timeout", "client_header_timeout", "client_body_timeout", "keepalive_timeout"):
            if getattr(self, name) <= 0:
                raise Invalid(f"{name} must be positive", key=name)
        if self.shutdown_grace_seconds < 0:
            raise Invalid("shutdown_grace_seconds must not be negative", key="shutdown_grace_seconds")
        if self.max_connections < 0:
            raise Invalid("max_connections must not be negative", key="max_connections")
        if self.upstream_proxy is not None and urlsplit(self.upstream_proxy).scheme not in ("http", "https"):
            raise Invalid("upstream_proxy must be an http:// or https:// URL", key="upstream_proxy")
        if self.upstream_ca_file is not None:
            _check_ca_file(self.upstream_ca_file)
        if not 1 <= self.workers <= 256:
            raise Invalid("workers must be between 1 and 256", key="workers")


def _check_ca_file(path: str) -> None:
    """The CA file must exist and hold PEM certificates (checked when the config is
    loaded, not on the first upstream request)."""
    if not Path(path).is_file():
        raise Invalid(f"upstream_ca_file: no such file: {path}", key="upstream_ca_file")
    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise Invalid(f"upstream_ca_file: not a PEM CA bundle: {path} ({exc})", key="upstream_ca_file") from None


@dataclass(frozen=True)
class Upstream:
    """One provider endpoint.

    ``base_url`` is the URL users know (``https://api.openai.com/v1``,
    ``https://api.anthropic.com``); see :mod:`proxy.server.upstream` for how request
    paths are joined onto it. ``api_key``, when set, replaces the client's credential
    (``Authorization: Bearer`` for OpenAI-dialect requests, ``x-api-key`` for
    Anthropic). ``models`` are shell-style patterns (``claude-*``); ``dialect`` makes
    this upstream the fallback for requests of that dialect that match no pattern.
    """

    name: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    models: tuple[str, ...] = ()
    dialect: Dialect | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise Invalid("upstream name must not be empty", key="name")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise Invalid("base_url must be an absolute http(s) URL", key="base_url")
        if parts.query or parts.fragment:
            raise Invalid("base_url must not have a query or fragment", key="base_url")
        if self.api_key is not None and not self.api_key.strip():
            raise Invalid("api_key is empty (is its environment variable set?)", key="api_key")

    def matches_model(self, model: str) -> bool:
        """True when ``model`` matches one of this upstream's patterns."""
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user state directory: ``$XDG_STATE_HOME/compaction-gate``, by default
    ``~/.local/state/compaction-gate`` (the XDG base-directory convention)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "compaction-gate"


@dataclass(frozen=True)
class StateSettings:
    """Where the gate keeps what it remembers (conversations, their gate state, events,
    spills): ``sqlite`` (one machine; with several workers, shared in WAL mode),
    ``memory`` (one process, lost on exit) or ``redis`` (shared by every replica)."""

    backend: Literal["sqlite", "memory", "redis"] = "sqlite"
    #: The SQLite file; ``None``: ``state.sqlite3`` in the per-user state directory
    #: (:func:`state_dir`), never the current directory.
    path: str | None = None
    ttl_seconds: int = 7 * 24 * 3600
    max_conversations: int = 10_000
    #: The bound on what the tracker keeps in memory (MB, estimated; see
    #: :mod:`proxy.gate.budget`); ``None``: bounded by ``max_conversations`` only. The
    #: default leaves 10,000 ordinary conversations untouched (~0.4 GB) and keeps a few
    #: conversations with very long texts (a 20 MB paste is ~40 MB of hot history) from
    #: taking the process's memory: their histories are read back from the store instead.
    max_memory_mb: float | None = 1024.0
    #: How many conversations keep their full history in memory (the others are read
    #: back from the store when a request needs them): at least as many as agents send
    #: requests at once. Past it every request of every agent reads its history back
    #: (640 agents at once cost 2.9 ms of CPU per request where 256 cost 1.3 ms).
    #: ``max_memory_mb`` still bounds what they take.
    hot_conversations: int = 512
    #: The Redis URL (``redis://[:password@]host:port/db``, ``rediss://`` for TLS);
    #: write the password as ``${VAR}``. Never logged, never shown (:attr:`where`).
    url: str | None = field(default=None, repr=False)
    #: Prefix of every Redis key (several deployments may share one Redis).
    key_prefix: str = "cg"
    #: Seconds to connect to Redis and per call; beyond it the request fails open.
    timeout_seconds: float = 2.0

    @property
    def file(self) -> Path:
        """Where the SQLite state lives (``path``, else the per-user default)."""
        return Path(self.path) if self.path else state_dir() / "state.sqlite3"

    @property
    def where(self) -> str:
        """Where the state lives, for the banner and logs (never a credential)."""
        if self.backend == "redis":
            from proxy.state.redis_conn import redact_url

            return f"redis at {redact_url(self.url or '')}"
        if self.backend == "sqlite":
            return f"sqlite at {self.file}"
        return "memory (lost on exit)"

    def __post_init__(self) -> None:
        if self.ttl_seconds <= 0:
            raise Invalid("ttl_seconds must be positive", key="ttl_seconds")
        if self.max_conversations <= 0:
            raise Invalid("max_conversations must be positive", key="max_conversations")
        if self.max_memory_mb is not None and not self.max_memory_mb > 0:
            raise Invalid("max_memory_mb must be positive (or null)", key="max_memory_mb")
        if self.hot_conversations <= 0:
            raise Invalid("hot_conversations must be positive", key="hot_conversations")
        if self.timeout_seconds <= 0:
            raise Invalid("timeout_seconds must be positive", key="timeout_seconds")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.key_prefix):
            raise Invalid("key_prefix must be 1-64 letters, digits, '_', '.' or '-'", key="key_prefix")
        if self.backend == "redis":
            if not self.url:
                raise Invalid("backend redis needs url (redis://host:port/db)", key="url")
            try:
                scheme, port = urlsplit(self.url).scheme, urlsplit(self.url).port
            except ValueError:  # the value is not quoted: it may hold a password
                raise Invalid("url is not a valid URL", key="url") from None
            if scheme not in ("redis", "rediss", "unix") or (port is not None and not 0 < port < 65536):
                raise Invalid("url must be a redis://, rediss:// or unix:// URL", key="url")


@dataclass(frozen=True)
class GateSettings:
    """Behaviour of the interception layer."""

    #: When the gate itself fails, forward the request untouched (True) or answer
    #: with a 502-class error in the caller's dialect (False).
    fail_open: bool = True
    #: Key required for the dashboard (/gate/), the gate API and /metrics
    #: (``x-gate-admin-key`` header, ``Authorization: Bearer``, or ``/gate/?key=``
    #: once, which sets a cookie). Unset: those are served to loopback clients only.
    admin_key: str | None = field(default=None, repr=False)


def _default_upstreams() -> tuple[Upstream, ...]:
    return (
        Upstream(name="openai", base_url="https://api.openai.com/v1", dialect="openai"),
        Upstream(
            name="anthropic",
            base_url="https://api.anthropic.com",
            models=("claude-*",),
            dialect="anthropic",
        ),
    )


@dataclass(frozen=True)
class ProxyConfig:
    """The whole proxy configuration. Build with :func:`load_config`."""

    server: ServerSettings = field(default_factory=ServerSettings)
    upstreams: tuple[Upstream, ...] = field(default_factory=_default_upstreams)
    #: Name of the upstream used when neither a model pattern nor a dialect matches.
    default_upstream: str | None = None
    state: StateSettings = field(default_factory=StateSettings)
    #: A shipped policy preset name (``default``, ``strict``, ``audit`` …) or a file.
    policy: str = "default"
    gate: GateSettings = field(default_factory=GateSettings)

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise Invalid("at least one upstream is required", key="upstreams")
        names = [u.name for u in self.upstreams]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise Invalid(f"duplicate upstream name(s): {', '.join(dupes)}", key="upstreams")
        if self.default_upstream is not None and self.default_upstream not in names:
            raise Invalid(
                f"default_upstream {self.default_upstream!r} is not one of: {', '.join(names)}",
                key="default_upstream",
            )
        if not self.policy:
            raise Invalid("policy must not be empty", key="policy")

    @property
    def default(self) -> Upstream:
        """The fallback upstream (``default_upstream``, else the first listed)."""
        if self.default_upstream is not None:
            for upstream in self.upstreams:
                if upstream.name == self.default_upstream:
                    return upstream
        return self.upstreams[0]


@dataclass(frozen=True)
class Overrides:
    """Command-line overrides; ``None`` means "keep the file/default value"."""

    host: str | None = None
    port: int | None = None
    upstream: str | None = None
    policy: str | None = None
    workers: int | None = None


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ProxyConfig:
    """Load and validate a YAML config file, or return embedded defaults for ``None``.

    Raises :class:`ConfigError` naming the file and line of every problem.
    """
    if path is None:
        return ProxyConfig()
    raw: Any = yamlconf.load_file(path)
    return yamlconf.build(ProxyConfig, raw, name="config", environ=environ)


def apply_overrides(config: ProxyConfig, overrides: Overrides) -> ProxyConfig:
    """Return ``config`` with command-line flags applied.

    ``--upstream URL`` replaces the upstream list with a single upstream that
    receives every request (keeping a configured ``api_key`` is not possible since
    the URL may point elsewhere; clients' own credentials are passed through).
    """
    server = config.server
    if overrides.host is not None:
        server = dataclasses.replace(server, host=overrides.host)
    if overrides.port is not None:
        server = dataclasses.replace(server, port=overrides.port)
    if overrides.workers is not None:
        server = dataclasses.replace(server, workers=overrides.workers)
    changes: dict[str, Any] = {"server": server}
    if overrides.upstream is not None:
        changes["upstreams"] = (Upstream(name="upstream", base_url=overrides.upstream),)
        changes["default_upstream"] = "upstream"
    if overrides.policy is not None:
        changes["policy"] = overrides.policy
    return dataclasses.replace(config, **changes)
