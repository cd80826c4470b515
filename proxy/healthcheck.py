"""``python -m proxy.healthcheck [serve flags]`` — exit 0 when the proxy answers ``/healthz``.

The container's ``HEALTHCHECK``. It asks the port the server was actually given: the
flags passed here, or else those of the container's main process (``/proc/1/cmdline``,
``compaction-gate serve …``), applied to the same config file and defaults as ``serve``
(:mod:`proxy.serve_args`). So ``docker run … --port 9000`` or a ``server.port`` in a
mounted config keep the container healthy. Imports no server code (it runs every 30 s).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from proxy.config import ConfigError
from proxy.serve_args import add_arguments, effective_config

__all__ = ["main", "serve_flags", "target_url"]

PROC1 = Path("/proc/1/cmdline")


def serve_flags(cmdline: Sequence[str]) -> list[str]:
    """The flags after ``serve`` in a ``compaction-gate serve …`` command line (``[]``
    when it is not one)."""
    args = list(cmdline)
    return args[args.index("serve") + 1 :] if "serve" in args else []


def target_url(flags: Sequence[str]) -> str:
    """The ``/healthz`` URL of a server started with ``flags``."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    args, _ = parser.parse_known_args(list(flags))
    server = effective_config(args).server
    host = server.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{server.port}/healthz"


def main(argv: Sequence[str] | None = None) -> int:
    flags = list(sys.argv[1:] if argv is None else argv)
    if not flags and PROC1.exists():
        flags = serve_flags(PROC1.read_bytes().decode(errors="replace").split("\0"))
    try:
        url = target_url(flags)
    except (ConfigError, ValueError) as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            ok = resp.status == 200 and json.loads(resp.read()).get("status") == "ok"
    except (OSError, ValueError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
