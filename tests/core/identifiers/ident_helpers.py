"""Helpers shared by the identifier-layer tests (imported by module name)."""

from __future__ import annotations

from proxy.core.identifiers import Catalog, Identifier, Source, extract_text


def tool_source(command: str | None = None, tool: str | None = None, mutating: bool | None = False) -> Source:
    """A tool-result source, optionally produced by a shell ``command``."""
    return Source(3, "tool", "tool_result", tool_name=tool or ("bash" if command else None), command=command, mutating=mutating)


def found(text: str, source: Source | None = None, catalog: Catalog | None = None) -> list[Identifier]:
    return extract_text(text, source or tool_source(), catalog, cache=None)


def values(text: str, kind: str | None = None, source: Source | None = None) -> list[str]:
    return [i.value for i in found(text, source) if kind is None or i.kind == kind]
