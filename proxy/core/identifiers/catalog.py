"""Declarative detector catalog: raw YAML rules → validated, compiled, frozen :class:`Catalog`.

What a rule is and the YAML schema it is written in: :mod:`.rules`; compiling one rule:
:mod:`.compiler`. This module loads rule files (YAML, each mapping's line recorded so that
errors name the file and line), compiles the allowlist, and holds the :class:`Catalog`
and the shipped defaults. The :class:`Catalog` is immutable and can be shared across
threads. :meth:`Catalog.build` layers user rules, disabled rules/kinds and an allowlist
on top of the shipped defaults (the policy layer calls it).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from .compiler import compile_rule
from .rules import CatalogError, Rule

__all__ = ["DEFAULT_RULES_FILE", "Catalog"]

DEFAULT_RULES_FILE = "detectors.yaml"


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
