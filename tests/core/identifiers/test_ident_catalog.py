"""Every shipped detector's examples and negative examples, plus catalog building."""

from __future__ import annotations

import re

import pytest

from proxy.core.identifiers import Catalog, CatalogError, Source, extract_text
from proxy.core.identifiers.rules import Example, Rule

_CAT = Catalog.load_default()


def _source(ex: Example) -> Source:
    tool = ex.tool or ("bash" if ex.command else None)
    return Source(1, "tool", "tool_result", tool_name=tool, command=ex.command, mutating=False)


_POS = [pytest.param(r, ex, id=f"{r.id}[{i}]") for r in _CAT.rules for i, ex in enumerate(r.examples)]
_NEG = [pytest.param(r, ex, id=f"{r.id}[{i}]") for r in _CAT.rules for i, ex in enumerate(r.negative_examples)]


def test_every_rule_ships_examples() -> None:
    missing = [r.id for r in _CAT.rules if not r.examples]
    assert not missing, f"rules without examples: {missing}"


@pytest.mark.parametrize("rule,ex", _POS)
def test_example_is_found(rule: Rule, ex: Example) -> None:
    ids = extract_text(ex.text, _source(ex), _CAT, cache=None)
    got = [(i.kind, i.value) for i in ids]
    assert (rule.kind, ex.value) in got, f"{rule.id}: expected {ex.value!r} as {rule.kind}, got {got}"
    for i in ids:
        assert ex.text[i.start : i.end] == i.value


@pytest.mark.parametrize("rule,ex", _NEG)
def test_negative_example_is_not_found(rule: Rule, ex: Example) -> None:
    ids = extract_text(ex.text, _source(ex), _CAT, cache=None)
    bad = [(i.kind, i.value, i.detector) for i in ids if i.kind == rule.kind]
    assert not bad, f"{rule.id}: negative example yielded {bad}"


def test_kinds_required_by_the_issue_are_covered() -> None:
    required = {
        "git_sha", "uuid", "ulid", "oci_digest", "oci_image", "aws_arn", "aws_resource_id", "s3_uri",
        "url", "path", "k8s_resource", "alembic_revision", "flyway_version", "django_migration",
        "terraform_address", "postgres_lsn", "mysql_gtid", "kafka_offset", "upload_id",
        "transaction_id", "lock_token", "session_id", "stripe_id", "opaque_token", "api_key", "jwt",
        "private_key", "aws_access_key",
    }
    assert required <= _CAT.kinds


def test_secret_rules_are_sensitive() -> None:
    for r in _CAT.rules:
        if r.kind in {"api_key", "jwt", "private_key", "aws_access_key", "aws_secret_key", "github_token", "slack_token", "secret"}:
            assert r.sensitive, r.id


# --------------------------------------------------------------------------- building


def test_build_adds_a_user_rule_and_runs_it() -> None:
    cat = Catalog.build(
        [{"id": "ticket", "kind": "ticket_id", "pattern": r"\bTCK-\d{4,}\b", "examples": ["TCK-12345"]}]
    )
    ids = extract_text("see TCK-98765 for details", Source(0, "user", "user"), cat, cache=None)
    assert [(i.kind, i.value) for i in ids] == [("ticket_id", "TCK-98765")]
    assert cat.fingerprint != _CAT.fingerprint


def test_build_replaces_a_rule_with_the_same_id() -> None:
    cat = Catalog.build([{"id": "uuid", "kind": "uuid", "pattern": r"NEVER-MATCHES-\d"}])
    assert not [i for i in extract_text("a989aba5-6cbc-478c-8fc5-f6e6c01f99f5", Source(0, "user", "user"), cat, cache=None) if i.kind == "uuid"]


def test_build_disables_by_rule_id_and_by_kind() -> None:
    text = "commit 4ab09790de1eec4f5973f19c2dc3d58654165a62 at /srv/app/main.py"
    src = Source(0, "user", "user")
    by_id = Catalog.build(disabled={"git-sha-full"})
    assert {i.kind for i in extract_text(text, src, by_id, cache=None)} == {"path"}
    by_kind = Catalog.build(disabled={"path"})
    assert {i.kind for i in extract_text(text, src, by_kind, cache=None)} == {"git_sha"}


@pytest.mark.parametrize(
    "entry",
    ["4ab09790de1eec4f5973f19c2dc3d58654165a62", "4AB09790DE1EEC4F5973F19C2DC3D58654165A62", "re:4ab0.*", "/^4ab0[0-9a-f]+$/", re.compile("4ab0.*")],
)
def test_allowlist_literal_and_regex(entry: str | re.Pattern[str]) -> None:
    cat = Catalog.build(allowlist=[entry])
    ids = extract_text("commit 4ab09790de1eec4f5973f19c2dc3d58654165a62", Source(0, "user", "user"), cat, cache=None)
    assert not ids


@pytest.mark.parametrize(
    "rule,message",
    [
        ({"id": "x", "kind": "x", "pattern": "a", "patern": "b"}, "unknown key"),
        ({"id": "x", "kind": "x", "pattern": "(unclosed"}, "bad pattern"),
        ({"id": "x", "kind": "x", "pattern": "a", "validators": ["nope"]}, "unknown validator"),
        ({"id": "x", "kind": "x", "pattern": "a", "skip_filters": ["nope"]}, "unknown filter"),
        ({"id": "x", "kind": "Bad Kind", "pattern": "a"}, "snake_case"),
        ({"kind": "x", "pattern": "a"}, "needs a non-empty string 'id'"),
        ({"id": "x", "kind": "x", "pattern": "(?P<a>a)", "norm": "{b}"}, "unknown group"),
        ({"id": "x", "kind": "x", "pattern": "a", "context": {"required": ["a"], "scop": "text"}}, "unknown context key"),
    ],
)
def test_invalid_rules_are_rejected(rule: dict[str, object], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        Catalog.build([rule])


def test_yaml_errors_name_file_and_line() -> None:
    text = "rules:\n  - id: ok\n    kind: k\n    pattern: 'a'\n  - id: bad\n    kind: k\n    pattern: 'b'\n    priorty: 3\n"
    with pytest.raises(CatalogError, match=r"mine\.yaml:5: rule 'bad': unknown key"):
        Catalog.from_yaml(text, "mine.yaml")


def test_duplicate_keys_are_errors() -> None:
    with pytest.raises(CatalogError, match=r"f\.yaml:3: duplicate key"):
        Catalog.from_yaml("- id: a\n  kind: k\n  kind: j\n  pattern: x\n", "f.yaml")


def test_catalog_is_immutable_and_hashable() -> None:
    with pytest.raises(Exception):  # noqa: B017 - whatever a frozen dataclass raises
        _CAT.rules = ()  # type: ignore[misc]
    assert hash(_CAT) == hash(Catalog.load_default())
    assert Catalog.load_default() is _CAT
