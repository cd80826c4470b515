"""Helpers for driving the real Codex CLI through compaction-gate to a scripted model.

Codex runs non-interactively (``codex exec --json``, later turns with ``codex exec resume
--last``), offline (``HTTPS_PROXY`` at a dead loopback port: its update check and plugin
sync never leave the machine), in a temporary ``CODEX_HOME`` and working directory, with
approvals and sandbox off so it runs the model's shell commands itself. A fake
``alembic`` on ``PATH`` prints the migration it "applies", so the binding
(``1a2b3c4d5e6f -> 4f9a2c1e7b3d``) is minted by a tool call Codex executes, and logs every
invocation — the final action the tests check is the ``alembic downgrade`` Codex ran.

The scripted model (:func:`codex_model`) speaks the Responses API over HTTP and over the
WebSocket (the fake upstream serves both); it reports a large ``usage`` after the
migration so that Codex's small ``model_auto_compact_token_limit`` makes it compact
before the next turn — locally (the "CONTEXT CHECKPOINT COMPACTION" prompt, answered by a
summary that drops the revision) with a custom provider, remotely (a
``compaction_trigger`` item, answered by one encrypted ``compaction`` item) with the
built-in provider.

Where the binary comes from: ``CG_CODEX_BIN``, else ``/opt/cg-clients/npm`` (what
``.ci/run`` installs), else ``codex`` on ``PATH``. The sandbox, the stand-in ``alembic``
and the story's revisions are the shared ones of :mod:`tests.clients.support` and
:mod:`tests.clients.story`.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clients.story import INVENTED, NEW_HEAD, RECALL_TOOL, ROLLBACK_TARGET, recall_handle
from tests.clients.support import CLIENTS_ROOT, Workspace, find_binary, run
from tests.support.fake_upstream import Call, Reply, ToolCall, Usage

#: What ``.ci/run`` installs (keep in step with it).
CODEX_VERSION = "0.171.0"
INSTALL = f"npm install --prefix {CLIENTS_ROOT}/npm @openai/codex@{CODEX_VERSION}"

REV_BEFORE, REV_AFTER = ROLLBACK_TARGET, NEW_HEAD
APPLY = "Apply the pending database migration."
ROLLBACK = "The deploy failed. Roll the migration back to where it was."
LOSSY_SUMMARY = (
    "Summary: the user asked to apply the pending database migration; it was applied with alembic "
    "and reported success. Next step: roll it back if the deploy fails."
)
COMPACTION_ITEM = {"type": "compaction", "id": "cmp_codex_1", "encrypted_content": "gAAAAB-encrypted-summary"}
#: usage reported after the migration: above the compaction limit the tests configure
BIG = Usage(input_tokens=49_990, output_tokens=10)
SMALL = Usage(input_tokens=990, output_tokens=10)
COMPACT_LIMIT = 3000

__all__ = ["APPLY", "INVENTED", "REV_AFTER", "REV_BEFORE", "ROLLBACK", "CodexRun", "CodexSession",
           "codex_binary", "codex_model", "codex_recalling", "wire_summary"]


def codex_binary() -> str:
    """The Codex CLI binary, or skip the test saying how ``.ci/run`` installs it."""
    return find_binary("CG_CODEX_BIN", CLIENTS_ROOT / "npm/node_modules/.bin/codex", "codex", INSTALL)


def _shell(cmd: str) -> Reply:
    # "login": false keeps the inherited PATH (a login shell would reset it and lose the
    # fake alembic)
    return Reply(tool_calls=[ToolCall("exec_command", {"cmd": cmd, "login": False})], usage=SMALL)


def _last_item(call: Call) -> dict[str, Any]:
    items = call.json.get("input") if isinstance(call.json, dict) else None
    return items[-1] if isinstance(items, list) and items and isinstance(items[-1], dict) else {}


def codex_model(call: Call) -> Reply:
    """The scripted model (see the module docstring)."""
    last = _last_item(call)
    if last.get("type") == "compaction_trigger":
        return Reply(items=[COMPACTION_ITEM], usage=SMALL)
    if last.get("type") == "function_call_output":
        out = str(last.get("output", ""))
        if "Running upgrade" in out:
            return Reply(text="Applied the migration.", usage=BIG)
        return Reply(text="Done: " + out.strip().splitlines()[-1][:200], usage=SMALL)
    user = call.last_user_text()
    if "CONTEXT CHECKPOINT COMPACTION" in user:
        return Reply(text=LOSSY_SUMMARY, usage=SMALL)
    if "roll" in user.lower():
        # a model rolls back to the revision its context shows, and invents one otherwise
        rev = REV_BEFORE if REV_BEFORE in call.all_text() else INVENTED
        return _shell(f"alembic downgrade {rev}")
    if "apply" in user.lower():
        return _shell("alembic upgrade head")
    return Reply(text="ok", usage=SMALL)


def codex_recalling(call: Call) -> Reply:
    """:func:`codex_model` when the gate offers its recall tool: asked to roll back with no
    revision in view, it calls the tool with the handle the description names; with the
    tool's result it rolls back to the revision the result shows."""
    tool = next((t for t in call.tools() if t["name"].startswith(RECALL_TOOL) and "spill_" in t["description"]), None)
    if tool is not None:
        recalled = "\n".join(call.results_of(tool["name"]))
        if recalled:
            return _shell(f"alembic downgrade {REV_BEFORE if REV_BEFORE in recalled else INVENTED}")
        asked = _last_item(call).get("role") == "user" and "roll" in call.last_user_text().lower()
        handle = recall_handle(tool["description"])
        if asked and handle and REV_BEFORE not in call.all_text():
            return Reply(tool_calls=[ToolCall(tool["name"], {"handle": handle})], usage=SMALL)
    return codex_model(call)


@dataclass
class CodexRun:
    returncode: int
    events: list[dict[str, Any]]
    stderr: str

    def commands(self) -> list[str]:
        return [e["item"]["command"] for e in self.events
                if e.get("type") == "item.completed" and e.get("item", {}).get("type") == "command_execution"]

    def errors(self) -> list[str]:
        out = [str(e.get("message", "")) for e in self.events if e.get("type") == "error"]
        out += [str(e.get("error", {}).get("message", "")) for e in self.events if e.get("type") == "turn.failed"]
        return out

    def failed(self) -> bool:
        return any(e.get("type") == "turn.failed" for e in self.events)


@dataclass
class CodexSession:
    """One Codex thread in its own sandbox (``CODEX_HOME`` under its ``HOME``).

    ``transport``: ``http`` (a custom provider, ``wire_api = "responses"``: streamed
    ``POST /v1/responses``, local compaction), ``ws`` (the built-in provider through
    ``openai_base_url``: the Responses WebSocket, remote compaction) or ``ws-local`` (a
    custom provider with ``supports_websockets``: the WebSocket, local compaction)."""

    root: Path
    base_url: str
    transport: str
    binary: str
    ws: Workspace = field(init=False)

    def __post_init__(self) -> None:
        self.ws = Workspace.create(self.root)
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(self.config())

    @property
    def codex_home(self) -> Path:
        return self.ws.home / ".codex"

    def config(self) -> str:
        common = [
            'model = "gpt-5.1"',
            f"model_auto_compact_token_limit = {COMPACT_LIMIT}",
            "check_for_update_on_startup = false",
        ]
        if self.transport == "ws":
            return "\n".join([*common, f'openai_base_url = "{self.base_url}"']) + "\n"
        provider = [
            'model_provider = "gate"', *common, "", "[model_providers.gate]", 'name = "compaction-gate"',
            f'base_url = "{self.base_url}"', 'env_key = "OPENAI_API_KEY"', 'wire_api = "responses"',
        ]
        if self.transport == "ws-local":
            provider.append("supports_websockets = true")
        return "\n".join(provider) + "\n"

    def env(self) -> dict[str, str]:
        return self.ws.env(CODEX_HOME=str(self.codex_home), OPENAI_API_KEY="sk-codex-conformance-test",
                           NO_COLOR="1", RUST_LOG="error")

    def run(self, prompt: str, *, resume: bool = False) -> CodexRun:
        args = [self.binary, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json"]
        if resume:
            args += ["resume", "--last"]
        args.append(prompt)
        r = run(args, self.ws, self.env())
        events = []
        for line in r.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return CodexRun(r.returncode, events, r.stderr)

    def alembic(self) -> list[str]:
        return self.ws.alembic_calls()


def wire_summary(requests: list[Any]) -> list[dict[str, Any]]:
    """What reached the model, one entry per request: how it came (HTTP or WS), what Codex
    called it (``request_kind``), the last input item — for the closing note and for
    failure messages."""
    out = []
    for r in requests:
        body = r.json if isinstance(r.json, dict) else {}
        meta = r.headers.get("x-codex-turn-metadata")
        cm = body.get("client_metadata") if isinstance(body.get("client_metadata"), dict) else {}
        meta = cm.get("x-codex-turn-metadata", meta)
        kind = None
        if meta:
            try:
                kind = json.loads(meta).get("request_kind")
            except ValueError:
                kind = None
        items = body.get("input") if isinstance(body.get("input"), list) else []
        last = items[-1] if items else {}
        raw = json.loads(r.body) if r.method == "WS" else {}
        out.append({
            "via": r.method, "request_kind": kind, "generate": body.get("generate", True),
            "previous_response_id": bool(raw.get("previous_response_id")) if r.method == "WS" else None,
            "items": len(items), "tools": len(body.get("tools") or []),
            "last": last.get("type") if isinstance(last, dict) else None,
        })
    return out
