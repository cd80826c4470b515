"""What a replay found (:class:`ReplayResult`: every request's action, the destructive
compactions) and its reports: the summary table printed on stdout, the JSON and HTML
files written by ``compaction-gate replay --out DIR``. Pure except :func:`write_reports`."""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "VOLATILE_FIELDS",
    "DestructiveFinding",
    "ReplayResult",
    "event_field",
    "is_destructive",
    "normalise_events",
    "render_html",
    "render_table",
    "required_bindings",
    "write_reports",
]


# -- results ---------------------------------------------------------------------------

#: Event fields that differ between two runs of the same traffic (time, random ids).
VOLATILE_FIELDS = frozenset({"at", "time", "ts", "timestamp", "created", "request_id", "handle", "id"})


@dataclass
class DestructiveFinding:
    """One destructive compaction found in the input."""

    line: int
    conversation_id: str
    action: str
    event: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        d = _details(self.event)
        return {
            "line": self.line,
            "conversation_id": self.conversation_id,
            "action": self.action,
            "transition": event_field(self.event, "transition"),
            "dropped": d.get("dropped", []),
            "altered": d.get("altered", []),
            "reinjected": d.get("reinjected", []),
            "signals": d.get("signals", {}),
            "message": self.event.get("message", ""),
        }


@dataclass
class ReplayResult:
    """What a replay saw and produced."""

    source: str
    policy: str
    requests: int = 0
    bad_lines: list[str] = field(default_factory=list)
    gate_errors: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)
    dropped_kinds: Counter[str] = field(default_factory=Counter)
    conversations: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    destructive: list[DestructiveFinding] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "policy": self.policy,
            "requests": self.requests,
            "conversations": len(self.conversations),
            "bad_lines": self.bad_lines,
            "gate_errors": self.gate_errors,
            "actions": dict(self.actions),
            "event_kinds": dict(self.transitions),
            "dropped_by_kind": dict(self.dropped_kinds),
            "destructive_compactions": [f.to_json() for f in self.destructive],
            "seconds": round(self.seconds, 3),
        }


def _details(event: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in ("analysis", "details"):
        value = event.get(key)
        if isinstance(value, Mapping):
            merged.update(value)
    for key in ("verdict", "transition", "dropped", "altered", "reinjected", "signals"):
        if key in event:
            merged[key] = event[key]
    return merged


def event_field(event: Mapping[str, Any], name: str) -> str:
    value = _details(event).get(name)
    if isinstance(value, Mapping):
        value = value.get("kind")
    return str(value or "")


def required_bindings(event: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The dropped or altered bindings an open obligation needs (all, if unmarked)."""
    d = _details(event)
    lost = [b for b in list(d.get("dropped") or ()) + list(d.get("altered") or ()) if isinstance(b, Mapping)]
    if any("required" in b for b in lost):
        return [b for b in lost if b.get("required")]
    return lost


def is_destructive(event: Mapping[str, Any]) -> bool:
    """True for an event recording a destructive compaction."""
    d = _details(event)
    return d.get("verdict") == "destructive" or d.get("destructive") is True


def normalise_events(events_by_conversation: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Events comparable across runs: volatile fields removed, conversations renamed.

    Conversations become ``c1``, ``c2`` … in order of first appearance (given by the
    mapping's order), and any occurrence of a conversation id inside an event is
    replaced the same way. The result is sorted by (conversation, position).
    """
    rename = {cid: f"c{n}" for n, cid in enumerate(events_by_conversation, start=1)}

    def scrub(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: scrub(v) for k, v in value.items() if k not in VOLATILE_FIELDS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            for cid, alias in rename.items():
                if cid and cid in value:
                    value = value.replace(cid, alias)
            return value
        if isinstance(value, float):
            return round(value, 6)
        return value

    out: list[dict[str, Any]] = []
    for cid, events in events_by_conversation.items():
        for position, event in enumerate(events):
            out.append({"conversation": rename[cid], "position": position, **scrub(dict(event))})
    return out


# -- reports ---------------------------------------------------------------------------


def render_table(result: ReplayResult) -> str:
    """The summary printed on stdout."""
    rows: list[tuple[str, str]] = [
        ("requests", f"{result.requests:,}"),
        ("conversations", f"{len(result.conversations):,}"),
        ("destructive compactions", f"{len(result.destructive):,}"),
    ]
    if result.bad_lines:
        rows.append(("unreadable lines", f"{len(result.bad_lines):,}"))
    if result.gate_errors:
        rows.append(("gate errors", f"{result.gate_errors:,}"))
    for action, n in sorted(result.actions.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append((f"action {action}", f"{n:,}"))
    for kind, n in sorted(result.transitions.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append((f"event {kind}", f"{n:,}"))
    for kind, n in sorted(result.dropped_kinds.items(), key=lambda kv: (-kv[1], kv[0])):
        rows.append((f"required {kind} lost", f"{n:,}"))
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v) for _, v in rows)
    title = f"replay of {result.source or 'input'} (policy {result.policy or 'default'})"
    rule = "-" * (width + vwidth + 3)
    lines = [title, rule, *(f"{k.ljust(width)}   {v.rjust(vwidth)}" for k, v in rows), rule]
    for finding in result.destructive[:20]:
        d = finding.to_json()
        required = required_bindings(finding.event)
        values = ", ".join(str(b.get("value")) for b in required)
        others = len(d["dropped"]) + len(d["altered"]) - len(required)
        more = f" (+{others} not required)" if others > 0 else ""
        lines.append(
            f"line {finding.line}: {d['transition'] or 'compaction'} lost {values or '?'}{more} -> {finding.action}"
        )
    if len(result.destructive) > 20:
        lines.append(f"… and {len(result.destructive) - 20} more (see the reports)")
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font:14px system-ui,sans-serif;margin:24px;color:#1c2430}"
    "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #dfe3e8;padding:4px 8px;"
    "text-align:left;vertical-align:top}th{background:#f4f6f8}code{font:12.5px ui-monospace,monospace}"
    ".dropped{color:#b3261e}.altered{color:#9a5a00}.reinjected{color:#2e7d32}"
)


def _binding_list(items: Any, cls: str) -> str:
    if not isinstance(items, list) or not items:
        return "<em>none</em>"
    out = []
    for b in items:
        if isinstance(b, Mapping):
            value, kind, src = b.get("value", ""), b.get("kind", ""), b.get("source", "")
            if isinstance(src, Mapping):
                src = src.get("describe") or json.dumps(src, sort_keys=True)
        else:
            value, kind, src = b, "", ""
        out.append(
            f'<div class="{cls}"><code>{html.escape(str(value))}</code> '
            f"<small>{html.escape(str(kind))}</small><br><small>{html.escape(str(src))}</small></div>"
        )
    return "".join(out)


def render_html(result: ReplayResult) -> str:
    """A self-contained HTML report (no scripts, no external assets; all text escaped)."""
    summary = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in (
            ("source", result.source),
            ("policy", result.policy),
            ("requests", result.requests),
            ("conversations", len(result.conversations)),
            ("destructive compactions", len(result.destructive)),
        )
    )
    rows = []
    for f in result.destructive:
        d = f.to_json()
        rows.append(
            "<tr>"
            f"<td>{f.line}</td><td><code>{html.escape(f.conversation_id)}</code></td>"
            f"<td>{html.escape(str(d['transition']))}</td><td>{html.escape(f.action)}</td>"
            f"<td>{_binding_list(d['dropped'], 'dropped')}</td>"
            f"<td>{_binding_list(d['altered'], 'altered')}</td>"
            f"<td>{_binding_list(d['reinjected'], 'reinjected')}</td>"
            "</tr>"
        )
    table = (
        "<table><tr><th>line</th><th>conversation</th><th>transition</th><th>action</th>"
        "<th>dropped</th><th>altered</th><th>re-injected</th></tr>" + "".join(rows) + "</table>"
        if rows
        else "<p>No destructive compaction found.</p>"
    )
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>compaction-gate replay report</title>"
        f"<style>{_CSS}</style></head><body><h1>compaction-gate replay report</h1>"
        f"<table>{summary}</table><h2>Destructive compactions</h2>{table}</body></html>\n"
    )


def write_reports(result: ReplayResult, out_dir: Path) -> tuple[Path, Path]:
    """Write ``replay-report.json`` and ``replay-report.html`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "replay-report.json"
    html_path = out_dir / "replay-report.html"
    payload = {**result.to_json(), "events": result.events}
    json_path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    html_path.write_text(render_html(result), encoding="utf-8")
    return json_path, html_path
