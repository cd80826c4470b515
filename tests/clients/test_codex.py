"""Codex CLI (the real binary) through compaction-gate to a scripted model.

Each test plays one migration story in a fresh Codex thread: turn 1 applies the migration
(Codex runs ``alembic upgrade head``; the output mints ``1a2b3c4d5e6f -> 4f9a2c1e7b3d``);
turn 2 (``codex exec resume``) asks for a rollback — Codex compacts first (a small
``model_auto_compact_token_limit``), and its summary drops the revision. The final
action is the ``alembic downgrade`` Codex actually ran.

Transports: ``http`` — a custom provider, streamed ``POST /v1/responses``, local
compaction; ``ws`` — the built-in provider (``openai_base_url``), the Responses WebSocket,
remote (encrypted) compaction; ``ws-local`` — a custom provider with
``supports_websockets``, the WebSocket with local compaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.codex_support import (
    APPLY,
    INVENTED,
    REV_BEFORE,
    ROLLBACK,
    CodexSession,
    codex_binary,
    codex_model,
    codex_recalling,
    wire_summary,
)
from tests.clients.story import RECALL_TOOL
from tests.e2e.stack import GateStack

TRANSPORTS = ["http", "ws", "ws-local"]


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Iterator[GateStack]:
    codex_binary()  # skip before starting anything when the binary is absent
    s = GateStack(request.param, codex_model)
    yield s
    s.close()


def _session(stack: GateStack, tmp_path: Path, transport: str) -> CodexSession:
    return CodexSession(tmp_path, stack.openai_base_url, transport, codex_binary())


def _kinds(stack: GateStack) -> list[tuple[str, str]]:
    return [(e["kind"], e["action"]) for e in stack.events()]


def _context(stack: GateStack, *runs: Any) -> str:
    """What to show when an assertion fails: the wire, the gate's events, Codex's errors."""
    lines = [f"wire: {w}" for w in wire_summary(stack.fake.requests)]
    lines += [f"event: {e['kind']} {e['action']} {e.get('message')}" for e in stack.events()]
    for r in runs:
        lines += [f"codex error: {m[:300]}" for m in r.errors()]
    return "\n".join(lines)


def _play(stack: GateStack, tmp_path: Path, transport: str) -> tuple[CodexSession, Any, Any]:
    codex = _session(stack, tmp_path, transport)
    first = codex.run(APPLY)
    assert first.returncode == 0 and not first.failed(), _context(stack, first)
    assert codex.alembic() == ["upgrade head"]  # the binding was minted by a command Codex ran
    second = codex.run(ROLLBACK, resume=True)
    return codex, first, second


def _compacted(stack: GateStack, transport: str) -> None:
    wire = wire_summary(stack.fake.requests)
    if transport == "ws":
        assert any(w["last"] == "compaction_trigger" for w in wire), "no remote compaction"
    else:
        assert any(w["request_kind"] == "compaction" and w["tools"] == 0 for w in wire), "no local compaction"
    if transport != "http":
        assert {w["via"] for w in wire} == {"WS"}


@pytest.mark.parametrize("gate", ["default"], indirect=True)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_default_the_rollback_uses_the_original_revision(gate: GateStack, tmp_path: Path, transport: str) -> None:
    codex, _, second = _play(gate, tmp_path, transport)
    ctx = _context(gate, second)
    _compacted(gate, transport)
    assert second.returncode == 0 and not second.failed(), ctx
    assert codex.alembic() == ["upgrade head", f"downgrade {REV_BEFORE}"], ctx
    kinds = _kinds(gate)
    assert ("summarization", "gate") in kinds, ctx
    if transport == "ws":
        # an encrypted summary: contracted, then the bindings re-stated in plain text
        assert ("compaction", "reinject") in kinds, ctx
        # the encrypted compaction item is the summary: a summarize transition, not a fork
        comp = [e for e in gate.events() if e["kind"] == "compaction"]
        assert comp and {e["transition"] for e in comp} == {"summarize"}, ctx
    else:
        # a local summary: checked at the summarization call and completed there
        assert ("summary_check", "gate") in kinds, ctx
    assert not any(k == "tripwire" for k, _ in kinds), ctx


@pytest.mark.parametrize("gate", ["audit"], indirect=True)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_audit_records_the_destructive_compaction_and_the_invented_value(
    gate: GateStack, tmp_path: Path, transport: str
) -> None:
    codex, _, second = _play(gate, tmp_path, transport)
    ctx = _context(gate, second)
    _compacted(gate, transport)
    assert second.returncode == 0, ctx
    assert codex.alembic() == ["upgrade head", f"downgrade {INVENTED}"], ctx  # audit changes nothing
    events = gate.events()
    destructive = [e for e in events if e["kind"] == "compaction" and e.get("verdict") == "destructive"]
    assert destructive and destructive[0]["action"] == "warn", ctx
    assert REV_BEFORE in destructive[0]["required"], ctx
    trip = [e for e in events if e["kind"] == "tripwire"]
    assert trip and trip[0]["tripwire"] == "warn", ctx
    assert [h["value"] for h in trip[0]["hallucinated"]] == [INVENTED], ctx
    assert REV_BEFORE in trip[0]["hallucinated"][0]["expected"], ctx


@pytest.mark.parametrize("gate", ["strict"], indirect=True)
def test_strict_remote_compaction_is_refused_once_then_a_recompaction_proceeds(gate: GateStack, tmp_path: Path) -> None:
    """The built-in provider compacts server-side: the gate cannot see the summary, so
    `strict` refuses the turn after it. Codex shows the refusal and does not retry (one
    refused frame, no reconnects, no HTTP fallback); its next turn re-compacts from the
    compacted history, that compaction request carries the lost revision in its
    contract, and the turn after it proceeds with the revision re-stated."""
    codex, _, second = _play(gate, tmp_path, "ws")
    ctx = _context(gate, second)
    _compacted(gate, "ws")
    assert second.failed(), ctx
    shown = " ".join(second.errors())
    assert "destructive_compaction" in shown and REV_BEFORE in shown, ctx
    assert not any("Reconnecting" in m for m in second.errors()), ctx  # no retry storm
    refusals = [e for e in gate.events() if e["action"] == "reject"]
    assert len(refusals) == 1, ctx
    assert codex.alembic() == ["upgrade head"], ctx  # nothing ran
    assert not any(w["via"] != "WS" for w in wire_summary(gate.fake.requests)), ctx  # no HTTPS fallback

    third = codex.run(ROLLBACK, resume=True)
    ctx = _context(gate, second, third)
    assert third.returncode == 0 and not third.failed(), ctx
    assert codex.alembic() == ["upgrade head", f"downgrade {REV_BEFORE}"], ctx
    summ = [e for e in gate.events() if e["kind"] == "summarization"]
    assert len(summ) >= 2 and REV_BEFORE in summ[-1]["contract"], ctx  # the re-compaction's contract


@pytest.mark.parametrize("gate", ["strict"], indirect=True)
@pytest.mark.parametrize("transport", ["http", "ws-local"])
def test_strict_local_compaction_keeps_the_bindings_and_proceeds(gate: GateStack, tmp_path: Path, transport: str) -> None:
    """A local compaction is gated at the summarization call (contract, summary checked
    and completed), so there is nothing to refuse: the rollback uses the original
    revision, and so does the turn after Codex re-compacts from its compacted history."""
    codex, _, second = _play(gate, tmp_path, transport)
    ctx = _context(gate, second)
    _compacted(gate, transport)
    assert second.returncode == 0 and not second.failed(), ctx
    assert codex.alembic() == ["upgrade head", f"downgrade {REV_BEFORE}"], ctx
    third = codex.run(ROLLBACK, resume=True)
    ctx = _context(gate, second, third)
    assert third.returncode == 0 and not third.failed(), ctx
    assert codex.alembic()[-1] == f"downgrade {REV_BEFORE}", ctx
    assert not any(e["action"] == "reject" for e in gate.events()), ctx


def test_recall_over_http_the_model_reads_the_spilled_region_back(tmp_path: Path) -> None:
    """``recall`` over the streamed ``POST /v1/responses``: Codex's local summary drops the
    revision and goes through as written; the gate spills what the compaction removed and
    offers its recall tool; the model calls it, the gate answers it and asks upstream again
    inside the one stream Codex reads, and Codex runs the rollback to the original revision
    without ever seeing the recall call."""
    codex_binary()
    stack = GateStack("recall", codex_recalling)
    try:
        codex, _, second = _play(stack, tmp_path, "http")
        ctx = _context(stack, second)
        _compacted(stack, "http")
        assert second.returncode == 0 and not second.failed(), ctx
        assert codex.alembic() == ["upgrade head", f"downgrade {REV_BEFORE}"], ctx
        spilled = [e for e in stack.events() if e["kind"] == "compaction" and e["action"] == "spill"]
        assert spilled, ctx
        assert [e["outcome"] for e in stack.events() if e["kind"] == "recall"] == ["found"], ctx
        # Codex ran its own shell tool only; the recall call never reached it
        ran = second.commands()
        assert len(ran) == 1 and f"alembic downgrade {REV_BEFORE}" in ran[0], ctx
        assert RECALL_TOOL not in json.dumps(second.events), ctx
    finally:
        stack.close()
