"""Stage 1 of :mod:`proxy.yamlconf`: YAML text parsed into a *located* raw tree, and
the errors that name where (``config.yaml:12: …``).

:func:`load_file` / :func:`load_text` parse with a SafeLoader (libyaml's when present)
that records where every mapping, key, value and list item started. Mappings come back
as :class:`LocatedMap` (a ``dict`` subclass) and sequences as :class:`LocatedList` (a
``list`` subclass); scalars are plain Python values. Duplicate keys are errors (plain
PyYAML silently keeps the last one). Nothing here logs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigError", "ErrorItem", "Invalid", "LocatedList", "LocatedMap", "load_file", "load_text"]


# --------------------------------------------------------------------------- errors


@dataclasses.dataclass(frozen=True)
class ErrorItem:
    """One problem at one place. ``line`` is 1-based; 0 means "whole file"."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}: {self.message}"
        return f"{self.file}: {self.message}"


class ConfigError(Exception):
    """A configuration file could not be loaded or validated.

    ``file`` and ``line`` locate the first problem; ``errors`` lists all of them.
    ``str(err)`` is one line per problem, ready to print to a user.
    """

    def __init__(self, errors: Sequence[ErrorItem]) -> None:
        if not errors:
            raise ValueError("ConfigError needs at least one error")
        self.errors: tuple[ErrorItem, ...] = tuple(errors)
        self.file: str = self.errors[0].file
        self.line: int = self.errors[0].line
        super().__init__("\n".join(str(e) for e in self.errors))

    @classmethod
    def at(cls, file: str, line: int, message: str) -> ConfigError:
        """Build an error for a single location."""
        return cls([ErrorItem(file, line, message)])


class Invalid(ValueError):
    """Raise from a dataclass ``__post_init__`` to report a semantic problem.

    ``key`` names the (YAML) key responsible, so the error points at its line.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


# ------------------------------------------------------------------ located values


class LocatedMap(dict[Any, Any]):
    """A YAML mapping that remembers its source file and line numbers (1-based)."""

    source: str = "<config>"
    line: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[Any, int] = {}
        self.value_lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int:
        """Line of ``key`` if present, else the mapping's own line."""
        return self.key_lines.get(key, self.line)

    def value_line_of(self, key: Any) -> int:
        """Line where the value of ``key`` starts, else the key's line."""
        return self.value_lines.get(key, self.line_of(key))


class LocatedList(list[Any]):
    """A YAML sequence that remembers its source file and per-item lines (1-based)."""

    source: str = "<config>"
    line: int = 0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines: list[int] = []

    def line_of(self, index: int) -> int:
        """Line of item ``index`` if known, else the sequence's own line."""
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


#: libyaml's parser when PyYAML has it (the same nodes and marks, several times faster)
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LocatingLoader(_SafeBase):  # type: ignore[misc]
    """SafeLoader producing :class:`LocatedMap` / :class:`LocatedList`."""

    source_name: str = "<config>"


def _construct_map(loader: _LocatingLoader, node: yaml.MappingNode) -> Any:
    result = LocatedMap()
    result.source = loader.source_name
    result.line = node.start_mark.line + 1
    yield result
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        key_line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:
            raise ConfigError.at(loader.source_name, key_line, "mapping keys must be scalars") from None
        if key in result:
            raise ConfigError.at(
                loader.source_name,
                key_line,
                f"duplicate key {key!r} (first defined on line {result.key_lines[key]})",
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_line
        result.value_lines[key] = value_node.start_mark.line + 1


def _construct_seq(loader: _LocatingLoader, node: yaml.SequenceNode) -> Any:
    result = LocatedList()
    result.source = loader.source_name
    result.line = node.start_mark.line + 1
    yield result
    for item in node.value:
        result.append(loader.construct_object(item, deep=True))
        result.item_lines.append(item.start_mark.line + 1)


_LocatingLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LocatingLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def load_text(text: str, name: str = "<config>") -> Any:
    """Parse YAML ``text`` into a located raw tree. ``name`` is used in errors.

    An empty document yields an empty :class:`LocatedMap`.
    """
    loader = _LocatingLoader(text)
    loader.source_name = name
    try:
        data = loader.get_single_data()
    except ConfigError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError.at(name, line, f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.at(name, 0, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        empty = LocatedMap()
        empty.source = name
        empty.line = 1
        return empty
    return data


def load_file(path: str | os.PathLike[str]) -> Any:
    """Read and parse a YAML file; errors name the path as given."""
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError.at(name, 0, "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError.at(name, 0, f"cannot read file: {exc.__class__.__name__}") from None
    return load_text(text, name)
