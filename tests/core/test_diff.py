"""The identifier diff and the verdict, on hand-made identifiers (no detectors involved)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from proxy.core import analysis as analysis_mod
from proxy.core.analysis import analyze
from proxy.core.dialects import from_openai_chat
from proxy.core.diff import SourceRef, VisibleText, diff_identifiers
from proxy.core.identifiers.model import SYSTEM_INDEX, Identifier, Source, fingerprint
from proxy.core.messages import Snapshot
from proxy.core.signals import Obligation, default_obligations

FULL = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4"


def ident(
    value: str,
    kind: str = "git_sha",
    *,
    index: int = 2,
    origin: str = "tool_result",
    regenerable: bool = False,
    sensitive: bool = False,
    norm: str | None = None,
    command: str | None = "git rev-parse HEAD",
    mutating: bool | None = True,
) -> Identifier:
    src = Source(index, "tool", origin, "bash", command, mutating, tool_call_id=f"c{index}")  # type: ignore[arg-type]
    n = norm if norm is not None else (fingerprint(value) if sensitive else value.lower())
    return Identifier(value, n, kind, f"{kind}-rule", sensitive, regenerable, src, 0, len(value), value)


def visible(text: str, *ids: Identifier) -> VisibleText:
    return VisibleText(text, ids)


# --------------------------------------------------------------------------- survival


def test_verbatim_value_survives() -> None:
    d = diff_identifiers([ident(FULL)], visible(f"HEAD was {FULL} before."))
    assert d.survived == 1 and not d.dropped and not d.altered


def test_hex_case_is_folded() -> None:
    d = diff_identifiers([ident(FULL)], visible(f"HEAD was {FULL.upper()}."))
    assert d.survived == 1


def test_norm_match_survives_even_when_written_differently() -> None:
    lost = ident("deployment.apps/api", "k8s_resource", norm="deployment/api")
    seen = ident("deploy/api", "k8s_resource", norm="deployment/api", index=7)
    assert diff_identifiers([lost], visible("rolled back deploy/api", seen)).survived == 1


def test_value_glued_inside_a_longer_token_does_not_survive() -> None:
    d = diff_identifiers([ident("9c1e5d2a7b3f", "alembic_revision")], visible("see x9c1e5d2a7b3fz"))
    assert [b.value for b in d.dropped] == ["9c1e5d2a7b3f"]


def test_short_sha_survives_as_prefix_of_a_visible_full_sha() -> None:
    d = diff_identifiers([ident(FULL[:7])], visible(f"reset target {FULL}"))
    assert d.survived == 1


def test_truncated_sha_is_altered_never_surviving() -> None:
    d = diff_identifiers([ident(FULL)], visible(f"reset target {FULL[:7]}"))
    assert d.survived == 0 and not d.dropped
    assert [(b.value, b.status, b.altered_to) for b in d.altered] == [(FULL, "altered", FULL[:7])]


def test_absolute_path_made_relative_is_altered() -> None:
    p = "/srv/shop/migrations/versions/9c1e5d2a7b3f_add_status.py"
    lost = ident(p, "path", norm=p)
    d = diff_identifiers([lost], visible("the file migrations/versions/9c1e5d2a7b3f_add_status.py was created"))
    assert d.survived == 0 and [b.status for b in d.altered] == ["altered"]


def test_dropped_value_is_listed_with_its_source() -> None:
    lost = ident("9c1e5d2a7b3f", "alembic_revision", index=4, command="alembic upgrade head")
    d = diff_identifiers([lost], visible("the migration was applied"))
    (b,) = d.dropped
    assert b.value == "9c1e5d2a7b3f" and b.kind == "alembic_revision" and not b.regenerable
    assert b.source.describe() == "tool result of bash `alembic upgrade head` at message 4"
    assert b.to_json()["where"] == b.source.describe()


def test_a_secret_in_the_producing_command_is_redacted_wherever_the_source_is_shown() -> None:
    key = "sk-live-" + "q7x2" * 8
    lost = ident(FULL, command=f"curl -H 'Authorization: Bearer {key}' https://api.example.com/deploy")
    (entry,) = diff_identifiers([lost], visible("nothing")).dropped
    shown = str(entry.to_json())
    assert key not in shown and key not in entry.source.describe()
    assert entry.source.command is not None and entry.source.command.startswith("curl -H")
    assert "https://api.example.com/deploy" in entry.source.command  # the rest of the command stays
    plain = ident(FULL, command="git rev-parse HEAD")
    assert SourceRef.of(plain.source).command == "git rev-parse HEAD"


def test_one_entry_per_norm_non_regenerable_if_any_occurrence_is() -> None:
    a = ident(FULL, index=2, regenerable=True, command="git log", mutating=False)
    b = ident(FULL.upper(), index=6, regenerable=False)
    d = diff_identifiers([a, b], visible("nothing"))
    assert len(d.dropped) == 1 and not d.dropped[0].regenerable and d.dropped[0].seen_at == (2, 6)
    assert d.considered == 1


def test_secrets_are_redacted_and_required_only_by_provenance() -> None:
    """A secret is never shown in clear; whether it is required is its provenance's
    decision like any value's (PRINCIPLES §4: a JWT a step minted is required)."""
    secret = ident("sk-live-abcdefghijklmnopqrstuvwxyz123456", "api_key", sensitive=True)
    d = diff_identifiers([secret], visible("no key here"))
    (b,) = d.dropped
    assert "abcdefghijklmnop" not in b.value and b.sensitive
    assert default_obligations([dataclasses.replace(secret, regenerable=True)], _snap([])) == ()
    (o,) = default_obligations([dataclasses.replace(secret, regenerable=False)], _snap([]))
    assert o.bindings == (secret.norm,) and "abcdefghijklmnop" not in secret.norm


def test_source_descriptions() -> None:
    assert SourceRef(SYSTEM_INDEX, "system", "system").describe() == "the system prompt"
    assert SourceRef(3, "user", "user").describe() == "user text at message 3"
    assert SourceRef(5, "tool", "tool_result", "kubectl").describe() == "tool result of kubectl at message 5"


# --------------------------------------------------------------------------- verdict


def _snap(texts: list[tuple[str, str]]) -> Snapshot:
    return from_openai_chat({"messages": [{"role": "system", "content": "sys"}] + [{"role": r, "content": t} for r, t in texts]})


HIST = [
    ("user", "apply the migration"),
    ("assistant", "running alembic upgrade head"),
    ("user", "Running upgrade 3f2a1b9c8d7e -> 9c1e5d2a7b3f, add status"),
    ("assistant", "done"),
    ("user", "now check the logs"),
]


def _ids_for(snap: Snapshot) -> list[Identifier]:
    out = []
    for i, m in enumerate(snap.messages):
        for v in ("3f2a1b9c8d7e", "9c1e5d2a7b3f"):
            if v in m.text:
                out.append(ident(v, "alembic_revision", index=i, command="alembic upgrade head"))
    return out


def _analyze(before: Snapshot, after: Snapshot, **kw):  # type: ignore[no-untyped-def]
    return analyze(before, after, before_identifiers=_ids_for(before), after_identifiers=_ids_for(after), **kw)


def test_destructive_when_a_required_binding_is_dropped() -> None:
    before = _snap(HIST)
    after = _snap([("user", "Summary: applied the migration to 9c1e5d2a7b3f."), HIST[4]])
    a = _analyze(before, after)
    assert a.verdict == "destructive" and a.transition.kind == "summarize"
    assert [b.value for b in a.required_missing] == ["3f2a1b9c8d7e"]
    assert a.signals.obligations.asymmetry and a.signals.next_action.dropped_kinds == {"alembic_revision"}
    assert a.signals.next_action.expected_by_kind == {"alembic_revision": ("3f2a1b9c8d7e",)}
    doc = a.to_json()
    assert doc["verdict"] == "destructive" and doc["transition"] == "summarize"
    assert {"value": "3f2a1b9c8d7e", "kind": "alembic_revision", "regenerable": False}.items() <= doc["dropped"][0].items()


def test_safe_when_the_summary_keeps_the_bindings() -> None:
    before = _snap(HIST)
    after = _snap([("user", "Summary: upgraded 3f2a1b9c8d7e -> 9c1e5d2a7b3f."), HIST[4]])
    a = _analyze(before, after)
    assert a.verdict == "safe" and not a.dropped and a.survived == 2
    assert not a.signals.obligations.asymmetry and a.signals.obligations.bindings_resolved_after == 1


def test_regenerable_drops_never_make_it_destructive() -> None:
    before = _snap(HIST)
    after = _snap([("user", "Summary: migration applied."), HIST[4]])
    ids = [ident(i.value, i.kind, index=i.source.message_index, regenerable=True, mutating=False) for i in _ids_for(before)]
    a = analyze(before, after, before_identifiers=ids, after_identifiers=[])
    assert a.verdict == "safe" and len(a.dropped) == 2 and not any(b.required for b in a.dropped)


def test_a_custom_obligation_rule_decides_what_is_required() -> None:
    before = _snap(HIST)
    after = _snap([("user", "Summary: migration applied."), HIST[4]])

    def nothing_required(identifiers, snap):  # type: ignore[no-untyped-def]
        return ()

    def only_new(identifiers, snap):  # type: ignore[no-untyped-def]
        return (Obligation("rollback", SourceRef(2, "user", "tool_result"), ("9c1e5d2a7b3f",)),)

    assert _analyze(before, after, obligation_rule=nothing_required).verdict == "safe"
    a = _analyze(before, after, obligation_rule=only_new)
    assert a.verdict == "destructive" and [b.value for b in a.required_missing] == ["9c1e5d2a7b3f"]


def test_reset_is_never_destructive() -> None:
    before = _snap(HIST)
    after = _snap([("user", "Write a haiku about autumn leaves.")])
    a = _analyze(before, after)
    assert a.transition.kind == "reset" and a.verdict == "safe" and not a.dropped


# --------------------------------------------------------------------------- hot path


def test_append_does_not_extract_nor_diff(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a, **_k):  # type: ignore[no-untyped-def]
        raise AssertionError("append must not extract identifiers")

    monkeypatch.setattr(analysis_mod, "_extract", boom)
    before = _snap(HIST)
    after = _snap(HIST + [("assistant", "checking")])
    a = analyze(before, after)
    assert a.verdict == "safe" and a.transition.kind == "append"


def test_append_on_a_long_history_is_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis_mod, "_extract", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError()))
    hist = [("user" if i % 2 else "assistant", f"message {i} " + "text " * 200) for i in range(2000)]
    before, after = _snap(hist), _snap(hist + [("user", "next")])
    analyze(before, after)  # warm
    t0 = time.perf_counter()
    for _ in range(20):
        analyze(before, after)
    per_call = (time.perf_counter() - t0) / 20
    assert per_call < 0.01, per_call
