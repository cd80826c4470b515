"""The policy's obligation rule (plugs into :func:`proxy.core.analysis.analyze` as its
``obligation_rule``): which bindings of the history before a transition stay required.

1. ``default: non_regenerable`` — every non-regenerable (its provenance, then the
   policy's regenerability rules), non-allowlisted identifier stays required, whatever
   role carried it (one obligation per message part); secrets too — the gate refuses or
   spills rather than re-inject them.
2. ``rules`` — an obligation opens at a tool result whose call matches ``opened_by``
   (tool glob, command glob, result regex) and binds the identifiers of the listed kinds
   found in that result — even ones the detector calls regenerable. A later tool call
   matching ``closed_by`` closes every earlier obligation of that rule.
3. ``plan_tools`` — identifiers named in the latest call of a todo/plan tool.

Pure: reads the identifiers and the snapshot only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.diff import SourceRef
from ..core.identifiers.model import Identifier
from ..core.messages import Snapshot
from ..core.signals import Obligation as CoreObligation
from .model import Policy


def _command_of(tool: str | None, arguments: str) -> str | None:
    try:
        from ..core.identifiers.commands import command_of
    except ImportError:  # pragma: no cover - identifier layer always ships it
        return None
    return command_of(tool, arguments)


def _call_info(before: Snapshot) -> dict[str, tuple[int, str | None, str | None]]:
    """tool_call_id -> (message index, tool name, command line)."""
    out: dict[str, tuple[int, str | None, str | None]] = {}
    for idx, m in enumerate(before.messages):
        for p in m.tool_calls:
            if p.tool_call_id:
                out[p.tool_call_id] = (idx, p.tool_name, _command_of(p.tool_name, p.text))
    return out


class PolicyObligations:
    """``ObligationRule`` built from a compiled :class:`Policy`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def _counts(self, i: Identifier) -> bool:
        """Secrets count (a required secret makes the verdict destructive; the gate never
        re-injects it); allowlisted values and disabled detectors do not."""
        p = self.policy
        return not p.allowlisted(i.value) and not p.is_disabled(i.kind, i.detector)

    def judges_each(self, identifiers: Sequence[Identifier]) -> bool:
        """Whether this rule requires of every subset of ``identifiers`` what it requires
        of each member by itself: 1 and 2 judge each identifier alone (its value, kind,
        source and the history); 3 requires the latest plan call's items, so a set holding
        a plan tool's call can lose that call and have an earlier one's required — only a
        set without one qualifies."""
        plan = {t.lower() for t in self.policy.plan_tools}
        return not plan or not any(
            i.source.origin == "tool_call" and (i.source.tool_name or "").lower() in plan for i in identifiers
        )

    def regenerable(self, i: Identifier) -> bool:
        return self.policy.regenerable(
            i.kind, i.regenerable, tool=i.source.tool_name, command=i.source.command
        )

    def __call__(self, identifiers: Sequence[Identifier], before: Snapshot) -> Sequence[CoreObligation]:
        p = self.policy
        out: list[CoreObligation] = []
        ids = [i for i in identifiers if self._counts(i)]

        if p.obligation_default == "non_regenerable":
            groups: dict[tuple[int, str | None], list[Identifier]] = {}
            for i in ids:
                if i.source.origin != "tool_def" and not self.regenerable(i):
                    groups.setdefault((i.source.message_index, i.source.tool_call_id), []).append(i)
            for (_, _), grp in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                out.append(
                    CoreObligation("keep_bindings", SourceRef.of(grp[0].source), tuple(dict.fromkeys(i.norm for i in grp)))
                )

        if p.obligations:
            # the history's calls are read only for a rule that binds one of these
            # identifiers (an edit of the last turn asks about a few values only)
            calls_memo: list[dict[str, tuple[int, str | None, str | None]]] = []

            def calls() -> dict[str, tuple[int, str | None, str | None]]:
                if not calls_memo:
                    calls_memo.append(_call_info(before))
                return calls_memo[0]

            for rule in p.obligations:
                bound = [i for i in ids if i.source.origin == "tool_result" and i.kind in rule.binds]
                if not bound:
                    continue
                closed_at = -1
                if rule.closed_by is not None:
                    for idx, m in enumerate(before.messages):
                        for part in m.tool_calls:
                            cmd = _command_of(part.tool_name, part.text)
                            if rule.closed_by.matches(part.tool_name, cmd, None):
                                closed_at = max(closed_at, idx)
                by_result: dict[tuple[int, str | None], list[Identifier]] = {}
                for i in bound:
                    s = i.source
                    if s.message_index <= closed_at:
                        continue
                    tool, command = s.tool_name, s.command
                    if (tool is None or command is None) and s.tool_call_id in calls():
                        _, tool, command = calls()[s.tool_call_id]
                    result_text = before.messages[s.message_index].text if 0 <= s.message_index < len(before.messages) else ""
                    if rule.opened_by.matches(tool, command, result_text):
                        by_result.setdefault((s.message_index, s.tool_call_id), []).append(i)
                for _, grp in sorted(by_result.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                    out.append(
                        CoreObligation(rule.name, SourceRef.of(grp[0].source), tuple(dict.fromkeys(i.norm for i in grp)))
                    )

        if p.plan_tools:
            plan_names = {t.lower() for t in p.plan_tools}
            latest: int | None = None
            for i in ids:
                if i.source.origin == "tool_call" and (i.source.tool_name or "").lower() in plan_names:
                    latest = max(latest or -1, i.source.message_index)
            if latest is not None:
                grp = [i for i in ids if i.source.origin == "tool_call" and i.source.message_index == latest and not i.sensitive]
                if grp:
                    out.append(CoreObligation("plan_items", SourceRef.of(grp[0].source), tuple(dict.fromkeys(i.norm for i in grp))))
        return tuple(out)
