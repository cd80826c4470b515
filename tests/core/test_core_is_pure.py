"""The core has no I/O (DESIGN §8): no module of ``proxy.core`` imports a network, process,
database or event-loop library, nor the proxy's own I/O layers — what ``check``, the
proxy and the replay tool share stays pure functions over plain data. Checked on the
source (every import statement, at any depth: a function-level import counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "proxy" / "core"

#: Top-level modules that do I/O (or run an event loop) and have no place in the core.
IO_MODULES = frozenset({
    "aiohttp", "asyncio", "concurrent", "ftplib", "http", "httpx", "litellm", "multiprocessing",
    "redis", "requests", "selectors", "shutil", "signal", "smtplib", "socket", "socketserver",
    "sqlite3", "ssl", "subprocess", "tempfile", "urllib.request", "uvloop", "websockets",
})
#: The proxy's packages that sit on top of the core (the core never imports them).
OUTER = ("proxy.server", "proxy.gate", "proxy.state", "proxy.dashboard", "proxy.integrations")


def _imports(text: str, path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``text`` (the source of the module at
    ``path``), relative ones resolved; ``from m import n`` gives ``m`` and ``m.n``."""
    package = path.relative_to(CORE.parents[1]).with_suffix("").parts[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def _forbidden(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in (*IO_MODULES, *OUTER))


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_the_core_is_found() -> None:
    assert len(CORE_FILES) > 50 and (CORE / "transition.py") in CORE_FILES


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_a_core_module_imports_no_io(path: Path) -> None:
    bad = [f"line {line}: {mod}" for line, mod in _imports(path.read_text(), path) if _forbidden(mod)]
    assert not bad, f"{path.relative_to(CORE.parents[1])} imports I/O into the core: {bad}"


@pytest.mark.parametrize("source, expected", [
    ("import asyncio\n", True),
    ("from urllib.request import urlopen\n", True),
    ("from urllib import request\n", True),
    ("from urllib.parse import urlsplit\n", False),
    ("def f():\n    import sqlite3\n", True),
    ("from ...gate.tracker import Tracker\n", True),
    ("from ... import state\n", True),
    ("from ..messages import Message\n", False),
    ("from proxy.server.app import create_app\n", True),
    ("from proxy.core.messages import Message\n", False),
])
def test_the_check_tells_io_from_pure(source: str, expected: bool) -> None:
    # as if it were proxy/core/identifiers/probe.py (parsed, never written)
    got = _imports(source, CORE / "identifiers" / "probe.py")
    assert any(_forbidden(m) for _, m in got) is expected
