"""Loading policies: YAML file or shipped preset → validated spec → compiled :class:`Policy`.

Stage 1 is :func:`proxy.yamlconf.load_file` (located raw tree); ``extends`` is resolved
on the raw trees (child keys override, mappings merge, lists replace); stage 2 is
:func:`proxy.yamlconf.build` into :class:`~.schema.PolicySpec`; :func:`compile_policy`
turns the spec into the frozen :class:`~.model.Policy`. Every problem is a
:class:`~proxy.yamlconf.ConfigError` whose lines read ``file:line: message``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import yamlconf
from ..yamlconf import ConfigError, LocatedMap
from .model import DetectorRule, Match, Obligation, Policy, Scope, ToolRegen, ToolRule
from .schema import MatchSpec, PolicySpec, ToolRuleSpec

#: Files in the presets folder that are not policies.
_NOT_POLICIES = frozenset({"agents"})
_MAX_EXTENDS = 8


def presets_dir() -> Path:
    import policies

    return Path(policies.__file__).resolve().parent


def markers_path(name: str) -> Path:
    """Where the marker preset a policy names lives: a shipped preset by name
    (``agents`` → ``policies/agents.yaml``) or a file path as given."""
    if "/" not in name and not name.endswith(".yaml"):
        return presets_dir() / f"{name}.yaml"
    return Path(name)


def preset_names() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.yaml") if p.stem not in _NOT_POLICIES)


def resolve_policy_path(name_or_path: str, *, relative_to: Path | None = None) -> Path:
    """A file path as given (relative to ``relative_to`` when set), else a preset name."""
    cand = Path(name_or_path).expanduser()
    if relative_to is not None and not cand.is_absolute():
        rel = relative_to / cand
        if rel.is_file():
            return rel
    if cand.is_file():
        return cand
    if "/" not in name_or_path and not name_or_path.endswith((".yaml", ".yml")):
        preset = presets_dir() / f"{name_or_path}.yaml"
        if preset.is_file() and name_or_path not in _NOT_POLICIES:
            return preset
        raise ConfigError.at(
            name_or_path, 0, f"no such policy preset (known: {', '.join(preset_names())}) and no such file"
        )
    raise ConfigError.at(name_or_path, 0, "file not found")


def _merge(parent: Any, child: Any) -> Any:
    if isinstance(parent, dict) and isinstance(child, dict):
        out = LocatedMap()
        out.source = getattr(child, "source", getattr(parent, "source", "<policy>"))
        out.line = getattr(child, "line", 0)
        for src in (parent, child):
            if isinstance(src, LocatedMap):
                out.key_lines.update(src.key_lines)
                out.value_lines.update(src.value_lines)
        for k, v in parent.items():
            out[k] = v
        for k, v in child.items():
            out[k] = _merge(parent[k], v) if k in parent else v
        return out
    return child


def _load_raw(path: Path, chain: tuple[Path, ...]) -> Any:
    raw = yamlconf.load_file(path)
    if not isinstance(raw, dict):
        raise ConfigError.at(str(path), getattr(raw, "line", 1), "a policy file must be a mapping")
    ext = raw.get("extends")
    if ext is None:
        return raw
    line = raw.line_of("extends") if isinstance(raw, LocatedMap) else 0
    if not isinstance(ext, str):
        raise ConfigError.at(str(path), line, "extends: expected a preset name or a file path")
    try:
        parent_path = resolve_policy_path(ext, relative_to=path.parent)
    except ConfigError as exc:
        raise ConfigError.at(str(path), line, f"extends: {exc.errors[0].message} ({ext!r})") from None
    resolved = parent_path.resolve()
    if resolved in chain or len(chain) >= _MAX_EXTENDS:
        raise ConfigError.at(str(path), line, f"extends: cycle or chain too long through {ext!r}")
    parent = _load_raw(parent_path, chain + (resolved,))
    merged = _merge(parent, raw)
    # keep the child's own fields (name, description) and drop the resolved link
    merged.pop("extends", None)
    return merged


def load_policy(name_or_path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> Policy:
    """Load a preset by name or a policy file. Raises :class:`ConfigError` (file:line)."""
    path = resolve_policy_path(os.fspath(name_or_path))
    raw = _load_raw(path, (path.resolve(),))
    spec = yamlconf.build(PolicySpec, raw, name="policy", source=str(path), environ=environ)
    source = f"preset:{path.stem}" if path.resolve().parent == presets_dir() else str(path)
    return compile_policy(spec, source=source, default_name=path.stem)


def load_policy_text(text: str, name: str = "<policy>", *, environ: Mapping[str, str] | None = None) -> Policy:
    """Compile policy YAML text (``extends`` resolves presets and paths relative to cwd)."""
    raw = yamlconf.load_text(text, name)
    ext = raw.get("extends") if isinstance(raw, dict) else None
    if isinstance(ext, str):
        try:
            parent_path = resolve_policy_path(ext)
        except ConfigError as exc:
            line = raw.line_of("extends") if isinstance(raw, LocatedMap) else 0
            raise ConfigError.at(name, line, f"extends: {exc.errors[0].message} ({ext!r})") from None
        raw = _merge(_load_raw(parent_path, (parent_path.resolve(),)), raw)
        raw.pop("extends", None)
    spec = yamlconf.build(PolicySpec, raw, name="policy", source=name, environ=environ)
    return compile_policy(spec, source=name, default_name=name)


# --------------------------------------------------------------------------- compile


def _tuple(v: str | tuple[str, ...]) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


def _match(m: MatchSpec) -> Match:
    return Match(
        models=_tuple(m.model),
        routes=_tuple(m.route),
        tenants=_tuple(m.tenant),
        headers=tuple((k.lower(), v) for k, v in m.header.items()),
    )


def _tool_rule(r: ToolRuleSpec) -> ToolRule:
    import re

    return ToolRule(tool=r.tool, command=r.command, result=re.compile(r.result) if r.result else None)


def compile_policy(spec: PolicySpec, *, source: str, default_name: str = "policy") -> Policy:
    """Pure: validated spec → frozen :class:`Policy` (regexes compiled once)."""
    import re

    return Policy(
        name=spec.name or default_name,
        source=source,
        description=spec.description,
        markers=spec.markers,
        on_error=spec.on_error,
        disabled=frozenset(spec.detectors.disable),
        allowlist=tuple(re.compile(p) for p in spec.detectors.allowlist),
        detector_rules=tuple(
            DetectorRule(
                id=r.id,
                kind=r.kind,
                pattern=re.compile(r.pattern),
                regenerable=r.regenerable,
                sensitive=r.sensitive,
                keywords=r.keywords,
                examples=r.examples,
                negative_examples=r.negative_examples,
            )
            for r in spec.detectors.rules
        ),
        regen_kinds=dict(spec.regenerability.kinds),
        regen_tools=tuple(
            ToolRegen(ToolRule(tool=t.tool, command=t.command), frozenset(t.kinds), t.regenerable)
            for t in spec.regenerability.tools
        ),
        obligation_default=spec.obligations.default,
        plan_tools=spec.obligations.plan_tools,
        obligations=tuple(
            Obligation(
                name=o.name,
                opened_by=_tool_rule(o.opened_by),
                binds=frozenset(o.binds),
                closed_by=_tool_rule(o.closed_by) if o.closed_by else None,
                description=o.description,
            )
            for o in spec.obligations.rules
        ),
        destructive=spec.actions.destructive,
        safe=spec.actions.safe,
        scopes=tuple(
            Scope(
                match=_match(s.match),
                name=s.name,
                destructive=s.destructive,
                safe=s.safe,
                tripwire=s.tripwire,
                gate=s.gate,
            )
            for s in spec.actions.scopes
        ),
        client_scopes=spec.actions.client_scopes,
        reinject_role=spec.reinject.role,
        reinject_budget_tokens=spec.reinject.budget_tokens,
        reinject_include_regenerable=spec.reinject.include_regenerable,
        priorities=dict(spec.reinject.priorities),
        default_priority=spec.reinject.default_priority,
        gate_enabled=spec.gate.enabled,
        gate_contract=spec.gate.contract,
        gate_append_missing=spec.gate.append_missing,
        gate_budget_tokens=spec.gate.budget_tokens,
        tripwire=spec.tripwire.action,
        tripwire_window=spec.tripwire.window,
        spill_ttl_seconds=spec.spill.ttl_seconds,
        spill_max_bytes=spec.spill.max_bytes,
        spill_list_bindings=spec.spill.list_bindings,
        recall_enabled=spec.recall.enabled,
        recall_tool_name=spec.recall.tool_name,
        recall_max_rounds=spec.recall.max_rounds,
        recall_budget_rounds=spec.recall.budget_rounds,
        recall_budget_bytes=spec.recall.budget_bytes,
        recall_max_result_bytes=spec.recall.max_result_bytes,
    )
