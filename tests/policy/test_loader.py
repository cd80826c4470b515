from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from proxy.policy import ConfigError, RequestContext, load_policy, load_policy_text, preset_names
from proxy.policy.model import PROTECTION_ORDER


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip())
    return p


def test_presets_ship_and_load() -> None:
    assert {"default", "strict", "audit", "infra"} <= set(preset_names())
    assert "agents" not in preset_names()
    d, s, a, i = (load_policy(n) for n in ("default", "strict", "audit", "infra"))
    assert (d.destructive, s.destructive, a.destructive, i.destructive) == ("reinject", "reject", "warn", "reinject")
    assert a.tripwire == "warn" and not a.gate_contract and not a.gate_append_missing
    assert i.reinject_budget_tokens > d.reinject_budget_tokens
    assert {o.name for o in i.obligations} >= {"migration-rollback", "multipart-upload", "k8s-rollout"}
    assert i.regenerable("oci_digest", True) is False
    assert d.source == "preset:default"


def test_unknown_key_bad_value_and_bad_regex_name_file_and_line(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "p.yaml",
        """
        version: 1
        actions:
          destructive: rejekt
        reinject:
          budget: 3
        detectors:
          rules:
            - id: t
              kind: ticket
              pattern: 'T-\\d+'
              examples: ["nothing here"]
        """,
    )
    with pytest.raises(ConfigError) as ei:
        load_policy(p)
    msg = str(ei.value)
    assert f"{p}:3: actions.destructive: invalid value 'rejekt'" in msg
    assert f"{p}:5: unknown key 'budget' in reinject" in msg
    assert f"{p}:11: detectors.rules[0]: example 'nothing here' does not match the pattern" in msg


def test_bad_regex_names_its_line(tmp_path: Path) -> None:
    p = write(tmp_path, "p.yaml", "detectors:\n  disable: [url]\n  allowlist: ['(unclosed']\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(p)
    assert str(ei.value).startswith(f"{p}:3: detectors: invalid regular expression '(unclosed'")


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    p = write(tmp_path, "p.yaml", "version: 1\nactions: [\n")
    with pytest.raises(ConfigError) as ei:
        load_policy(p)
    assert ei.value.file == str(p) and ei.value.line >= 2


def test_unknown_preset_and_missing_file() -> None:
    with pytest.raises(ConfigError, match="no such policy preset"):
        load_policy("nope")
    with pytest.raises(ConfigError, match="file not found"):
        load_policy("/nonexistent/p.yaml")


def test_extends_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "mine.yaml",
        """
        extends: default
        name: mine
        reinject:
          budget_tokens: 300
          priorities: {ticket: 500}
        """,
    )
    pol = load_policy(p)
    assert pol.name == "mine" and pol.reinject_budget_tokens == 300
    assert pol.priorities["ticket"] == 500 and pol.priorities["alembic_revision"] == 100
    assert pol.destructive == "reinject"


def test_extends_relative_file_and_cycle(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "extends: strict\nname: base\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\n")
    assert load_policy(child).destructive == "reject"
    a = write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_policy(a)


def test_env_expansion_in_scopes(tmp_path: Path) -> None:
    pol = load_policy_text(
        "actions:\n  scopes:\n    - match: {tenant: '${TEAM_TENANT}'}\n      destructive: reject\n",
        environ={"TEAM_TENANT": "abc123"},
    )
    assert pol.effective(RequestContext(tenant="abc123")).destructive == "reject"
    assert pol.effective(RequestContext(tenant="zzz")).destructive == "reinject"


def test_scopes_by_model_route_tenant_header() -> None:
    pol = load_policy_text(
        """
actions:
  destructive: reinject
  scopes:
    - name: claude strict on responses-free routes
      match: {model: "claude-*", route: "/v1/messages"}
      destructive: reject
    - name: audit header
      match: {header: {X-Gate-Mode: audit}}
      destructive: warn
      tripwire: warn
    - name: tenant spill
      match: {tenant: [t1, t2]}
      destructive: spill
      gate: false
""",
        "inline.yaml",
    )
    ctx = RequestContext
    assert pol.effective(ctx(model="claude-sonnet-4-5", route="/v1/messages")).destructive == "reject"
    assert pol.effective(ctx(model="claude-sonnet-4-5", route="/v1/chat/completions")).destructive == "reinject"
    # a header scope cannot weaken protection unless the operator allows it
    e = pol.effective(ctx(model="gpt-4o", headers={"x-gate-mode": "AUDIT"}))
    assert (e.destructive, e.tripwire) == ("reinject", "block")
    assert "audit header" in e.scopes
    trusting = load_policy_text(
        "actions:\n  client_scopes: any\n  scopes:\n    - match: {header: {X-Gate-Mode: audit}}\n"
        "      destructive: warn\n      tripwire: warn\n",
        "trusting.yaml",
    )
    e = trusting.effective(ctx(model="gpt-4o", headers={"x-gate-mode": "AUDIT"}))
    assert (e.destructive, e.tripwire) == ("warn", "warn")
    e = pol.effective(ctx(tenant="t2"))
    assert e.destructive == "spill" and e.gate is False
    # first matching scope wins per field, later ones fill the rest
    e = pol.effective(ctx(model="claude-x", route="/v1/messages", tenant="t1"))
    assert (e.destructive, e.gate) == ("reject", False)


def test_regenerability_rules_and_priorities() -> None:
    pol = load_policy("default")
    assert pol.regenerable("git_sha", False, tool="bash", command="git log --oneline") is True
    assert pol.regenerable("git_sha", False, tool="bash", command="git rev-parse HEAD") is False
    # paths follow their provenance (a stamped backup path a step minted is required)
    assert pol.regenerable("path", False) is False and pol.regenerable("path", True) is True
    assert pol.priority("alembic_revision", False) > pol.priority("alembic_revision", True)
    assert pol.priority("alembic_revision", False) > pol.priority("uuid", False)
    assert pol.allowlisted("0000000") and not pol.allowlisted("3f9a1c2b7d4e")


def test_policy_is_frozen() -> None:
    pol = load_policy("default")
    with pytest.raises(AttributeError):
        pol.destructive = "allow"  # type: ignore[misc]


@pytest.mark.parametrize("preset", ["default", "strict", "infra"])
@pytest.mark.parametrize("mode", ["audit", "off", "allow", "warn", "none", "*"])
def test_a_client_header_cannot_weaken_a_preset(preset: str, mode: str) -> None:
    pol = load_policy(preset)
    plain = pol.effective(RequestContext(model="gpt-4o", route="/v1/chat/completions"))
    for headers in (
        {"x-compaction-gate-policy": mode},
        {"x-compaction-gate-policy": mode, "x-environment": "dev"},
    ):
        e = pol.effective(RequestContext(model="gpt-4o", route="/v1/chat/completions", headers=headers))
        assert PROTECTION_ORDER["destructive"][e.destructive] >= PROTECTION_ORDER["destructive"][plain.destructive]
        assert PROTECTION_ORDER["tripwire"][e.tripwire] >= PROTECTION_ORDER["tripwire"][plain.tripwire]
        assert PROTECTION_ORDER["safe"][e.safe] >= PROTECTION_ORDER["safe"][plain.safe]
        assert e.gate >= plain.gate


def test_a_client_header_can_make_default_stricter() -> None:
    pol = load_policy("default")
    e = pol.effective(RequestContext(headers={"x-compaction-gate-policy": "strict"}))
    assert e.destructive == "reject"
    assert pol.effective(RequestContext(headers={"x-compaction-gate-policy": "audit"})).destructive == "reinject"


def test_client_scopes_is_validated_with_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"bad\.yaml:3"):
        load_policy_text("actions:\n  destructive: warn\n  client_scopes: sometimes\n", "bad.yaml")
