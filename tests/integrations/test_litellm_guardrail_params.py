"""The guardrail's parameters become the gate's configuration (no LiteLLM process)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the guardrail needs litellm[proxy] (the test extras)")

from proxy.integrations import litellm_guardrail as lg
from proxy.yamlconf import ConfigError


def test_policy_and_state_come_from_the_parameters(tmp_path: Path) -> None:
    g = lg.CompactionGateGuardrail(
        guardrail_name="gate", event_hook=["pre_call", "post_call"], default_on=True,
        policy="strict", state_backend="sqlite", state_path=str(tmp_path / "s.sqlite3"), admin_key="k",
    )
    assert g.gate_config.policy == "strict" and g.gate.policies.policy.name == "strict"
    assert g.gate_config.state.backend == "sqlite" and g.gate_config.state.file == tmp_path / "s.sqlite3"
    assert g.gate_config.gate.admin_key == "k"
    assert g.settings.api_port is None


def test_a_config_file_supplies_what_the_parameters_do_not(tmp_path: Path) -> None:
    cfg = tmp_path / "gate.yaml"
    cfg.write_text("policy: audit\nstate:\n  backend: memory\n")
    g = lg.CompactionGateGuardrail(config=str(cfg), api_port="0")
    assert g.gate_config.policy == "audit" and g.gate_config.state.backend == "memory"
    assert g.settings.api_port == 0


def test_bad_parameters_stop_the_proxy_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state_backend"):
        lg.CompactionGateGuardrail(state_backend="redis")
    bad = tmp_path / "p.yaml"
    bad.write_text("extends: default\nnot_a_key: 1\n")
    with pytest.raises(ConfigError):
        lg.CompactionGateGuardrail(policy=str(bad))


def test_the_callbacks_instance_is_configured_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPACTION_GATE_CONFIG", raising=False)
    monkeypatch.setenv("COMPACTION_GATE_POLICY", "audit")
    monkeypatch.delitem(lg.__dict__, "compaction_gate", raising=False)
    inst = lg.compaction_gate
    assert isinstance(inst, lg.CompactionGateGuardrail) and inst.gate_config.policy == "audit"
    assert lg.compaction_gate is inst  # built once
