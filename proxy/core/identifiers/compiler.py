"""Compiling a raw rule mapping (see :mod:`.rules` for the schema) into a frozen
:class:`~.rules.Rule`: every key validated, the pattern, context keywords and ``expand``
class compiled, validators and filters resolved by name, the literals of the speed
fields prepared for the scanner.

Errors name the file and line (``detectors.yaml:42: rule 'x': unknown key 'patern'``).
Unknown keys are errors; regexes compile once. Separate from :mod:`.catalog`, which loads
rule files and layers rules into a catalogue: this module knows one rule at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .filters import DEFAULT_FILTERS, FILTERS, REGEX_FILTERS, combined_filter
from .rules import BINDING_CLASSES, CatalogError, Example, Rule
from .textindex import PREFILTERS
from .validators import VALIDATORS

# Rules compile with the standard library engine; the scanner (see .scanner) keeps
# every pattern off the bulk of a text, so engine speed on full scans matters little.
_engine = re

__all__ = ["compile_rule"]

_RULE_KEYS = frozenset(
    {
        "id", "kind", "description", "pattern", "group", "ignore_case", "anchors", "context",
        "regenerable", "sensitive", "priority", "nests", "norm", "validators", "filters",
        "skip_filters", "examples", "negative_examples", "max_len", "prefilter", "reach", "boundary",
        "tokens", "expand", "run_len", "binding",
    }
)
_CONTEXT_KEYS = frozenset({"required", "boost", "window", "scope"})
_EXAMPLE_KEYS = frozenset({"text", "value", "command", "tool"})


# --------------------------------------------------------------------------- compiling


def _keyword_regex(words: Sequence[str]) -> re.Pattern[str] | None:
    pieces: list[str] = []
    for w in words:
        w = str(w)
        prefix = w.endswith("*")
        core = w[:-1] if prefix else w
        if not core:
            continue
        p = re.escape(core)
        if core[0].isalnum():
            p = r"(?<![A-Za-z0-9])" + p
        if not prefix and core[-1].isalnum():
            p += r"(?:s|es|ed|d|ing)?(?![A-Za-z])"
        pieces.append(p)
    if not pieces:
        return None
    # longest first so that alternation prefers specific keywords
    pieces.sort(key=len, reverse=True)
    return re.compile("|".join(pieces), re.I)


_WORD_RE = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("", "s", "es", "ed", "d", "ing")


def _context_literals(required: Sequence[str]) -> tuple[tuple[str, bool], ...]:
    """Presence tests for context keywords: plain words become word tests for each
    inflection the keyword regex accepts; prefixes (``x*``), phrases and symbols become
    substring tests."""
    out: dict[tuple[str, bool], None] = {}
    for k in required:
        low = k.lower()
        if low.endswith("*"):
            out[(low[:-1], False)] = None
        elif _WORD_RE.fullmatch(low):
            for suf in _SUFFIXES:
                out[(low + suf, True)] = None
        else:
            out[(low, False)] = None
    return tuple(out)


def _as_str_list(v: Any, what: str, where: str) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if not isinstance(v, list) or not all(isinstance(x, (str, int, float)) for x in v):
        raise CatalogError(f"{where}: {what} must be a list of strings")
    return tuple(str(x) for x in v)


def _examples(v: Any, where: str, negative: bool) -> tuple[Example, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise CatalogError(f"{where}: {'negative_examples' if negative else 'examples'} must be a list")
    out: list[Example] = []
    for item in v:
        if isinstance(item, str):
            out.append(Example(item, None if negative else item))
        elif isinstance(item, dict):
            unknown = set(item) - _EXAMPLE_KEYS - {"__line__"}
            if unknown:
                raise CatalogError(f"{where}: example has unknown key(s) {sorted(unknown)}")
            text = item.get("text")
            if not isinstance(text, str):
                raise CatalogError(f"{where}: example needs a 'text' string")
            value = item.get("value")
            if negative and value is not None:
                raise CatalogError(f"{where}: negative examples take no 'value'")
            out.append(
                Example(
                    text,
                    None if negative else (str(value) if value is not None else text),
                    item.get("command"),
                    item.get("tool"),
                )
            )
        else:
            raise CatalogError(f"{where}: examples must be strings or mappings")
    return tuple(out)


def compile_rule(raw: Mapping[str, Any], origin: str = "<rules>") -> Rule:
    """Validate and compile one raw rule mapping. Raises :class:`~.rules.CatalogError`."""
    line = raw.get("__line__")
    rid = raw.get("id")
    where = f"{origin}:{line}" if line else origin
    if not isinstance(rid, str) or not rid:
        raise CatalogError(f"{where}: rule needs a non-empty string 'id'")
    where = f"{where}: rule {rid!r}"
    unknown = set(raw) - _RULE_KEYS - {"__line__"}
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {sorted(unknown)} (expected one of: {', '.join(sorted(_RULE_KEYS))})")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
        raise CatalogError(f"{where}: 'kind' must be a snake_case string")
    pat = raw.get("pattern")
    if not isinstance(pat, str) or not pat:
        raise CatalogError(f"{where}: 'pattern' must be a non-empty string")
    flags = re.I if raw.get("ignore_case") else 0
    try:
        rx = _engine.compile(pat, flags)
    except re.error as e:
        raise CatalogError(f"{where}: bad pattern: {e}") from None
    group: str | int | tuple[str, ...]
    g = raw.get("group")
    if g is None:
        group = "id" if "id" in rx.groupindex else 0
    elif isinstance(g, int) or (isinstance(g, str) and g in rx.groupindex):
        group = g
    elif isinstance(g, list) and g and all(isinstance(x, str) and x in rx.groupindex for x in g):
        group = tuple(g)
    else:
        raise CatalogError(f"{where}: group {g!r} is not a group (or list of groups) of the pattern")
    ctx = raw.get("context") or {}
    if not isinstance(ctx, dict):
        raise CatalogError(f"{where}: 'context' must be a mapping")
    cunknown = set(ctx) - _CONTEXT_KEYS - {"__line__"}
    if cunknown:
        raise CatalogError(f"{where}: unknown context key(s) {sorted(cunknown)}")
    required = _as_str_list(ctx.get("required"), "context.required", where)
    boost = _as_str_list(ctx.get("boost"), "context.boost", where)
    window = ctx.get("window", 60)
    scope = ctx.get("scope", "window")
    if not isinstance(window, int) or window < 0:
        raise CatalogError(f"{where}: context.window must be a non-negative integer")
    if scope not in ("window", "line", "text"):
        raise CatalogError(f"{where}: context.scope must be window, line or text")
    vnames = _as_str_list(raw.get("validators"), "validators", where)
    for v in vnames:
        if v not in VALIDATORS:
            raise CatalogError(f"{where}: unknown validator {v!r} (known: {', '.join(sorted(VALIDATORS))})")
    extra_f = _as_str_list(raw.get("filters"), "filters", where)
    skip_f = _as_str_list(raw.get("skip_filters"), "skip_filters", where)
    for f in (*extra_f, *skip_f):
        if f not in FILTERS:
            raise CatalogError(f"{where}: unknown filter {f!r} (known: {', '.join(sorted(FILTERS))})")
    fnames = tuple(dict.fromkeys(f for f in (*DEFAULT_FILTERS, *extra_f) if f not in skip_f))
    norm = raw.get("norm")
    if norm is not None:
        if not isinstance(norm, str):
            raise CatalogError(f"{where}: 'norm' must be a template string")
        for name in re.findall(r"\{(\w+)\}", norm):
            if name not in rx.groupindex:
                raise CatalogError(f"{where}: norm template names unknown group {name!r}")
    for key, typ in (("regenerable", bool), ("sensitive", bool), ("nests", bool), ("ignore_case", bool)):
        if key in raw and not isinstance(raw[key], typ):
            raise CatalogError(f"{where}: {key!r} must be true or false")
    prio = raw.get("priority", 50)
    if not isinstance(prio, int) or isinstance(prio, bool):
        raise CatalogError(f"{where}: 'priority' must be an integer")
    max_len = raw.get("max_len", 0)
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 0:
        raise CatalogError(f"{where}: 'max_len' must be a non-negative integer")
    desc = raw.get("description", "")
    prefilter = raw.get("prefilter")
    if prefilter is not None and prefilter not in PREFILTERS:
        raise CatalogError(f"{where}: 'prefilter' must be one of {', '.join(PREFILTERS)}")
    reach_raw = raw.get("reach", [64, max_len or 1024])
    if (
        not isinstance(reach_raw, list)
        or len(reach_raw) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in reach_raw)
    ):
        raise CatalogError(f"{where}: 'reach' must be [before, after] non-negative integers")
    expand_raw = raw.get("expand")
    expand = None
    if expand_raw is not None:
        if not isinstance(expand_raw, str) or not expand_raw.startswith("[") or not expand_raw.endswith("]"):
            raise CatalogError(f"{where}: 'expand' must be a regex character class such as '[\\w./-]'")
        try:
            expand = re.compile(f"(?:{expand_raw})*".encode(), re.ASCII)
        except re.error as e:
            raise CatalogError(f"{where}: bad 'expand' class: {e}") from None
    run_len_raw = raw.get("run_len")
    run_len: tuple[int, int] | None = None
    if run_len_raw is not None:
        if (
            not isinstance(run_len_raw, list)
            or len(run_len_raw) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in run_len_raw)
            or prefilter is None
        ):
            raise CatalogError(f"{where}: 'run_len' must be [min, max] positive integers (with a prefilter)")
        run_len = (run_len_raw[0], run_len_raw[1])
    boundary = raw.get("boundary")
    if boundary not in (None, "word", "camel"):
        raise CatalogError(f"{where}: 'boundary' must be 'word' or 'camel'")
    binding = raw.get("binding", "handle")
    if binding not in BINDING_CLASSES:
        raise CatalogError(f"{where}: 'binding' must be one of {', '.join(BINDING_CLASSES)}")
    return Rule(
        id=rid,
        kind=kind,
        pattern=rx,
        group=group,
        anchors=tuple(a.lower() for a in _as_str_list(raw.get("anchors"), "anchors", where)),
        context_required=_keyword_regex(required),
        context_boost=_keyword_regex(boost),
        window=window,
        scope=scope,
        regenerable=bool(raw.get("regenerable", False)),
        sensitive=bool(raw.get("sensitive", False)),
        priority=prio,
        nests=bool(raw.get("nests", False)),
        norm=norm,
        validators=tuple(VALIDATORS[v] for v in vnames),
        filters=tuple(FILTERS[f] for f in fnames),
        filter_rx=combined_filter(fnames),
        filter_fns=tuple(FILTERS[f] for f in fnames if f not in REGEX_FILTERS),
        validator_names=vnames,
        filter_names=fnames,
        examples=_examples(raw.get("examples"), where, False),
        negative_examples=_examples(raw.get("negative_examples"), where, True),
        description=str(desc or ""),
        origin=where.rsplit(": rule", 1)[0],
        max_len=max_len,
        prefilter=prefilter,
        reach=(reach_raw[0], reach_raw[1]),
        run_len=run_len,
        boundary=boundary,
        context_literals=_context_literals(required),
        tokens=tuple(t.lower() for t in _as_str_list(raw.get("tokens"), "tokens", where)),
        expand=expand,
        binding=binding,
        raw=json.dumps({k: v for k, v in raw.items() if k != "__line__"}, sort_keys=True, default=str),
    )
