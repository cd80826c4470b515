"""Declarative detector catalog: raw YAML rules → validated, compiled, frozen :class:`Catalog`.

A rule (gitleaks / Nosey Parker style) is data::

    - id: git-sha-short              # unique rule id (reported as Identifier.detector)
      kind: git_sha                  # identifier kind
      pattern: '(?<![\\w-])(?P<id>[0-9a-fA-F]{7,12})(?![\\w-])'   # compiled once
      group: id                      # capture group holding the value (default: "id" if
                                     # the pattern has it, else the whole match)
      anchors: [git, commit]         # literal prefilter (case-insensitive): the rule runs
                                     # only if one occurs in the text or the source command
      context:
        required: [commit, sha, HEAD, git]   # one must occur near the match (or in the
                                             # producing command / tool name)
        window: 60                   # characters before the match (after: window // 2)
        scope: window                # window | line | text
      regenerable: false             # default regenerability of the kind
      sensitive: false               # secrets class: never re-injected in clear
      priority: 40                   # overlap resolution: higher wins
      binding: version               # what such a value is to the provenance rules
                                     # (PRINCIPLES.md; see BINDING_CLASSES below)
      nests: false                   # a locator (path/URL) that may contain other matches
      norm: "{topic}:{partition}@{offset}"   # optional norm template over named groups
      validators: [has_digit_and_letter]     # named in validators.VALIDATORS, all must pass
      filters: []                    # extra filters (filters.FILTERS) on top of defaults
      skip_filters: [number]         # default filters this rule does not run
      examples:                      # each must yield this kind with this value
        - {text: "commit d1bf724 fixes it", value: d1bf724}
        - {text: "d1bf724 Fix", value: d1bf724, command: "git log --oneline"}
      negative_examples:             # must not yield this kind
        - "build 1234567 passed"

Speed fields (see :mod:`.scanner`; all are necessary conditions of a match, so they never
change what a rule finds, only how fast):

- ``tokens``: whole words (snake/kebab/camel pieces, lower case) one of which must occur;
  the match starts at the word unless ``reach[0] > 0``.
- ``anchors``: substrings one of which must occur (``"://"``, ``"sk-ant-"``).
- ``prefilter`` (``hex``, ``alnum26``, ``underscore8``, ``digit4``) with ``run_len``:
  the match starts at (or near) a run of such characters of that length.
- ``expand``: a character class; the match may start before the anchor, at the left end
  of the run of these characters (``[\\w.-]`` before the ``/`` of a path).
- ``reach: [before, after]``: how far a match may start before / extend after a hit.
- ``boundary``: ``word`` (no alphanumeric before the match) or ``camel`` (also ``fooId``).
- ``group`` may list several groups (alternatives): the first that participates.
- ``max_len``: upper bound of a value's length (window sizes).

Context keywords match at word starts; a keyword matches its plural/past forms
(``commit`` → ``commits``); a trailing ``*`` makes it a prefix (``migrat*``).

Errors name the file and line (``detectors.yaml:42: rule 'x': unknown key 'patern'``).
Unknown keys are errors; regexes compile once; the :class:`Catalog` is immutable and can
be shared across threads. :meth:`Catalog.build` layers user rules, disabled rules/kinds
and an allowlist on top of the shipped defaults (the policy layer calls it).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml

from .filters import DEFAULT_FILTERS, FILTERS, REGEX_FILTERS, Filter, combined_filter
from .validators import VALIDATORS, Validator

# Rules compile with the standard library engine; the scanner (see .scanner) keeps
# every pattern off the bulk of a text, so engine speed on full scans matters little.
_engine = re

__all__ = ["DEFAULT_RULES_FILE", "Catalog", "CatalogError", "Example", "Rule"]

DEFAULT_RULES_FILE = "detectors.yaml"

ContextScope = Literal["window", "line", "text"]
BindingClass = Literal["handle", "version", "state", "name", "noise"]

#: What a detected value is, for the provenance rules (:mod:`.provenance`):
#:
#: - ``handle``: the identifier of an entity or an operation (upload id, lock token,
#:   refund id, UUID …): required when a state-changing step minted it.
#: - ``version``: the id of an immutable version that is also the *value* of a state
#:   (a commit, a migration revision, an image digest): required when minted, and as
#:   the prior state of a later change (the HEAD before a reset).
#: - ``state``: a value of a state, never an entity (an offset, an LSN, an image
#:   reference, a DNS target): the new value a change reports is current state that can
#:   be read again; required only as the prior state of a change.
#: - ``name``: a human-given name or locator (a path, a URL, a terraform address, a k8s
#:   ``kind/name``): required only when it has a machine-made part (a stamp, a random
#:   suffix) and a state-changing step minted it.
#: - ``noise``: ids of read-only noise (request and trace ids, layer digests of a
#:   pull, wheel hashes): never required unless the agent itself wrote it into a
#:   state-changing call.
BINDING_CLASSES: tuple[str, ...] = ("handle", "version", "state", "name", "noise")
Boundary = Literal["word", "camel"]
#: Compiled pattern of the rule engine (``regex`` when available, else ``re``).
Pattern = Any

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


class CatalogError(ValueError):
    """A rule file or user rule is invalid. The message names the file and line."""


@dataclass(frozen=True, slots=True)
class Example:
    """A detector example: ``text`` scanned with an optional producing ``command``/``tool``
    as source context; ``value`` is what must (or, for negatives, ``None``) be found."""

    text: str
    value: str | None = None
    command: str | None = None
    tool: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled detector (see the module docstring for the fields' meaning)."""

    id: str
    kind: str
    pattern: Pattern
    #: The capture group holding the value (or several alternatives: the first that
    #: participates in the match).
    group: str | int | tuple[str, ...]
    anchors: tuple[str, ...]
    context_required: re.Pattern[str] | None
    context_boost: re.Pattern[str] | None
    window: int
    scope: ContextScope
    regenerable: bool
    sensitive: bool
    priority: int
    nests: bool
    norm: str | None
    validators: tuple[Validator, ...]
    filters: tuple[Filter, ...]
    validator_names: tuple[str, ...] = ()
    filter_names: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    negative_examples: tuple[Example, ...] = ()
    description: str = ""
    origin: str = ""
    max_len: int = 0
    #: The rule's regex-backed filters combined into one pattern (fullmatch = exclude),
    #: and its other filters; together equivalent to ``filters``.
    filter_rx: re.Pattern[str] | None = None
    filter_fns: tuple[Filter, ...] = ()
    #: A character-run prefilter (``hex``: 7+ hex digits; ``alnum26``: 26+ alphanumerics;
    #: ``underscore8``: ``_`` then 8+ alphanumerics), computed once per text.
    prefilter: str | None = None
    #: Only prefilter runs with a length in ``[min, max]`` can start a match.
    run_len: tuple[int, int] | None = None
    #: How far a match may start before / end after an anchor or prefilter hit.
    reach: tuple[int, int] = (64, 1024)
    #: Check at the match start: ``word`` (no letter/digit before) or ``camel`` (also
    #: allows ``fooId``/``foo_id``); cheaper than a leading look-behind.
    boundary: Boundary | None = None
    #: Lower-cased literal forms of the required context keywords with, for each, whether
    #: it is a whole word (checked against the text's word set) or a substring.
    context_literals: tuple[tuple[str, bool], ...] = ()
    #: Whole-word anchors (lower case; snake/kebab/camel pieces of the text count).
    tokens: tuple[str, ...] = ()
    #: Characters that may precede an anchor inside the identifier (``/`` in a path,
    #: ``://`` in a URL): the match starts at the left end of their run (a ``bytes``
    #: pattern run over the reversed ASCII view of the text).
    expand: re.Pattern[bytes] | None = None
    #: What such a value is to the provenance rules (:data:`BINDING_CLASSES`).
    binding: BindingClass = "handle"
    raw: str = field(default="", compare=False, repr=False)


# --------------------------------------------------------------------------- YAML loading


#: libyaml's parser when PyYAML was built with it (≈ 10x faster on the 57 KB detector
#: table, which every process start and ``check --policy`` parses); same nodes, same marks.
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeBase):  # type: ignore[misc]
    """SafeLoader that records the line of every mapping under the key ``__line__``."""


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for k_node, v_node in node.value:
        key = loader.construct_object(k_node, deep=True)
        if key in out:
            raise CatalogError(f"{{file}}:{k_node.start_mark.line + 1}: duplicate key {key!r}")
        out[key] = loader.construct_object(v_node, deep=True)
    out["__line__"] = node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str, name: str) -> list[dict[str, Any]]:
    try:
        data = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - SafeLoader subclass
    except CatalogError as e:
        raise CatalogError(str(e).replace("{file}", name)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise CatalogError(f"{name}{line}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if isinstance(data, dict) and "rules" in data:
        extra = set(data) - {"rules", "__line__", "version"}
        if extra:
            raise CatalogError(f"{name}:{data['__line__']}: unknown top-level key(s) {sorted(extra)}")
        data = data["rules"]
    if not isinstance(data, list):
        raise CatalogError(f"{name}: expected a list of rules (or a mapping with 'rules')")
    for i, r in enumerate(data):
        if not isinstance(r, dict):
            raise CatalogError(f"{name}: rule #{i + 1} is not a mapping")
    return data


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
    """Validate and compile one raw rule mapping. Raises :class:`CatalogError`."""
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
    if prefilter not in (None, "hex", "alnum26", "underscore8", "digit4"):
        raise CatalogError(f"{where}: 'prefilter' must be one of hex, alnum26, underscore8, digit4")
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


# --------------------------------------------------------------------------- allowlist


@dataclass(frozen=True, slots=True)
class _Allow:
    literal: str | None
    regex: re.Pattern[str] | None

    def matches(self, value: str, norm: str) -> bool:
        if self.literal is not None:
            low = self.literal.lower()
            return value.lower() == low or norm.lower() == low
        assert self.regex is not None
        return bool(self.regex.fullmatch(value) or self.regex.fullmatch(norm))


def _compile_allow(entries: Iterable[str | re.Pattern[str]]) -> tuple[_Allow, ...]:
    out: list[_Allow] = []
    for e in entries:
        if isinstance(e, re.Pattern):
            out.append(_Allow(None, e))
        elif isinstance(e, str) and e.startswith("re:"):
            try:
                out.append(_Allow(None, re.compile(e[3:])))
            except re.error as err:
                raise CatalogError(f"allowlist entry {e!r}: bad regex: {err}") from None
        elif isinstance(e, str) and len(e) > 2 and e.startswith("/") and e.endswith("/"):
            try:
                out.append(_Allow(None, re.compile(e[1:-1])))
            except re.error as err:
                raise CatalogError(f"allowlist entry {e!r}: bad regex: {err}") from None
        elif isinstance(e, str):
            out.append(_Allow(e, None))
        else:
            raise CatalogError(f"allowlist entries must be strings or compiled regexes, got {type(e).__name__}")
    return tuple(out)


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Catalog:
    """An immutable, compiled set of detectors plus an allowlist.

    ``fingerprint`` identifies the configuration (used in extraction cache keys).
    Build with :meth:`load_default`, :meth:`from_yaml` or :meth:`build`.
    """

    rules: tuple[Rule, ...]
    allowlist: tuple[_Allow, ...] = ()
    fingerprint: str = ""
    #: Derived in ``__post_init__``: rules by id, and rules by descending priority.
    _by_id: dict[str, Rule] = field(init=False, repr=False, compare=False)
    _scan_order: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = [r.id for r in self.rules]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise CatalogError(f"duplicate rule id(s): {sorted(dup)}")
        if not self.fingerprint:
            h = hashlib.blake2b(digest_size=12)
            for r in self.rules:
                h.update(r.raw.encode())
                h.update(b"\x00")
            for a in self.allowlist:
                h.update(repr((a.literal, a.regex.pattern if a.regex else None)).encode())
            object.__setattr__(self, "fingerprint", h.hexdigest())
        object.__setattr__(self, "_by_id", {r.id: r for r in self.rules})
        object.__setattr__(self, "_scan_order", tuple(sorted(self.rules, key=lambda r: -r.priority)))

    # -- construction

    @classmethod
    def from_yaml(cls, text: str, name: str = "<rules>") -> Catalog:
        """Compile a rule file's text (a list of rules or ``{rules: [...]}``)."""
        return cls(tuple(compile_rule(r, name) for r in _load_yaml(text, name)))

    @classmethod
    def load_default(cls) -> Catalog:
        """The shipped detectors (``detectors.yaml``), compiled once and cached."""
        return _default_catalog()

    @classmethod
    def build(
        cls,
        extra_rules: Sequence[Mapping[str, Any]] = (),
        disabled: Iterable[str] = (),
        allowlist: Iterable[str | re.Pattern[str]] = (),
        *,
        base: Catalog | None = None,
        origin: str = "<policy>",
    ) -> Catalog:
        """A catalog derived from ``base`` (default: the shipped one).

        - ``extra_rules``: raw rule mappings (same schema as the YAML); a rule with the id
          of an existing one replaces it.
        - ``disabled``: rule ids or kinds to drop.
        - ``allowlist``: values never reported. A plain string matches a value or norm
          exactly (case-insensitive); ``"re:<regex>"`` or ``"/<regex>/"`` or a compiled
          pattern must fullmatch the value or the norm.
        """
        b = base or cls.load_default()
        compiled = [compile_rule(r, origin) for r in extra_rules]
        replaced = {r.id for r in compiled}
        off = set(disabled)
        rules = [r for r in b.rules if r.id not in replaced] + compiled
        rules = [r for r in rules if r.id not in off and r.kind not in off]
        return cls(tuple(rules), b.allowlist + _compile_allow(allowlist))

    # -- queries

    def rule(self, rule_id: str) -> Rule:
        """The rule with id ``rule_id`` (``KeyError`` if absent)."""
        return self._by_id[rule_id]

    def get(self, rule_id: str) -> Rule | None:
        return self._by_id.get(rule_id)

    @property
    def scan_order(self) -> tuple[Rule, ...]:
        """Rules by descending priority (the scanner's order)."""
        return self._scan_order

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(r.kind for r in self.rules)

    def is_allowed(self, value: str, norm: str) -> bool:
        """Whether the allowlist suppresses this value."""
        return any(a.matches(value, norm) for a in self.allowlist)

    def binding_of(self, rule_id: str) -> str:
        """The binding class of a rule's values (``handle`` for unknown rules)."""
        r = self._by_id.get(rule_id)
        return r.binding if r is not None else "handle"

    def kind_regenerable(self, kind: str) -> bool:
        """Default regenerability of ``kind`` (true only if every rule of it says so)."""
        rs = [r.regenerable for r in self.rules if r.kind == kind]
        return bool(rs) and all(rs)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Catalog) and other.fingerprint == self.fingerprint


#: One build of the shipped catalogue at a time: a thread warming it and the event loop
#: needing it meanwhile share one build instead of compiling the same 78 rules twice.
_DEFAULT_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _default_raw() -> tuple[Mapping[str, Any], ...]:
    text = resources.files(__package__).joinpath(DEFAULT_RULES_FILE).read_text(encoding="utf-8")
    return tuple(_load_yaml(text, DEFAULT_RULES_FILE))


@lru_cache(maxsize=1)
def _default_catalog_built() -> Catalog:
    return Catalog(tuple(compile_rule(r, DEFAULT_RULES_FILE) for r in _default_raw()))


def _default_catalog() -> Catalog:
    with _DEFAULT_LOCK:
        return _default_catalog_built()


def default_catalog_loaded() -> bool:
    """Whether the shipped catalogue is compiled already (a query, never a build)."""
    return _default_catalog_built.cache_info().currsize > 0


def default_rules_where(keep: Callable[[Mapping[str, Any]], bool]) -> tuple[Rule, ...]:
    """The shipped rules whose raw mapping ``keep`` accepts, compiled without compiling
    the others (the sensitive rules are a fifth of the table: what a log line's redaction
    needs while the whole catalogue is still being built). Equal to the same rules of
    :meth:`Catalog.load_default`."""
    return tuple(compile_rule(r, DEFAULT_RULES_FILE) for r in _default_raw() if keep(r))
