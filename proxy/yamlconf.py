"""Two-stage YAML configuration: located raw tree, then validated frozen dataclasses.

Stage 1 (:func:`load_file` / :func:`load_text`, in :mod:`proxy.yamlsource`) parses YAML with a SafeLoader that
records where every mapping, key, value and list item started. Mappings come back
as :class:`LocatedMap` (a ``dict`` subclass) and sequences as :class:`LocatedList`
(a ``list`` subclass); scalars are plain Python values. Duplicate keys are errors
(plain PyYAML silently keeps the last one).

Stage 2 (:func:`build`) turns a raw value into an instance of a (frozen) dataclass,
recursively, driven by the dataclass's type hints:

* ``str``, ``int``, ``float``, ``bool`` (no silent coercion: ``"80"`` is not an
  ``int``, ``true`` is not an ``int``; an ``int`` is accepted for ``float``),
* ``X | None`` / ``Optional[X]``, ``Literal[...]``,
* ``tuple[X, ...]`` (YAML list), ``Mapping[str, X]`` (frozen as a read-only mapping),
* nested dataclasses (YAML mapping), ``typing.Any`` (passed through unchanged).

Unknown keys, missing required keys and type mismatches are collected and raised
together as one :class:`ConfigError` whose lines read
``config.yaml:12: unknown key 'upstrem' in server (expected one of: host, port)``.

Environment expansion: ``${VAR}`` and ``${VAR:-default}`` inside string values are
expanded during stage 2, so the raw tree (and every error message, which only ever
quotes raw values) never contains a secret read from the environment. A string made
only of a reference (``port: ${PORT}``) may feed an ``int``/``float``/``bool`` field.
Expansion can be disabled per field with ``field(metadata=meta(expand_env=False))``
(useful for regexes). Unset variables without a default are errors.

Field metadata (see :func:`meta`): ``key`` (YAML spelling when it differs from the
attribute name), ``expand_env``. A dataclass may validate itself in
``__post_init__`` by raising :class:`Invalid` (optionally naming the offending key,
whose line is then reported) or ``ValueError``.

Typical use::

    raw = yamlconf.load_file("policy.yaml")
    policy = yamlconf.build(PolicyFile, raw, name="policy file")

Nothing here logs; values are never echoed except the raw text the user wrote.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union

from proxy.yamlsource import (
    ConfigError,
    ErrorItem,
    Invalid,
    LocatedList,
    LocatedMap,
    load_file,
    load_text,
)

__all__ = [
    "ConfigError",
    "ErrorItem",
    "Invalid",
    "LocatedList",
    "LocatedMap",
    "build",
    "expand_env",
    "load_file",
    "load_text",
    "meta",
]

T = TypeVar("T")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_WHOLE_ENV_REF = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::-.*?)?\}$")
_MISSING = object()


# ------------------------------------------------------------------- env expansion


def expand_env(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` references in ``value``.

    Raises ``KeyError(VAR)`` for an unset variable without a default. ``$`` not
    followed by ``{`` is left alone, so regexes like ``^a$`` are unaffected.
    """
    env = os.environ if environ is None else environ

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise KeyError(name)

    return _ENV_REF.sub(repl, value)


# ---------------------------------------------------------------------- metadata


def meta(*, key: str | None = None, expand_env: bool = True) -> dict[str, Any]:
    """Metadata for ``dataclasses.field(metadata=...)`` understood by :func:`build`."""
    return {"yamlconf": {"key": key, "expand_env": expand_env}}


def _field_options(f: dataclasses.Field[Any]) -> tuple[str, bool]:
    opts = f.metadata.get("yamlconf", {})
    return (opts.get("key") or f.name, bool(opts.get("expand_env", True)))


# --------------------------------------------------------------------------- build


@dataclasses.dataclass
class _Ctx:
    source: str
    environ: Mapping[str, str]
    errors: list[ErrorItem]
    top: str = "config"

    def label(self, where: str) -> str:
        return where or self.top

    def error(self, line: int, message: str) -> None:
        self.errors.append(ErrorItem(self.source, line, message))


class _Failed(Exception):
    """Internal: a value failed validation; the error is already recorded."""


def build(
    cls: type[T],
    raw: Any,
    *,
    name: str = "config",
    source: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Validate ``raw`` (from :func:`load_text`/:func:`load_file`) into ``cls``.

    ``name`` describes the top-level mapping in messages ("in config").
    ``source`` overrides the file name (defaults to the one recorded by the loader).
    Raises :class:`ConfigError` listing every problem found.
    """
    src = source or getattr(raw, "source", None) or "<config>"
    ctx = _Ctx(src, os.environ if environ is None else environ, [], name)
    line = getattr(raw, "line", 0)
    try:
        result = _convert(cls, raw, ctx, line, "", expand=True)
    except _Failed:
        result = _MISSING
    if ctx.errors:
        raise ConfigError(ctx.errors)
    assert result is not _MISSING
    return typing.cast(T, result)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return "mapping"
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            tp.__name__, tp.__name__
        )
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (tuple, list, Sequence):
        return "list"
    if origin in (dict, Mapping):
        return "mapping"
    return str(tp)


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _convert(tp: Any, value: Any, ctx: _Ctx, line: int, where: str, *, expand: bool) -> Any:
    """Convert one raw value to type ``tp``; record an error and raise _Failed if bad."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)

    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        # Try each non-None option silently; report once if none fits.
        for option in options:
            if option is type(None):
                continue
            trial = _Ctx(ctx.source, ctx.environ, [], ctx.top)
            try:
                return _convert(option, value, trial, line, where, expand=expand)
            except _Failed:
                if len([o for o in options if o is not type(None)]) == 1:
                    ctx.errors.extend(trial.errors)
                    raise
        ctx.error(line, f"{ctx.label(where)}: expected {_type_name(tp)}, got {_describe(value)}")
        raise _Failed

    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        candidate = value
        if isinstance(value, str) and expand:
            candidate = _expand(value, ctx, line, where)
        if candidate in allowed and type(candidate) is type(allowed[allowed.index(candidate)]):
            return candidate
        ctx.error(
            line,
            f"{ctx.label(where)}: invalid value {value!r} (expected one of: "
            + ", ".join(str(a) for a in allowed)
            + ")",
        )
        raise _Failed

    if origin in (tuple, list, Sequence) or tp in (tuple, list):
        args = typing.get_args(tp)
        item_tp: Any = args[0] if args else Any
        if not isinstance(value, list):
            ctx.error(line, f"{ctx.label(where)}: expected a list, got {_describe(value)}")
            raise _Failed
        items: list[Any] = []
        ok = True
        for i, item in enumerate(value):
            item_line = value.line_of(i) if isinstance(value, LocatedList) else line
            try:
                items.append(
                    _convert(
                        item_tp, item, ctx, item_line, f"{ctx.label(where)}[{i}]", expand=expand
                    )
                )
            except _Failed:
                ok = False
        if not ok:
            raise _Failed
        return tuple(items)

    if origin in (dict, Mapping) or tp in (dict, Mapping):
        args = typing.get_args(tp)
        val_tp: Any = args[1] if len(args) == 2 else Any
        if not isinstance(value, dict):
            ctx.error(line, f"{ctx.label(where)}: expected a mapping, got {_describe(value)}")
            raise _Failed
        out: dict[str, Any] = {}
        ok = True
        for k, v in value.items():
            kline = value.line_of(k) if isinstance(value, LocatedMap) else line
            if not isinstance(k, str):
                ctx.error(kline, f"{ctx.label(where)}: keys must be strings, got {_describe(k)}")
                ok = False
                continue
            vline = value.value_line_of(k) if isinstance(value, LocatedMap) else line
            try:
                out[k] = _convert(val_tp, v, ctx, vline, _join(where, str(k)), expand=expand)
            except _Failed:
                ok = False
        if not ok:
            raise _Failed
        return types.MappingProxyType(out)

    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, ctx, line, where)

    if tp in (str, int, float, bool):
        return _convert_scalar(tp, value, ctx, line, where, expand=expand)

    raise TypeError(f"yamlconf.build: unsupported field type {tp!r} at {where}")


def _expand(value: str, ctx: _Ctx, line: int, where: str) -> str:
    try:
        return expand_env(value, ctx.environ)
    except KeyError as exc:
        ctx.error(line, f"{ctx.label(where)}: environment variable {exc.args[0]} is not set")
        raise _Failed from None


def _convert_scalar(tp: type, value: Any, ctx: _Ctx, line: int, where: str, *, expand: bool) -> Any:
    if isinstance(value, str) and expand:
        whole_ref = _WHOLE_ENV_REF.match(value) is not None
        expanded = _expand(value, ctx, line, where)
        if tp is str:
            return expanded
        if whole_ref:
            parsed = _parse_env_scalar(tp, expanded)
            if parsed is not _MISSING:
                return parsed
            ctx.error(line, f"{ctx.label(where)}: {value} does not hold a valid {_type_name(tp)}")
            raise _Failed
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str and isinstance(value, str):
        return value
    ctx.error(line, f"{ctx.label(where)}: expected {_type_name(tp)}, got {_describe(value)}")
    raise _Failed


def _parse_env_scalar(tp: type, text: str) -> Any:
    text = text.strip()
    if tp is bool:
        low = text.lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        return _MISSING
    try:
        return tp(text)
    except ValueError:
        return _MISSING


def _build_dataclass(cls: type, value: Any, ctx: _Ctx, line: int, where: str) -> Any:
    if not isinstance(value, dict):
        ctx.error(line, f"{ctx.label(where)}: expected a mapping, got {_describe(value)}")
        raise _Failed
    located = value if isinstance(value, LocatedMap) else None
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    by_key: dict[str, tuple[dataclasses.Field[Any], bool]] = {}
    for f in fields:
        key, expand = _field_options(f)
        by_key[key] = (f, expand)

    def line_of(key: Any) -> int:
        return located.line_of(key) if located is not None else line

    def value_line_of(key: Any) -> int:
        return located.value_line_of(key) if located is not None else line

    ok = True
    for key in value:
        if key not in by_key:
            ctx.error(
                line_of(key),
                f"unknown key {key!r} in {ctx.label(where)} (expected one of: {', '.join(by_key)})",
            )
            ok = False

    kwargs: dict[str, Any] = {}
    for key, (f, expand) in by_key.items():
        if key not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                ctx.error(line, f"missing required key {key!r} in {ctx.label(where)}")
                ok = False
            continue
        try:
            kwargs[f.name] = _convert(
                hints[f.name], value[key], ctx, value_line_of(key), _join(where, key), expand=expand
            )
        except _Failed:
            ok = False
    if not ok:
        raise _Failed
    try:
        return cls(**kwargs)
    except Invalid as exc:
        bad_line = line_of(exc.key) if exc.key is not None else line
        ctx.error(bad_line, f"{ctx.label(where)}: {exc}")
        raise _Failed from None
    except (ValueError, TypeError) as exc:
        ctx.error(line, f"{ctx.label(where)}: {exc}")
        raise _Failed from None


def field_names(cls: type) -> list[str]:
    """YAML keys accepted by dataclass ``cls`` (for docs and error hints)."""
    return [_field_options(f)[0] for f in dataclasses.fields(cls) if f.init]
