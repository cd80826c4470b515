"""The ``serve`` subcommand: load config, apply flags, run the proxy."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import TextIO

from proxy import __version__
from proxy.config import ConfigError, ProxyConfig
from proxy.serve_args import add_arguments, effective_config
from proxy.server.handoff import handoff_fd
from proxy.server.logs import configure_logging
from proxy.server.runner import AppFactory, RunningServer, serve
from proxy.server.workers import refuse_reason, run_workers, worker_ready

__all__ = ["APP_FACTORY", "add_arguments", "banner", "load_app_factory", "run"]

#: ``module:function`` building the served app from a ProxyConfig. The gate's
#: assembly replaces this with its own factory (one line) when it is wired in.
APP_FACTORY = "proxy.gate.wiring:create_gate_app"


def run(args: argparse.Namespace) -> int:
    """Run the proxy until interrupted. Returns 2 on configuration errors."""
    try:
        config = effective_config(args)
    except ConfigError as exc:
        print(f"compaction-gate: configuration error:\n{exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # invalid flag values (e.g. a malformed --upstream URL)
        print(f"compaction-gate: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.server.log_level)
    reason = refuse_reason(config)
    if reason is not None:
        print(f"compaction-gate: {reason}", file=sys.stderr)
        return 2
    worker = getattr(args, "worker_index", None) is not None
    if config.server.workers > 1 and not worker:
        return run_workers(config, args, lambda c, host, port: print_banner(c, _Bound(host, port)))
    try:
        app = load_app_factory(APP_FACTORY)(config)  # e.g. a bad policy file fails here
    except ConfigError as exc:
        print(f"compaction-gate: configuration error:\n{exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. a state backend that cannot serve this configuration
        print(f"compaction-gate: {exc}", file=sys.stderr)
        return 2
    on_listening = (lambda server: worker_ready()) if worker else (lambda server: print_banner(config, server))
    try:
        serve(config, app=app, on_listening=on_listening, handoff=handoff_fd() if worker else None)
    except OSError as exc:  # binding the socket: a busy port, a bad address, no permission
        print(f"compaction-gate: cannot listen on {config.server.host}:{config.server.port}: {_reason(exc)}", file=sys.stderr)
        return 1
    _exit_without_waiting()
    return 0


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "the address is already in use (another process listens there; pick another with --port)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges; pick another with --port)"
    return exc.strerror or str(exc)


def _exit_without_waiting() -> None:
    """The server has shut down (stores closed). A background load still running (a
    tokenizer, litellm for a non-OpenAI model) would hold the exit for seconds in the
    interpreter's teardown: leave at once instead."""
    background = sys.modules.get("proxy.gate.background")
    if background is not None and background.background_busy():
        offload = sys.modules.get("proxy.state.offload")
        if offload is not None:  # its pools' semaphores released, or the resource tracker warns in plaintext
            offload.shutdown()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


@dataclass(frozen=True)
class _Bound:
    """Where the workers of ``--workers N`` listen (what the banner needs of a server)."""

    host: str
    port: int


def banner(config: ProxyConfig, server: RunningServer | _Bound) -> str:
    """What ``serve`` prints on stdout once it listens: where, the base URLs to give each
    kind of client, the policy and where the state lives (logs stay JSON on stderr)."""
    host = server.host
    wildcard = host in ("0.0.0.0", "::", "")
    origin = f"http://{'127.0.0.1' if wildcard else (f'[{host}]' if ':' in host else host)}:{server.port}"
    where = f"{origin} (all interfaces)" if wildcard else origin
    state = config.state
    stored = state.where
    workers = config.server.workers
    if workers > 1:
        stored += f"    workers: {workers}"
    access = "admin key required" if config.gate.admin_key else "loopback clients only; set gate.admin_key to allow others"
    return (
        f"compaction-gate {__version__} listening on {where}\n"
        f"  OpenAI-style clients:    base URL {origin}/v1\n"
        f"  Anthropic-style clients: base URL {origin}\n"
        f"  policy: {config.policy}    state: {stored}\n"
        f"  dashboard: {origin}/gate/ ({access})\n"
    )


def print_banner(config: ProxyConfig, server: RunningServer | _Bound, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(banner(config, server))
    stream.flush()


def load_app_factory(spec: str) -> AppFactory:
    """Import ``module:function`` (a callable ``ProxyConfig -> web.Application``)."""
    module_name, _, attr = spec.partition(":")
    factory: AppFactory = getattr(importlib.import_module(module_name), attr)
    return factory
