"""Normalisation (diff identity) and relations between values."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.core.identifiers import (
    find_altered_in_text,
    is_alias,
    is_altered,
    is_prefix_alias,
    normalize,
    relation,
)
from proxy.core.identifiers.normalize import edit_distance, trim_value

SHA = "4ab09790de1eec4f5973f19c2dc3d58654165a62"


@pytest.mark.parametrize(
    "value,kind,norm",
    [
        (SHA.upper(), "git_sha", SHA),
        ("A989ABA5-6CBC-478C-8FC5-F6E6C01F99F5", "uuid", "a989aba5-6cbc-478c-8fc5-f6e6c01f99f5"),
        ("sha256:0C254FD8", "oci_digest", "sha256:0c254fd8"),
        ("D1BF7246CF12", "alembic_revision", "d1bf7246cf12"),
        ("16/B374D848", "postgres_lsn", "16/b374d848"),
        ("01hxr3k9zq7m2w8v5t4n6p1bcd", "ulid", "01HXR3K9ZQ7M2W8V5T4N6P1BCD"),
        ("/srv/app/", "path", "/srv/app"),
        ("/srv//app/./x.py", "path", "/srv/app/x.py"),
        ("./src/app.py", "path", "src/app.py"),
        ("src/app.py", "path", "src/app.py"),
        ("/", "path", "/"),
        ("HTTPS://GitHub.com/Acme/Web", "url", "https://github.com/Acme/Web"),
        ("https://api.acme.io/", "url", "https://api.acme.io"),
        ("S3://acme-media/uploads/", "s3_uri", "s3://acme-media/uploads"),
        ("deploy/web", "k8s_resource", "deployment/web"),
        ("deployment.apps/Web", "k8s_resource", "deployment/web"),
        ("svc/api", "k8s_resource", "service/api"),
        ("blog.0007_add_field", "django_migration", "0007_add_field"),
        ("V2_1__add_users", "flyway_version", "2.1"),
        ("V7__add_orders_index.sql", "flyway_version", "7"),
        ("2.1", "flyway_version", "2.1"),
        ("GHCR.io/Acme/web:V1", "oci_image", "ghcr.io/acme/web:V1"),
        ("re_3PvDUjnz7ZsIt6EA0wmPSSZk", "stripe_id", "re_3PvDUjnz7ZsIt6EA0wmPSSZk"),
        ("aws_instance.web", "terraform_address", "aws_instance.web"),
    ],
)
def test_normalize(value: str, kind: str, norm: str) -> None:
    assert normalize(value, kind) == norm
    assert normalize(norm, kind) == norm  # idempotent


def test_paths_keep_absolute_and_relative_distinct() -> None:
    assert normalize("/src/app.py", "path") != normalize("src/app.py", "path")


def test_sensitive_values_become_fingerprints() -> None:
    n = normalize("sk-proj-abc123abc123abc123abc", "api_key", sensitive=True)
    assert n.startswith("secret:") and "abc123" not in n
    assert normalize(n, "api_key", sensitive=True) == n


@given(st.text(max_size=60), st.sampled_from(["git_sha", "uuid", "path", "url", "s3_uri", "k8s_resource", "django_migration", "flyway_version", "oci_image", "kafka_offset", "upload_id", "ulid"]))
@example(".\r0", "django_migration")  # whitespace exposed by the rule (found by hypothesis)
@example("\x1b\x850", "url")  # NEL exposed once a control character is dropped
@settings(max_examples=150, deadline=None)
def test_normalize_is_idempotent_and_total(value: str, kind: str) -> None:
    n = normalize(value, kind)
    assert normalize(n, kind) == n


@pytest.mark.parametrize(
    "value,trimmed",
    [("abc.", "abc"), ("abc),", "abc"), ("f(x)", "f(x)"), ('"quoted"', "quoted"), ("a[0]", "a[0]"), ("end;", "end"), ("x'", "x")],
)
def test_trim_value(value: str, trimmed: str) -> None:
    v, s, e = trim_value(value, 10, 10 + len(value))
    assert v == trimmed
    assert e - s == len(v)


# --------------------------------------------------------------------------- relations


@pytest.mark.parametrize(
    "a,b,kind,rel",
    [
        (SHA, SHA, "git_sha", "same"),
        (SHA, SHA[:7], "git_sha", "alias"),
        (SHA[:7], SHA, "git_sha", "alias"),
        (SHA, SHA[:12], "git_sha", "alias"),
        (SHA, SHA[:5], "git_sha", "altered"),  # too short to be a prefix alias
        (SHA, SHA[:8] + "…", "git_sha", "altered"),
        (SHA, "4ab0979" + "f", "git_sha", "altered"),  # truncated and damaged
        (SHA, "deadbee", "git_sha", None),
        ("sha256:0c254fd85e02e47b5800ea8e8146bd32547f739a856ef283a485bf996162792e", "sha256:0c254fd85e02", "oci_digest", "alias"),
        ("/srv/app/main.py", "app/main.py", "path", "altered"),  # absolute made relative
        ("/srv/app/main.py", "/srv/app/other.py", "path", None),
        ("app/main.py", "/srv/app/main.py", "path", "alias"),  # survived, more specific
        ("a989aba5-6cbc-478c-8fc5-f6e6c01f99f5", "a989aba5-6cbc-478c-8fc5-000000000000", "uuid", "altered"),
        ("a989aba5-6cbc-478c-8fc5-f6e6c01f99f5", "1ef72833-ad03-4af8-9866-fc5d366e6d54", "uuid", None),
        ("orders:3@1234", "orders:3@1200", "kafka_offset", "altered"),
        ("orders:3@1234", "payments:3@1234", "kafka_offset", None),
        ("0006_previous", "0006", "django_migration", "alias"),
        ("d1bf7246cf12", "d1bf7246cf13", "alembic_revision", "altered"),  # one-character typo
        ("re_3PvDUjnz7ZsIt6EA0wmPSSZk", "re_3PvDUjnz7ZsIt6EA0wmPSSZ", "stripe_id", "altered"),  # truncated
        ("re_3PvDUjnz7ZsIt6EA0wmPSSZk", "re_1Nispe2eZvKYlo2Cd31jOCgZ", "stripe_id", None),
    ],
)
def test_relation(a: str, b: str, kind: str, rel: str | None) -> None:
    assert relation(a, b, kind) == rel


def test_prefix_alias_requires_seven_characters() -> None:
    assert is_prefix_alias(SHA, SHA[:7], "git_sha")
    assert not is_prefix_alias(SHA, SHA[:6], "git_sha")
    assert not is_prefix_alias(SHA, SHA, "git_sha")
    assert not is_prefix_alias("/srv/app", "/srv", "path")


def test_alias_and_altered_are_exclusive() -> None:
    for b in (SHA[:7], SHA[:5], "x" + SHA[1:]):
        assert not (is_alias(SHA, b, "git_sha") and is_altered(SHA, b, "git_sha"))


@pytest.mark.parametrize(
    "norm,kind,text,fragment",
    [
        (SHA, "git_sha", "we reset to 4ab09 earlier", "4ab09"),
        (SHA, "git_sha", "we reset to 4ab097… earlier", "4ab097…"),
        (SHA, "git_sha", "nothing relevant here", None),
        ("/srv/app/config/settings.py", "path", "edited config/settings.py today", "config/settings.py"),
        ("/srv/app/config/settings.py", "path", "edited settings.py today", "settings.py"),
        ("/srv/app/config/settings.py", "path", "nothing", None),
    ],
)
def test_find_altered_in_text(norm: str, kind: str, text: str, fragment: str | None) -> None:
    assert find_altered_in_text(norm, kind, text) == fragment


def test_edit_distance_is_bounded() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("a" * 50, "b" * 50, limit=3) == 4
