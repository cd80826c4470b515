"""The ``serve`` flags and the configuration they produce (no server import).

Shared by ``compaction-gate serve`` (:mod:`proxy.server.cli`) and the container
health check (:mod:`proxy.healthcheck`), which must find the port the server was
actually told to use — from the same flags, the same file, the same defaults.
"""

from __future__ import annotations

import argparse
import os

from proxy.config import CONFIG_ENV_VAR, Overrides, ProxyConfig, apply_overrides, load_config

__all__ = ["add_arguments", "effective_config"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``serve`` flags; each overrides the config file."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get(CONFIG_ENV_VAR),
        help=f"YAML config file (default: ${CONFIG_ENV_VAR}, else embedded defaults)",
    )
    parser.add_argument("--host", metavar="H", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", metavar="P", type=_port, help="listen port (default 8788)")
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="send every request to this provider base URL, e.g. https://api.openai.com/v1 "
        "or https://api.anthropic.com (replaces the configured upstreams)",
    )
    parser.add_argument("--policy", metavar="NAME|FILE", help="policy preset name or policy file")


def effective_config(args: argparse.Namespace) -> ProxyConfig:
    """The config file (or the embedded defaults) with the flags applied. Raises
    :class:`~proxy.config.ConfigError` (file:line) or ``ValueError`` (a bad flag value)."""
    config = load_config(args.config)
    return apply_overrides(
        config,
        Overrides(host=args.host, port=args.port, upstream=args.upstream, policy=args.policy),
    )
