"""``compaction-gate demo``: see in one command what the gate does.

No API key, no network. The command starts, on free loopback ports:

1. the scripted model of :mod:`proxy.demo_upstream` (OpenAI wire format);
2. a proxy under the ``audit`` policy (warn only: what happens without the gate);
3. a proxy under the ``default`` policy (the gate acting);
4. a proxy under the ``recall`` policy (no summary contract: what the compaction removed
   is spilled, and the model recalls the revision through the gate's recall tool);

plays the migration story of :mod:`proxy.demo_story` through each proxy, and prints a
short narrated report: what was compacted, what was dropped, what the gate did, and
the final action with and without it. It ends with the dashboard URL;
``--keep-running`` leaves everything up to browse it.

The narration is computed from what actually happened (response headers, the gate's
events, the final tool call), never from canned text, so the demo doubles as an
end-to-end smoke test of a fresh install.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import aiohttp
from aiohttp import web

from proxy.config import ProxyConfig, ServerSettings, StateSettings, Upstream
from proxy.demo_story import DEMO_REVISION, StoryResult, run_story
from proxy.demo_upstream import create_app as create_upstream_app
from proxy.metrics import Metrics

__all__ = [
    "DemoOutcome",
    "DemoRun",
    "add_arguments",
    "build_gate_app",
    "demo_config",
    "render_report",
    "run",
    "run_demo",
    "running_gate",
    "start_app",
]

POLICIES: tuple[str, ...] = ("audit", "default", "recall")

_ACTION_TEXT: dict[str, str] = {
    "none": "let the request through: nothing required was lost",
    "warn": "warned and recorded an event; the request went upstream unchanged",
    "reinject": "re-injected the dropped binding verbatim, right after the summary",
    "reject": "refused the request (HTTP 400, x-should-retry: false), naming the binding",
    "spill": "stored the lost history under a private handle and offered the model a tool to recall it",
    "gate": "added a contract naming the binding to the summarization call and checked the summary",
}


@dataclass
class DemoRun:
    """One story played through one proxy."""

    policy: str
    proxy_url: str
    story: StoryResult
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def dashboard_url(self) -> str:
        return f"{self.proxy_url}/gate/"

    def destructive_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events if _verdict(e) == "destructive"]

    def dropped(self) -> list[dict[str, Any]]:
        """Required bindings the compaction dropped or altered (from the gate's events)."""
        seen: set[str] = set()
        out: list[dict[str, Any]] = []
        for event in self.events:
            for item in _bindings(event, "dropped") + _bindings(event, "altered"):
                value = str(item.get("value", ""))
                if value and item.get("required") and value not in seen:
                    seen.add(value)
                    out.append(item)
        return out


@dataclass
class DemoOutcome:
    """Both runs, the upstream URL, and the report as printed."""

    upstream_url: str
    runs: list[DemoRun]
    report: str = ""

    def run_for(self, policy: str) -> DemoRun:
        return next(r for r in self.runs if r.policy == policy)


# -- event field access (events are flat JSON objects from GET /gate/events) -----------


def _verdict(event: Mapping[str, Any]) -> str:
    return str(event.get("verdict") or "")


def _bindings(event: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = event.get(key)
    if not isinstance(value, list):
        return []
    return [v if isinstance(v, dict) else {"value": str(v)} for v in value]


def _transition(event: Mapping[str, Any]) -> str:
    return str(event.get("transition") or "")


def _values(event: Mapping[str, Any] | None, key: str) -> list[str]:
    if event is None:
        return []
    return [str(v.get("value", "")) if isinstance(v, Mapping) else str(v) for v in event.get(key) or ()]


def _describe_binding(item: Mapping[str, Any]) -> str:
    details = [str(item.get("kind") or "identifier").replace("_", " ")]
    details.append("regenerable" if item.get("regenerable") else "not regenerable")
    where = item.get("where")
    if where:
        details.append(f"from {where}")
    return f"{item.get('value', '')} ({', '.join(details)})"


# -- running the pieces ---------------------------------------------------------------


async def start_app(app: web.Application, host: str = "127.0.0.1") -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free port of ``host``; returns the runner and the base URL."""
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    return runner, f"http://{host}:{port}"


def build_gate_app(config: ProxyConfig, *, watch_policy: bool = False) -> web.Application:
    """The complete proxy for ``config``: forwarding, tracking, the gate, its API, the
    dashboard and ``/metrics`` (one :class:`~proxy.metrics.Metrics` shared by all)."""
    from proxy.gate.wiring import build_gate, install_gate
    from proxy.server.app import create_app

    gate = build_gate(config)
    app = create_app(config, gate, metrics=Metrics())
    install_gate(app, gate, watch=watch_policy)
    return app


def demo_config(policy: str, upstream_url: str) -> ProxyConfig:
    """Loopback only, in-memory state, every request to the scripted model."""
    return ProxyConfig(
        server=ServerSettings(host="127.0.0.1", port=0, log_level="warning"),
        upstreams=(Upstream(name="demo", base_url=f"{upstream_url}/v1"),),
        default_upstream="demo",
        state=StateSettings(backend="memory"),
        policy=policy,
    )


@contextlib.asynccontextmanager
async def running_gate(
    policy: str, upstream_url: str, host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """A proxy under ``policy`` in front of ``upstream_url``; yields its base URL."""
    runner, url = await start_app(build_gate_app(demo_config(policy, upstream_url)), host)
    try:
        yield url
    finally:
        await runner.cleanup()


async def _events(session: aiohttp.ClientSession, proxy_url: str, conversation: str) -> list[dict[str, Any]]:
    """The gate's events for ``conversation``, oldest first (from the public JSON API)."""
    if not conversation:
        return []
    async with session.get(f"{proxy_url}/gate/events", params={"conversation": conversation, "limit": "1000"}) as resp:
        data = await resp.json(content_type=None) if resp.status == 200 else {}
    items = data.get("events", []) if isinstance(data, dict) else []
    return [e for e in items if isinstance(e, dict)]


async def _play(policy: str, proxy_url: str) -> DemoRun:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        story = await run_story(f"{proxy_url}/v1", session=session)
        events = await _events(session, proxy_url, story.conversation)
    return DemoRun(policy=policy, proxy_url=proxy_url, story=story, events=events)


# -- narration ------------------------------------------------------------------------


def _final_line(story: StoryResult) -> str:
    if story.final_status >= 400:
        return (f"refused before it reached the model (HTTP {story.final_status}); "
                "the agent is told which revision to restore")
    if story.final_command is None:
        return "no tool call"
    if story.rollback_correct:
        return f"{story.final_command}   ✓ the original revision"
    return f"{story.final_command}   ✗ WRONG: {story.rollback_revision} was never seen, the model invented it"


def _first(events: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((e for e in events if e.get("kind") == kind), None)


def _run_section(number: int, title: str, run: DemoRun) -> list[str]:
    story, events = run.story, run.events
    lines = [f"{number}) {title} (policy: {run.policy})"]

    gated = _first(events, "summarization")
    check = _first(events, "summary_check")
    contract, missing, appended = _values(gated, "contract"), _values(check, "missing"), _values(check, "appended")
    if contract:
        said = f"the gate added a contract naming {', '.join(contract)}"
        if appended:
            said += f"; the summary still left out {', '.join(appended)}, so the gate appended it verbatim"
        elif not missing:
            said += "; the summary kept it"
        lines.append(f"   summarization call: {said}")
    elif missing:
        lines.append(f"   summarization call: the model's summary left out {', '.join(missing)}"
                     " (the gate only noted it)")
    else:
        kept = "kept" if story.summary_kept_revision else "dropped"
        lines.append(f"   summarization call: forwarded as is; the summary {kept} {DEMO_REVISION}")

    compaction = _first(events, "compaction")
    kind = _transition(compaction) if compaction else "summarize"
    verdict = _verdict(compaction) if compaction else ""
    verdict_text = {"destructive": "destructive", "safe": "safe: every required binding survived"}.get(verdict, verdict)
    lines.append(
        f"   compaction: {story.messages_before_compaction} messages -> "
        f"{story.messages_after_compaction} ({kind}{', ' + verdict_text if verdict_text else ''})"
    )
    lost = _bindings(compaction, "dropped") + _bindings(compaction, "altered") if compaction else []
    required = [b for b in lost if b.get("required")]
    others = len(lost) - len(required)
    for item in required:
        lines.append(f"   dropped:    {_describe_binding(item)}")
    if not required:
        lines.append("   dropped:    nothing a later step needs")
    if others:
        lines.append(f"               (+{others} other identifier(s) no open obligation needs, e.g. paths to re-read)")

    action = story.action_of("next action")
    did = _ACTION_TEXT.get(action, action)
    reinjected = _values(_first(events, "reinject"), "reinjected")
    if action == "reinject" and reinjected:
        did = f"re-injected {', '.join(reinjected)} verbatim, right after the summary"
    lines.append(f"   the gate:   {did}")
    recalled = [e for e in events if e.get("kind") == "recall"]
    for e in recalled:
        handle = str(e.get("handle") or "")
        shown = handle[:14] + "…" if len(handle) > 14 else handle
        lines.append(
            f"   recall:     the model called {e.get('tool')}({shown}); the gate answered it from the spill "
            f"store ({e.get('bytes')} bytes, {e.get('outcome')}) and asked the model again"
        )
    if recalled and story.final_command is not None and "spill_" not in story.final_command:
        lines.append(
            f"               the client sent one request and got one answer ({len(recalled) + 1} upstream rounds, "
            "usage summed); it never saw the recall call"
        )
    trip = _first(events, "tripwire")
    if trip is not None:
        for h in _bindings(trip, "hallucinated"):
            expected = ", ".join(str(x) for x in h.get("expected") or ())
            lines.append(f"   tripwire:   the next tool call used {h.get('value')}, never seen in this conversation"
                         + (f" (expected {expected})" if expected else ""))
    lines.append(f"   next action: {_final_line(story)}")
    return lines


def render_report(outcome: DemoOutcome, *, keep_running: bool) -> str:
    """The narrated report printed by the demo."""
    audit, default, recall = outcome.run_for("audit"), outcome.run_for("default"), outcome.run_for("recall")
    story = audit.story
    lines = [
        "compaction-gate demo: no API key, no network.",
        f"A scripted model speaking the OpenAI API runs at {outcome.upstream_url}.",
        "",
        "The story: an agent applies a database migration; the tool result names the",
        f"rollback target, revision {DEMO_REVISION}. Four steps later, at "
        + f"{story.messages_before_compaction} messages, it compacts",
        "its history the way Claude Code does: the model writes a summary and the history",
        "restarts from it. Then the smoke tests fail and the agent must roll the migration back.",
        "",
        *_run_section(1, "Without the gate", audit),
        "",
        *_run_section(2, "With the gate", default),
        "",
        *_run_section(3, "With recall on demand", recall),
        "",
    ]
    verdict_without = "correct" if audit.story.rollback_correct else "wrong"
    verdict_with = "correct" if default.story.rollback_correct else "wrong"
    verdict_recall = "correct" if recall.story.rollback_correct else "wrong"
    lines.append(
        f"Result: rollback without the gate {verdict_without}, with the gate {verdict_with}, "
        f"with recall on demand {verdict_recall}."
    )
    lines.append("")
    lines.append(f"Dashboard: {default.dashboard_url}")
    if keep_running:
        lines.append(f"           {audit.dashboard_url}   (the audit run)")
        lines.append(f"           {recall.dashboard_url}   (the recall run)")
        lines.append("Press Ctrl-C to stop.")
    else:
        lines.append("(run `compaction-gate demo --keep-running` to keep it up and open it)")
    return "\n".join(lines) + "\n"


async def run_demo(
    *, out: TextIO | None = None, keep_running: bool = False, stop: asyncio.Event | None = None
) -> DemoOutcome:
    """Run the whole demo; print the report to ``out``; optionally stay up until ``stop``."""
    out = out or sys.stdout
    upstream_runner, upstream_url = await start_app(create_upstream_app(), "127.0.0.1")
    try:
        async with contextlib.AsyncExitStack() as stack:
            runs: list[DemoRun] = []
            for policy in POLICIES:
                proxy_url = await stack.enter_async_context(running_gate(policy, upstream_url))
                runs.append(await _play(policy, proxy_url))
            outcome = DemoOutcome(upstream_url=upstream_url, runs=runs)
            outcome.report = render_report(outcome, keep_running=keep_running)
            out.write(outcome.report)
            out.flush()
            if keep_running:
                await (stop or asyncio.Event()).wait()
            return outcome
    finally:
        await upstream_runner.cleanup()


# -- CLI ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``demo`` flags."""
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the proxies and the scripted model up to browse the dashboard",
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when the gate made the rollback correct (with the summary
    contract and with recall on demand), 1 otherwise."""
    try:
        outcome = asyncio.run(run_demo(keep_running=bool(args.keep_running)))
    except KeyboardInterrupt:
        return 0
    ok = outcome.run_for("default").story.rollback_correct and outcome.run_for("recall").story.rollback_correct
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - convenience
    parser = argparse.ArgumentParser(prog="compaction-gate demo")
    add_arguments(parser)
    return run(parser.parse_args(argv))
