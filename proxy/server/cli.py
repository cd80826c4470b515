"""The ``serve`` subcommand: load config, apply flags, run the proxy."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from proxy.config import CONFIG_ENV_VAR, ConfigError, Overrides, apply_overrides, load_config
from proxy.server.logs import configure_logging
from proxy.server.runner import AppFactory, serve

__all__ = ["APP_FACTORY", "add_arguments", "load_app_factory", "run"]

#: ``module:function`` building the served app from a ProxyConfig. The gate's
#: assembly replaces this with its own factory (one line) when it is wired in.
APP_FACTORY = "proxy.gate.wiring:create_gate_app"


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


def run(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted. Returns 2 on configuration errors."""
    try:
        config = load_config(args.config)
        config = apply_overrides(
            config,
            Overrides(host=args.host, port=args.port, upstream=args.upstream, policy=args.policy),
        )
    except ConfigError as exc:
        print(f"compaction-gate: configuration error:\n{exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # invalid flag values (e.g. a malformed --upstream URL)
        print(f"compaction-gate: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.server.log_level)
    try:
        app = load_app_factory(APP_FACTORY)(config)  # e.g. a bad policy file fails here
    except ConfigError as exc:
        print(f"compaction-gate: configuration error:\n{exc}", file=sys.stderr)
        return 2
    serve(config, app=app)
    return 0


def load_app_factory(spec: str) -> AppFactory:
    """Import ``module:function`` (a callable ``ProxyConfig -> web.Application``)."""
    module_name, _, attr = spec.partition(":")
    factory: AppFactory = getattr(importlib.import_module(module_name), attr)
    return factory
