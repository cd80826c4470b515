"""The migration story of issue 5, as a scripted agent and a scripted model.

The agent applies a migration (the tool result carries ``revision <12 hex>``), grows its
history with read-only checks, compacts with a summary that drops the revision, then asks
for the next action. The fake model rolls back the revision it finds in its context and
invents one when none is there — exactly how a real model fails after a lossy summary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_upstream import Call, Reply, Responder, ToolCall, Usage

REVISION = "3f9a1c2b7d4e"
INVENTED = "0badc0ffee42"
SYSTEM = "You are a database operations agent. Use the bash tool to run commands."
TASK = "Apply the pending database migration with alembic, then verify the service."
ROLLBACK_ASK = "The deploy failed. Roll back the migration you applied now."
CC_SUMMARY_MARKER = "Your task is to create a detailed summary of the conversation so far"
CONTINUATION = "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\n"
#: What the (lossy) summarizer writes: the goal survives, the binding does not.
LOSSY_SUMMARY = (
    "Summary: the user asked to apply the pending database migration and verify the service. "
    "The migration was applied successfully with alembic; the service checks (ls, pytest, curl) passed. "
    "If a rollback is needed, downgrade the migration that was applied."
)
CHECKS = ["ls migrations/versions", "pytest -q tests/test_orders.py", "curl -s localhost:8080/healthz", "cat alembic.ini"]

_HEX12 = re.compile(r"(?<![\w-])[0-9a-f]{12}(?![\w-])")


def run_tool(cmd: str) -> str:
    if cmd.startswith("alembic upgrade"):
        return f"INFO  [alembic.runtime.migration] Running upgrade -> add orders table\nrevision {REVISION} applied"
    if cmd.startswith("alembic downgrade"):
        return "INFO  [alembic.runtime.migration] Running downgrade ... done"
    return {
        "ls migrations/versions": "add_orders_table.py\ninitial_schema.py",
        "pytest -q tests/test_orders.py": "4 passed in 0.31s",
        "curl -s localhost:8080/healthz": '{"status": "ok"}',
        "cat alembic.ini": "[alembic]\nscript_location = migrations",
    }.get(cmd, "ok")


def _tool_results(call: Call) -> int:
    n = 0
    for m in call.messages():
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" or m.get("type") == "function_call_output":
            n += 1
        elif isinstance(m.get("content"), list):
            n += sum(1 for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def is_summarize_call(call: Call) -> bool:
    text = call.all_text()
    return CC_SUMMARY_MARKER in text or "Context Extraction Assistant" in text


def responder(call: Call) -> Reply:
    """The scripted model."""
    if is_summarize_call(call):
        return Reply(text=LOSSY_SUMMARY, chunks=[LOSSY_SUMMARY[:40], LOSSY_SUMMARY[40:]])
    last = call.last_user_text()
    if "Running downgrade" in call.all_text():
        return Reply(text="Rolled back the migration.")
    if "Roll back" in last or "roll back" in last.lower():
        found = _HEX12.findall(call.all_text())
        rev = found[0] if found else INVENTED
        return Reply(tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {rev}"})])
    done = _tool_results(call)
    if done == 0:
        return Reply(tool_calls=[ToolCall("bash", {"cmd": "alembic upgrade head"})])
    if done <= len(CHECKS):
        return Reply(tool_calls=[ToolCall("bash", {"cmd": CHECKS[done - 1]})])
    return Reply(text="The migration is applied and the service checks pass.")


# --------------------------------------------------------------------------- recall

#: The gate's recall tool (its default name; a suffixed one when a client tool has it).
RECALL_TOOL = "recall_compacted_context"
_HANDLE = re.compile(r"spill_[A-Za-z0-9_-]{20,}")
#: A migration story whose revisions are named, not hashed: no detector knows the shape,
#: so a compaction that drops the rollback target is judged safe — what ``safe: spill``
#: is for. The rollback target is the revision before the upgrade.
SLUG_BEFORE = "orders_base"
SLUG_UPGRADE = f"INFO  [alembic.runtime.migration] Running upgrade {SLUG_BEFORE} -> orders_v2, add orders table"
_SLUG = re.compile(r"Running upgrade (\w+) ->")
#: Usage the recalling model reports per round (input, output): the client must see the sum.
ROUND_USAGE = [(100, 7), (130, 11), (170, 13), (210, 17)]


def run_slug_tool(cmd: str) -> str:
    return SLUG_UPGRADE if cmd.startswith("alembic upgrade") else run_tool(cmd)


def hex_revisions(text: str) -> list[str]:
    return _HEX12.findall(text)


def slug_revisions(text: str) -> list[str]:
    return _SLUG.findall(text)


def recalling(
    find: Callable[[str], list[str]] = hex_revisions,
    *,
    base: Responder = responder,
    query: str | None = None,
    mixed: bool = False,
    handle: str | None = None,
    always: bool = False,
) -> Responder:
    """The scripted model when the gate offers its recall tool: asked to roll back, it
    looks for the revision in what it sees (the messages; it does not read the tools'
    descriptions for values); when it is not there and the tool is offered, it calls
    the tool with the handle the description names (or ``handle``), optionally with
    ``query``, and — ``mixed`` — together with a client tool call that guesses. With a
    recall result it rolls back to the revision the result names. ``always``: it keeps
    calling the tool (for round limits). Every round reports :data:`ROUND_USAGE`."""

    def respond(call: Call) -> Reply:
        if "Running downgrade" in call.all_text():
            return base(call)  # rolled back already
        # the gate's tool: the one whose description names a stored region (a client tool
        # may have the same name; the gate's is then suffixed)
        tool = next((t for t in call.tools() if t["name"].startswith(RECALL_TOOL) and "spill_" in t["description"]), None)
        recalled = call.results_of(tool["name"]) if tool else []
        usage = Usage(*ROUND_USAGE[min(len(recalled), len(ROUND_USAGE) - 1)])
        rollback = any("roll back" in _user_texts(m).lower() for m in call.messages()[-3:])
        if tool and rollback and (always or not recalled) and not find(call.all_text().replace("\n".join(recalled), "")):
            h = handle or _HANDLE.search(tool["description"]).group(0)  # type: ignore[union-attr]
            args = {"handle": h} if query is None else {"handle": h, "query": query}
            calls = [ToolCall(tool["name"], args)]
            if mixed:
                calls.append(ToolCall("bash", {"cmd": f"alembic downgrade {INVENTED}"}))
            return Reply(tool_calls=calls, usage=usage)
        if recalled:
            found = find("\n".join(recalled))
            rev = found[0] if found else INVENTED
            return Reply(text="Rolling back to the recorded revision.", tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {rev}"})], usage=usage)
        if rollback and tool is None and find is slug_revisions:
            found = find(call.all_text())
            return Reply(tool_calls=[ToolCall("bash", {"cmd": f"alembic downgrade {found[0] if found else INVENTED}"})])
        return base(call)

    return respond


def _user_texts(m: Any) -> str:
    if not isinstance(m, dict) or m.get("role") != "user":
        return ""
    c = m.get("content")
    if isinstance(c, str):
        return c
    return " ".join(b.get("text", "") for b in c or () if isinstance(b, dict) and b.get("type") in ("text", "input_text"))


def rollback_target(args: str | dict[str, Any]) -> str:
    cmd = (json.loads(args) if isinstance(args, str) else args)["cmd"]
    assert cmd.startswith("alembic downgrade "), cmd
    return cmd.split()[-1]


BASH_OPENAI = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}
BASH_ANTHROPIC = {
    "name": "bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


# --------------------------------------------------------------------------- agents


class _AgentLoop:
    """What both scripted agents do the same way over their own SDK's ``call``."""

    messages: list[dict[str, Any]]

    def call(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]]]:
        raise NotImplementedError

    def next_action(self, ask: str) -> list[tuple[str, str, str]]:
        self.messages.append({"role": "user", "content": ask})
        _, calls = self.call(self.messages)
        return calls

    def summarize_via_model(self) -> str:
        """The agent's own summarization call (Claude Code's wording), through the proxy."""
        text, _ = self.call(self.messages + [{"role": "user", "content": CC_SUMMARY_MARKER + ". Be thorough."}])
        return text


@dataclass
class OpenAIAgent(_AgentLoop):
    """A minimal tool loop over the real ``openai`` SDK (chat completions)."""

    client: Any
    stream: bool = False
    model: str = "gpt-4o"
    messages: list[dict[str, Any]] = field(default_factory=list)
    run: Callable[[str], str] | None = None  # the tools' outputs (default: run_tool, read at call time)

    def call(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]]]:
        if not self.stream:
            r = self.client.chat.completions.create(model=self.model, messages=messages, tools=[BASH_OPENAI])
            m = r.choices[0].message
            return m.content or "", [(tc.id, tc.function.name, tc.function.arguments) for tc in m.tool_calls or []]
        text, calls = "", {}
        with self.client.chat.completions.create(model=self.model, messages=messages, tools=[BASH_OPENAI], stream=True) as s:
            for chunk in s:
                if not chunk.choices:
                    continue
                d = chunk.choices[0].delta
                text += d.content or ""
                for tc in d.tool_calls or []:
                    slot = calls.setdefault(tc.index, ["", "", ""])
                    slot[0] = tc.id or slot[0]
                    slot[1] += (tc.function.name or "") if tc.function else ""
                    slot[2] += (tc.function.arguments or "") if tc.function else ""
        return text, [tuple(v) for v in calls.values()]  # type: ignore[misc]

    def work(self, ask: str) -> list[tuple[str, str, str]]:
        """Send ``ask``, run tools until the model answers in text; returns every call."""
        if not self.messages:
            self.messages = [{"role": "system", "content": SYSTEM}]
        self.messages.append({"role": "user", "content": ask})
        seen: list[tuple[str, str, str]] = []
        for _ in range(10):
            text, calls = self.call(self.messages)
            if not calls:
                self.messages.append({"role": "assistant", "content": text})
                return seen
            self.messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": n, "arguments": a}} for cid, n, a in calls]})
            for cid, _, a in calls:
                self.messages.append({"role": "tool", "tool_call_id": cid, "content": (self.run or run_tool)(json.loads(a)["cmd"])})
            seen.extend(calls)
        return seen


    def compact(self, summary: str, keep_tail: int = 3) -> None:
        tail = self.messages[-keep_tail:] if keep_tail else []
        self.messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": CONTINUATION + summary},
            {"role": "assistant", "content": "Understood. Continuing from the summary."},
            *tail,
        ]


@dataclass
class AnthropicAgent(_AgentLoop):
    """The same loop over the real ``anthropic`` SDK (messages, tool_use)."""

    client: Any
    stream: bool = False
    model: str = "claude-haiku-4-5"
    messages: list[dict[str, Any]] = field(default_factory=list)
    run: Callable[[str], str] | None = None  # the tools' outputs (default: run_tool, read at call time)

    def call(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]]]:
        kw = {"model": self.model, "max_tokens": 1024, "system": SYSTEM, "messages": messages, "tools": [BASH_ANTHROPIC]}
        if self.stream:
            with self.client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = self.client.messages.create(**kw)
        text = "".join(b.text for b in msg.content if b.type == "text")
        calls = [(b.id, b.name, json.dumps(b.input)) for b in msg.content if b.type == "tool_use"]
        return text, calls

    def work(self, ask: str) -> list[tuple[str, str, str]]:
        self.messages.append({"role": "user", "content": ask})
        seen: list[tuple[str, str, str]] = []
        for _ in range(10):
            text, calls = self.call(self.messages)
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            content += [{"type": "tool_use", "id": cid, "name": n, "input": json.loads(a)} for cid, n, a in calls]
            self.messages.append({"role": "assistant", "content": content})
            if not calls:
                return seen
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": cid, "content": (self.run or run_tool)(json.loads(a)["cmd"])} for cid, _, a in calls]})
            seen.extend(calls)
        return seen


    def compact(self, summary: str, keep_tail: int = 3) -> None:
        tail = self.messages[-keep_tail:] if keep_tail else []
        # keep alternation: the tail starts with an assistant turn (tool_use + its result)
        self.messages = [{"role": "user", "content": CONTINUATION + summary}, *tail]


AgentFactory = Callable[..., Any]
