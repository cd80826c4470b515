"""The migration story the scripted upstream plays for the real clients.

1. The agent applies a migration (``alembic upgrade head``); the output names both
   revisions: ``Running upgrade 1a2b3c4d5e6f -> 4f9a2c1e7b3d`` — the rollback target is
   the *from* side.
2. It works on (turns that grow the history), compacts (the client's own compaction:
   Claude Code after an upstream 400 "prompt is too long" or ``/compact``; aider's weak
   model), and the summarizer is lossy: it keeps the goal, not the revision.
3. Asked to roll back, the model downgrades to the revision its context shows on the
   *from* side of a "Running upgrade X -> Y" line, and invents one when none is there —
   how a real model fails after a lossy summary.

:class:`Story` holds the knobs a test turns (when to answer "prompt is too long", whether
the summarizer obeys a gate contract) and what happened (summaries written, 400s sent).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.fake_upstream import Call, Reply, ToolCall

ROLLBACK_TARGET = "1a2b3c4d5e6f"
NEW_HEAD = "4f9a2c1e7b3d"
INVENTED = "0badc0ffee42"
LOSSY_SUMMARY = (
    "The user asked to apply the pending database migration with alembic; it was applied "
    "and the service checks passed. If a rollback is needed, downgrade the applied migration."
)
#: "Running upgrade X -> Y": X is the revision before the upgrade (the rollback target).
_FROM = re.compile(r"Running upgrade ([0-9a-f]{12}) -> [0-9a-f]{12}")
_CONTRACT = re.compile(r"\[compaction-gate: summary contract\](.*?)\[/compaction-gate\]", re.S)
_LISTED = re.compile(r"^- `([^`]+)`", re.M)
CLAUDE_SUMMARIZE = "CRITICAL: Respond with TEXT ONLY"
#: The gate's recall tool (its default name) and the handle its description names.
RECALL_TOOL = "recall_compacted_context"
_HANDLE = re.compile(r"spill_[A-Za-z0-9_-]{20,}")
AIDER_SUMMARIZE = "*Briefly* summarize this partial conversation about programming."
#: Filler that makes each aider turn cost tokens (aider compacts on a token budget).
FILLER = " ".join(f"Checked item {i}: the orders service responded normally." for i in range(12))


def recall_handle(description: str) -> str | None:
    """The spill handle the gate's recall tool description names."""
    found = _HANDLE.search(description)
    return found.group(0) if found else None


@dataclass
class Story:
    #: answer HTTP 400 "prompt is too long" to the first roll-back request (Claude Code
    #: then compacts reactively and retries)
    too_long_once: bool = True
    #: the summarizer copies the values a gate contract lists (from this summary on:
    #: 1 = always, 2 = ignores the first contract, obeys later ones, 0 = never)
    obey_contract_from: int = 1
    #: when the gate offers its recall tool and the revision is not in view, call the
    #: tool with the handle its description names; roll back to what the result shows
    recall: bool = False
    summaries: list[str] = field(default_factory=list)
    too_long_sent: int = 0
    contracts: list[list[str]] = field(default_factory=list)
    #: handles the model asked the gate's recall tool for
    recalls: list[str] = field(default_factory=list)

    def summarize(self, call: Call) -> Reply:
        text = call.all_text()
        listed: list[str] = []
        lines: list[str] = []
        for block in _CONTRACT.findall(text):
            listed += _LISTED.findall(block)
            lines += [ln for ln in block.splitlines() if _LISTED.match(ln)]
        self.contracts.append(listed)
        summary = LOSSY_SUMMARY
        n = len(self.contracts)
        if listed and self.obey_contract_from and n >= self.obey_contract_from:
            # an obedient summarizer copies the contract's lines (value and where it came from)
            summary += "\n\nVerbatim identifiers:\n" + "\n".join(dict.fromkeys(lines))
        self.summaries.append(summary)
        return Reply(text=summary)

    def rollback_target(self, call: Call) -> str:
        found = _FROM.findall(call.all_text())
        return found[0] if found else INVENTED

    def recall_step(self, call: Call, rollback: Callable[[str], Reply]) -> Reply | None:
        """With :attr:`recall`: the model's move when the gate offers its recall tool (the
        tool whose description names a stored region): roll back to the revision a recall
        result shows (``rollback(revision)``: the client's way of running a command), or —
        asked to roll back with no revision in view — call the tool."""
        tool = next((t for t in call.tools() if t["name"].startswith(RECALL_TOOL) and "spill_" in t["description"]), None)
        if not self.recall or tool is None:
            return None
        recalled = "\n".join(call.results_of(tool["name"]))
        if recalled:
            found = _FROM.findall(recalled)
            return rollback(found[0] if found else INVENTED)
        asked = "roll back" in call.last_user_text().lower()
        handle = recall_handle(tool["description"])
        if asked and handle and not _FROM.search(call.all_text()):
            self.recalls.append(handle)
            return Reply(tool_calls=[ToolCall(tool["name"], {"handle": handle})])
        return None

    # ------------------------------------------------------------------ Claude Code

    def anthropic(self, call: Call) -> Reply:
        last = call.last_user_text()
        if CLAUDE_SUMMARIZE in last:
            r = self.summarize(call)
            assert r.text is not None
            return Reply(text=f"<analysis>Reviewed the conversation.</analysis>\n<summary>\n{r.text}\n</summary>")
        recalled = self.recall_step(call, self._claude_rollback)
        if recalled is not None:
            return recalled
        low = last.lower()
        if "running downgrade" in low or "can't locate revision" in low:
            return Reply(text="Done: the migration was rolled back." if "running downgrade" in low else "The downgrade failed.")
        if "roll back" in low:
            if self.too_long_once and not self.too_long_sent and "being continued" not in call.all_text():
                self.too_long_sent += 1
                return Reply(status=400, text="prompt is too long: 212000 tokens > 200000 maximum")
            return self._claude_rollback(self.rollback_target(call))
        if "running upgrade" in low:
            return Reply(text="Applied the migration.")
        if "apply" in low and "migration" in low:
            return Reply(tool_calls=[ToolCall("Bash", {"command": "alembic upgrade head", "description": "apply"})])
        return Reply(text="Checked: " + FILLER)

    @staticmethod
    def _claude_rollback(rev: str) -> Reply:
        return Reply(tool_calls=[ToolCall("Bash", {"command": f"alembic downgrade {rev}", "description": "roll back"})])

    # ------------------------------------------------------------------ aider

    def openai(self, call: Call) -> Reply:
        if AIDER_SUMMARIZE in call.all_text():
            return self.summarize(call)
        recalled = self.recall_step(call, self._aider_rollback)
        if recalled is not None:
            return recalled
        low = call.last_user_text().lower()
        if "roll back" in low:
            return self._aider_rollback(self.rollback_target(call))
        return Reply(text="Noted. " + FILLER)

    @staticmethod
    def _aider_rollback(rev: str) -> Reply:
        """aider has no tools: the model suggests the command in a fenced block."""
        return Reply(text=f"Rolling back the migration:\n\n```bash\nalembic downgrade {rev}\n```\n")
