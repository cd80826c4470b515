"""The generic two-stage YAML loader (also used by policies)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from proxy import yamlconf
from proxy.yamlconf import ConfigError, Invalid, LocatedList, LocatedMap, meta


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: str = field(metadata=meta(expand_env=False))
    kinds: tuple[str, ...] = ()
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.pattern:
            raise Invalid("pattern must not be empty", key="pattern")


@dataclass(frozen=True)
class Doc:
    name: str
    mode: Literal["warn", "reject"] = "warn"
    limit: int | None = None
    rules: tuple[Rule, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    anything: Any = None
    one_or_many: str | tuple[str, ...] = ()
    class_: str = field(default="x", metadata=meta(key="class"))


TEXT = """\
name: ${NAME:-demo}
mode: reject
limit: 3
rules:
  - id: r1
    pattern: '^\\$\\{x\\}$'
    kinds: [a, b]
  - id: r2
    pattern: b
    weight: 2
labels:
  team: ${TEAM}
anything: {free: [form]}
one_or_many: single
class: c
"""


def test_load_records_lines() -> None:
    raw = yamlconf.load_text(TEXT, "doc.yaml")
    assert isinstance(raw, LocatedMap) and raw.source == "doc.yaml" and raw.line == 1
    assert raw.line_of("rules") == 4 and raw.value_line_of("rules") == 5
    rules = raw["rules"]
    assert isinstance(rules, LocatedList) and rules.item_lines == [5, 8]
    assert rules[1].line_of("weight") == 10
    assert raw.line_of("missing") == 1


def test_build_full_document() -> None:
    doc = yamlconf.build(Doc, yamlconf.load_text(TEXT, "doc.yaml"), environ={"TEAM": "ops"})
    assert doc.name == "demo" and doc.mode == "reject" and doc.limit == 3
    assert doc.rules[0] == Rule("r1", r"^\$\{x\}$", ("a", "b"))  # not env-expanded
    assert doc.rules[1].weight == 2.0 and isinstance(doc.rules[1].weight, float)
    assert dict(doc.labels) == {"team": "ops"}
    assert doc.anything == {"free": ["form"]}
    assert doc.one_or_many == "single" and doc.class_ == "c"
    with pytest.raises(TypeError):
        doc.labels["x"] = "y"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.name = "z"  # type: ignore[misc]


def test_union_with_tuple() -> None:
    doc = yamlconf.build(Doc, yamlconf.load_text("name: n\none_or_many: [a, b]\n"))
    assert doc.one_or_many == ("a", "b")


def test_errors_collected_with_lines() -> None:
    text = "name: 1\nmode: sometimes\nrules:\n  - id: r\n    pattern: ''\n  - {id: q}\nbogus: 1\n"
    with pytest.raises(ConfigError) as info:
        yamlconf.build(Doc, yamlconf.load_text(text, "p.yaml"), name="policy")
    lines = str(info.value).splitlines()
    assert lines == [
        (
            "p.yaml:7: unknown key 'bogus' in policy (expected one of: name, mode, limit, rules, labels, "
            "anything, one_or_many, class)"
        ),
        "p.yaml:1: name: expected string, got integer",
        "p.yaml:2: mode: invalid value 'sometimes' (expected one of: warn, reject)",
        "p.yaml:5: rules[0]: pattern must not be empty",
        "p.yaml:6: missing required key 'pattern' in rules[1]",
    ]
    assert (info.value.file, info.value.line) == ("p.yaml", 7)


def test_bool_is_not_int_and_int_is_float() -> None:
    with pytest.raises(ConfigError, match="limit: expected integer, got boolean"):
        yamlconf.build(Doc, yamlconf.load_text("name: n\nlimit: true\n"))


def test_env_values_never_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        yamlconf.build(
            Doc, yamlconf.load_text("name: n\nlimit: ${LIMIT}\n"), environ={"LIMIT": "s3cret"}
        )
    assert "s3cret" not in str(info.value) and "${LIMIT}" in str(info.value)


def test_expand_env() -> None:
    env = {"A": "1"}
    assert yamlconf.expand_env("x${A}y${B:-2}z$", env) == "x1y2z$"
    with pytest.raises(KeyError):
        yamlconf.expand_env("${MISSING}", env)


def test_load_file_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "e.yaml"
    path.write_text("")
    raw = yamlconf.load_file(path)
    assert raw == {} and isinstance(raw, LocatedMap)
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"e.yaml:1: config: expected a mapping, got list"):
        yamlconf.build(Doc, yamlconf.load_file(path))


def test_non_scalar_key() -> None:
    with pytest.raises(ConfigError, match=r"x\.yaml:1: mapping keys must be scalars"):
        yamlconf.load_text("? [a]\n: 1\n", "x.yaml")
