"""aider (the real program, pip ``aider-chat``, in its own virtualenv) through the gate.

aider runs one process per turn (``--message``), its chat restored from its history file
(``--restore-chat-history``) — the path on which aider 0.86.2 really applies a summary:
in a live session it re-summarizes after each applied edit but discards the result (its
history changes between ``summarize_start`` and ``summarize_end``). A small
``--max-chat-history-tokens`` makes it compact at every start: its weak model gets
"*Briefly* summarize this partial conversation about programming." with the history
pasted as text, and the history restarts from "I spoke to you previously about a number
of things." + "Ok.". It has no tool role: the migration's output reaches the model as
text the user pasted (restored from the history file, the fenced output comes back as
an assistant message). Every turn it also moves its setup messages ("I am not sharing
any files…" / "Ok.") and its system reminder — not a compaction. aider does not run a
suggested shell command under ``--yes-always`` (it asks explicitly), so the final
action is the command the model had it suggest.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.clients.story import INVENTED, RECALL_TOOL, ROLLBACK_TARGET, Story
from tests.clients.support import CLIENTS_ROOT, Workspace, events_of, find_binary, run
from tests.e2e.stack import GateStack

VERSION = "0.86.2"
PASTED = (
    "I ran `alembic upgrade head` and got:\n```\n"
    "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.\n"
    "INFO  [alembic.runtime.migration] Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d, add orders table\n```"
)
TURNS = [
    PASTED,
    "Is the orders service healthy?",
    "Check the orders table.",
    "The deploy failed. Roll back the migration you applied.",
]


@pytest.fixture(scope="module")
def aider() -> str:
    return find_binary(
        "CG_AIDER_BIN",
        CLIENTS_ROOT / "aider" / "bin" / "aider",
        "aider",
        f"python -m venv {CLIENTS_ROOT}/aider && {CLIENTS_ROOT}/aider/bin/pip install aider-chat=={VERSION}",
    )


def run_aider(aider: str, tmp: Path, policy: str, story: Story, turns: list[str]) -> tuple[Any, str]:
    ws = Workspace.create(tmp)
    stack = GateStack(policy, story.openai)
    try:
        env = ws.env(OPENAI_API_KEY="sk-test-key", LITELLM_LOCAL_MODEL_COST_MAP="True", AIDER_ANALYTICS="false")
        argv = [aider, "--model", "openai/gpt-4o", "--openai-api-base", stack.url + "/v1",
                "--no-git", "--yes-always", "--no-check-update", "--no-show-release-notes", "--no-analytics",
                "--no-auto-commits", "--max-chat-history-tokens", "300", "--no-pretty", "--no-fancy-input",
                "--map-tokens", "0", "--no-show-model-warnings", "--no-stream"]  # fmt: skip
        out = ""
        for turn in turns:  # one aider process per turn; the chat history is restored
            r = run([*argv, "--restore-chat-history", "--message", turn], ws, env, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
            out += r.stdout
        return stack, out
    except BaseException:
        stack.close()
        raise


@pytest.fixture
def stacks() -> Any:
    made: list[Any] = []
    yield made
    for s in made:
        s.close()


def final_action(out: str) -> str | None:
    """The last shell command the model had aider suggest (aider offers to run it; with
    ``--yes-always`` it still asks, so the command is read from aider's output)."""
    found = re.findall(r"^alembic downgrade (\S+)$", out, re.M)
    return found[-1] if found else None


def _compactions(stack: Any) -> list[dict[str, Any]]:
    return events_of(stack, "compaction")


def test_default_pasted_output_binding_survives_aider_compaction(aider: str, tmp_path: Path, stacks: Any) -> None:
    story = Story(obey_contract_from=0)  # a weak model that ignores the contract
    stack, out = run_aider(aider, tmp_path, "default", story, TURNS)
    stacks.append(stack)
    assert story.summaries, "aider never compacted (raise the filler or lower --max-chat-history-tokens)"
    gated = events_of(stack, "summarization")
    assert gated and gated[0]["action"] == "gate" and ROLLBACK_TARGET in gated[0]["required"]
    assert final_action(out) == ROLLBACK_TARGET, out[-2000:]
    # aider compacts at each start after the first; its per-turn shuffle of its setup
    # messages is no compaction: nothing but those summaries is reported
    kinds = [e.get("transition") for e in _compactions(stack)]
    assert kinds and set(kinds) == {"summarize"} and len(kinds) <= len(TURNS) - 1, kinds


def test_audit_records_the_destructive_compaction(aider: str, tmp_path: Path, stacks: Any) -> None:
    story = Story(obey_contract_from=0)
    stack, out = run_aider(aider, tmp_path, "audit", story, TURNS)
    stacks.append(stack)
    destructive = [e for e in _compactions(stack) if e.get("verdict") == "destructive"]
    assert destructive and destructive[0]["action"] == "warn" and ROLLBACK_TARGET in destructive[0]["required"]
    # nothing changed: the model, which lost the revision, invented one and aider ran it
    assert final_action(out) == INVENTED, out[-2000:]
    # and the audit says so: the command aider suggested carries a value never seen
    trip = events_of(stack, "tripwire")
    assert trip and trip[-1]["action"] == "warn", [e["kind"] for e in events_of(stack)]
    (found,) = trip[-1]["hallucinated"]
    assert found["value"] == INVENTED and ROLLBACK_TARGET in found["expected"], found


def test_tripwire_stops_the_invented_command_aider_would_suggest(aider: str, tmp_path: Path, stacks: Any) -> None:
    """No tool role: the next action is the shell command the reply suggests. Under
    ``tripwire: block`` (and no repair) the reply that suggests the invented revision
    never reaches aider; aider shows why and which value was recorded instead."""
    policy = tmp_path / "audit-block.yaml"
    policy.write_text("version: 1\nname: audit-block\nextends: audit\ntripwire:\n  action: block\n")
    story = Story(obey_contract_from=0)
    stack, out = run_aider(aider, tmp_path / "w", str(policy), story, TURNS)
    stacks.append(stack)
    assert final_action(out) is None, out[-2000:]
    assert "compaction-gate stopped a suggested command" in out and ROLLBACK_TARGET in out, out[-2000:]
    trip = events_of(stack, "tripwire")
    assert trip and trip[-1]["action"] == "reject" and trip[-1]["hallucinated"][0]["value"] == INVENTED


def test_strict_refuses_and_the_values_sent_back_proceed(aider: str, tmp_path: Path, stacks: Any) -> None:
    policy = tmp_path / "strict-contract-only.yaml"
    policy.write_text("version: 1\nname: strict-contract-only\nextends: strict\ngate:\n  append_missing: false\n")
    story = Story(obey_contract_from=0)
    turns = [*TURNS, f"The migration output was: Running upgrade {ROLLBACK_TARGET} -> 4f9a2c1e7b3d. Roll back now."]
    stack, out = run_aider(aider, tmp_path / "w", str(policy), story, turns)
    stacks.append(stack)
    # aider shows the refusal, naming the revision; no retry storm
    assert "compaction-gate refused this request" in out and ROLLBACK_TARGET in out
    refused = [e for e in events_of(stack) if e.get("action") == "reject"]
    assert 1 <= len(refused) <= 3, [e["kind"] for e in refused]
    # the way forward: the values sent back (the rejection says so) — the next turn passes
    assert final_action(out) == ROLLBACK_TARGET, out[-2000:]


def test_strict_refuses_then_aiders_own_next_compaction_keeps_the_values(
    aider: str, tmp_path: Path, stacks: Any
) -> None:
    """The other way forward: nobody sends the values back. aider summarizes again at
    its next start; that summarization call carries the gate's contract naming what the
    refused summary lost, a summarizer that follows it keeps them, and the session goes
    on to the right rollback."""
    policy = tmp_path / "strict-contract-only.yaml"
    policy.write_text("version: 1\nname: strict-contract-only\nextends: strict\ngate:\n  append_missing: false\n")
    story = Story(obey_contract_from=2)  # ignores the first contract, follows the next ones
    stack, out = run_aider(aider, tmp_path / "w", str(policy), story, TURNS)
    stacks.append(stack)
    assert "compaction-gate refused this request" in out, out[-2000:]
    assert len(story.contracts) >= 2 and ROLLBACK_TARGET in "\n".join(story.contracts[1]), story.contracts
    assert final_action(out) == ROLLBACK_TARGET, out[-2000:]
    assert not any(ROLLBACK_TARGET in t for t in TURNS[1:])  # nobody sent it back after the paste


def test_recall_the_model_reads_the_spilled_region_back(aider: str, tmp_path: Path, stacks: Any) -> None:
    """``recall`` with a client that sends no tools at all: the gate offers its recall tool
    on the compacted request, answers the model's call itself and asks again; aider gets
    one plain answer whose command rolls back to the original revision."""
    story = Story(obey_contract_from=0, recall=True)
    stack, out = run_aider(aider, tmp_path, "recall", story, TURNS)
    stacks.append(stack)
    assert story.summaries, "aider never compacted"
    assert any(e.get("action") == "spill" for e in _compactions(stack)), [e["kind"] for e in events_of(stack)]
    assert len(story.recalls) == 1
    assert [e["outcome"] for e in events_of(stack, "recall")] == ["found"]
    assert final_action(out) == ROLLBACK_TARGET, out[-2000:]
    assert RECALL_TOOL not in out
