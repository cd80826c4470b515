"""Claude Code (the real binary, npm ``@anthropic-ai/claude-code``) through the gate.

Claude Code runs non-interactively (``claude -p … --output-format stream-json``), one
turn per invocation, the turns of one session joined by ``--session-id`` / ``--resume``.
It runs its Bash tool for real (the stand-in ``alembic`` logs what it was asked to do).
Its compaction is its own: reactive (the upstream answers 400 "prompt is too long"; it
summarizes the head, prompt appended to the last user message after the tool_result,
and retries) or ``/compact``.

What 2.1.332 sends (recorded for the closing note): header ``X-Claude-Code-Session-Id``,
``metadata.user_id`` a JSON string ``{"device_id", "account_uuid", "session_id"}``,
system[0] ``x-anthropic-billing-header: cc_version=2.1.332.<3 hex>; cc_entrypoint=sdk-cli;``
whose suffix changes across the compaction, summarize prompt beginning "CRITICAL: Respond
with TEXT ONLY", continuation "This session is being continued from a previous
conversation that ran out of context."
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.clients.story import INVENTED, NEW_HEAD, RECALL_TOOL, ROLLBACK_TARGET, Story
from tests.clients.support import (
    CLIENTS_ROOT,
    Workspace,
    conversation_ids,
    events_of,
    find_binary,
    run,
)
from tests.e2e.stack import GateStack

VERSION = "2.1.332"
MODEL = "claude-sonnet-4-5"


@pytest.fixture(scope="module")
def claude() -> str:
    return find_binary(
        "CG_CLAUDE_BIN",
        CLIENTS_ROOT / "npm" / "node_modules" / ".bin" / "claude",
        "claude",
        f"npm install --prefix {CLIENTS_ROOT}/npm @anthropic-ai/claude-code@{VERSION}",
    )


class Session:
    """One Claude Code session through a gate stack."""

    def __init__(self, claude: str, tmp: Path, policy: str, story: Story) -> None:
        self.claude = claude
        self.story = story
        self.ws = Workspace.create(tmp)
        self.stack = GateStack(policy, story.anthropic)
        self.id = str(uuid.uuid4())
        self.turns = 0
        self.env = self.ws.env(
            ANTHROPIC_BASE_URL=self.stack.url,
            ANTHROPIC_API_KEY="sk-ant-test-key",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        )

    def turn(self, prompt: str) -> list[dict[str, Any]]:
        """Run one turn; returns the stream-json events Claude Code printed."""
        resume = ["--session-id", self.id] if self.turns == 0 else ["--resume", self.id]
        self.turns += 1
        argv = [self.claude, "-p", prompt, *resume, "--output-format", "stream-json", "--verbose",
                "--allowedTools", "Bash", "--model", MODEL]  # fmt: skip
        r = run(argv, self.ws, self.env)
        out = []
        for line in r.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        assert out, f"claude printed no stream-json (rc={r.returncode}): {r.stderr[-2000:]}"
        return out

    def close(self) -> None:
        self.stack.close()


def result_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    res = [e for e in events if e.get("type") == "result"]
    assert res, events[-3:]
    return res[-1]


@pytest.fixture
def session(claude: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    made: list[Session] = []

    def make(policy: str, story: Story) -> Session:
        s = Session(claude, tmp_path / f"s{len(made)}", policy, story)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _one_conversation(s: Session) -> None:
    # the session id keeps one conversation across the compaction (no "<id>.2")
    ids = conversation_ids(s.stack)
    assert ids == [s.id], ids


def test_default_reactive_compaction_keeps_the_rollback_target(session: Any) -> None:
    story = Story(too_long_once=True, obey_contract_from=0)  # a summarizer that ignores the contract
    s = session("default", story)
    s.turn("Apply the pending database migration with alembic.")
    res = result_of(s.turn("The deploy failed. Roll back the migration you applied."))
    assert story.too_long_sent == 1 and len(story.summaries) == 1
    # the gate saw the summarization call, contracted the bindings and appended what the
    # summary left out; the model then rolled back to the original revision
    gated = events_of(s.stack, "summarization")
    assert gated and gated[0]["action"] == "gate" and ROLLBACK_TARGET in gated[0]["required"]
    checks = events_of(s.stack, "summary_check")
    assert checks and ROLLBACK_TARGET in checks[0]["appended"]
    assert s.ws.alembic_calls() == ["upgrade head", f"downgrade {ROLLBACK_TARGET}"]
    assert res.get("is_error") is False
    _one_conversation(s)
    # the compacted request was checked, and found safe (the appended section survived)
    comp = events_of(s.stack, "compaction")
    assert comp and comp[-1]["verdict"] == "safe" and comp[-1]["transition"] == "summarize"


def test_default_slash_compact_keeps_the_rollback_target(session: Any) -> None:
    story = Story(too_long_once=False, obey_contract_from=0)
    s = session("default", story)
    s.turn("Apply the pending database migration with alembic.")
    s.turn("Check the service health.")
    s.turn("/compact")
    assert len(story.summaries) == 1, "/compact sent no summarization call"
    assert [e["action"] for e in events_of(s.stack, "summarization")] == ["gate"]
    s.turn("The deploy failed. Roll back the migration you applied.")
    assert s.ws.alembic_calls() == ["upgrade head", f"downgrade {ROLLBACK_TARGET}"]
    _one_conversation(s)


def test_strict_refuses_then_a_recompaction_that_keeps_the_bindings_proceeds(session: Any, tmp_path: Path) -> None:
    # strict, and a gate that only contracts (does not append): the first summary, which
    # ignores the contract, loses the revision, so the compacted request must be refused
    policy = tmp_path / "strict-contract-only.yaml"
    policy.write_text("version: 1\nname: strict-contract-only\nextends: strict\ngate:\n  append_missing: false\n")
    story = Story(too_long_once=True, obey_contract_from=2)
    s = session(str(policy), story)
    s.turn("Apply the pending database migration with alembic.")
    events = s.turn("The deploy failed. Roll back the migration you applied.")
    res = result_of(events)
    text = json.dumps(events)
    # the client shows the refusal, naming the binding and how to recover
    assert res.get("is_error") is True, res
    assert "compaction-gate refused this request" in text and ROLLBACK_TARGET in text and "/compact" in text
    refused = [e for e in events_of(s.stack) if e.get("action") == "reject"]
    # no retry storm: 2.1.332 answers a 400 with a bounded ladder of resends that drop
    # beta features (and load deferred tools: the tools change), then shows the error;
    # each resend is still refused — and recorded as refused, never as "safe"
    assert 1 <= len(refused) <= 6, [e["kind"] for e in refused]
    assert [e["kind"] for e in refused] == ["compaction"] + ["reject_sticky"] * (len(refused) - 1)
    after_refusal = events_of(s.stack)[events_of(s.stack).index(refused[0]) :]
    assert not [e for e in after_refusal if e.get("kind") == "compaction" and e.get("verdict") == "safe"]
    model_calls = len(s.stack.fake.model_requests())
    assert s.ws.alembic_calls() == ["upgrade head"]
    # the way forward: /compact — the gate contracts the binding the conversation lost
    s.turn("/compact")
    assert len(story.summaries) == 2 and ROLLBACK_TARGET in story.contracts[-1]
    assert ROLLBACK_TARGET in story.summaries[-1]
    restore = events_of(s.stack, "summarization")[-1]
    assert ROLLBACK_TARGET in restore["restore"]
    s.turn("Roll back the migration you applied.")
    assert s.ws.alembic_calls() == ["upgrade head", f"downgrade {ROLLBACK_TARGET}"]
    assert len(s.stack.fake.model_requests()) > model_calls
    _one_conversation(s)


def test_audit_records_the_destructive_compaction_and_the_invented_value(session: Any) -> None:
    story = Story(too_long_once=True, obey_contract_from=0)
    s = session("audit", story)
    s.turn("Apply the pending database migration with alembic.")
    s.turn("The deploy failed. Roll back the migration you applied.")
    # nothing was changed: the lossy summary went through, the model invented a revision
    assert s.ws.alembic_calls() == ["upgrade head", f"downgrade {INVENTED}"]
    comp = [e for e in events_of(s.stack, "compaction") if e.get("verdict") == "destructive"]
    assert comp and comp[0]["action"] == "warn"
    assert {ROLLBACK_TARGET, NEW_HEAD} <= set(comp[0]["required"])
    trip = events_of(s.stack, "tripwire")
    assert trip and trip[0]["action"] == "warn"
    assert [h["value"] for h in trip[0]["hallucinated"]] == [INVENTED]
    _one_conversation(s)


def test_recall_the_spilled_region_is_read_back_and_the_rollback_uses_the_original_revision(session: Any) -> None:
    """``recall``: the lossy summary goes through as written, what the compaction removed
    is spilled, and the gate offers its recall tool; the model calls it, the gate answers
    it and asks upstream again inside the same streamed response, and Claude Code — which
    never sees the recall call — runs the rollback to the original revision."""
    story = Story(too_long_once=True, obey_contract_from=0, recall=True)
    s = session("recall", story)
    s.turn("Apply the pending database migration with alembic.")
    events = s.turn("The deploy failed. Roll back the migration you applied.")
    assert story.too_long_sent == 1 and len(story.summaries) == 1
    assert ROLLBACK_TARGET not in story.summaries[0]  # nothing was contracted or appended
    comp = [e for e in events_of(s.stack, "compaction") if e.get("transition") == "summarize"]
    assert comp and comp[0]["action"] == "spill", comp
    # the model recalled the region once, and the gate found it
    assert len(story.recalls) == 1
    recalls = events_of(s.stack, "recall")
    assert [e["outcome"] for e in recalls] == ["found"], recalls
    assert s.ws.alembic_calls() == ["upgrade head", f"downgrade {ROLLBACK_TARGET}"]
    # what Claude Code saw: its own Bash tool only, never the gate's recall tool
    used = [
        block.get("name")
        for e in events
        if e.get("type") == "assistant"
        for block in (e.get("message") or {}).get("content") or []
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    assert used and set(used) == {"Bash"}, used
    assert RECALL_TOOL not in json.dumps(events)
    assert result_of(events).get("is_error") is False
    _one_conversation(s)
