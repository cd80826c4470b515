"""``compaction-gate check BEFORE.json AFTER.json`` — offline audit of one transition.

Each file is an OpenAI chat body, an Anthropic messages body, a Responses body or a bare
list of messages. Prints the analysis as JSON (default) or as text for a person, and
exits 0 when the transition is safe, 3 when it is destructive, 2 on bad input or usage
(with the reason on stderr). DESIGN §6.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .core.analysis import Analysis, analyze
from .core.dialects import from_any
from .core.diff import LostBinding
from .core.markers import Markers, MarkersError, default_markers, load_markers
from .core.messages import MessageFormatError, Snapshot
from .core.signals import ObligationRule, default_obligations

EXIT_SAFE = 0
EXIT_USAGE = 2
EXIT_DESTRUCTIVE = 3

PROG = "compaction-gate check"


class InputError(Exception):
    """Bad input or usage: reported on stderr, exit code 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Offline audit of one history transition: is every binding a later step needs still "
        "visible verbatim after the compaction? Exit 0 safe, 3 destructive, 2 bad input."
    )
    parser.add_argument("before", metavar="BEFORE.json", help="the history before (chat/messages body or bare list)")
    parser.add_argument("after", metavar="AFTER.json", help="the request after the transition (same formats)")
    parser.add_argument(
        "--policy",
        metavar="NAME|FILE",
        default=None,
        help="policy preset name (default, strict, audit, infra) or policy file; its detector rules, "
        "regenerability rules and obligations decide which bindings are required. Without it the "
        "built-in detectors and the default rule apply: every non-regenerable identifier a tool "
        "result produced is required. Its action (warn, reinject, reject …) does not matter here.",
    )
    parser.add_argument("--format", choices=("json", "text"), default="json", help="output format (default: json)")
    parser.add_argument(
        "--markers",
        metavar="FILE",
        default=None,
        help="agent marker presets (default: the shipped policies/agents.yaml); markers only name "
        "the agent, detection never depends on them",
    )


# --------------------------------------------------------------------------- loading


def load_snapshot(path: str) -> Snapshot:
    """Read and normalise one input file. Raises :class:`InputError`."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    try:
        return from_any(obj)
    except MessageFormatError as exc:
        raise InputError(f"{path}: not a chat/messages body or a list of messages: {exc}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        raise InputError(f"{path}: malformed messages: {exc}") from None


def _policy_setup(
    name: str | None, markers: Markers, markers_given: bool = False
) -> tuple[ObligationRule, object | None, Markers]:
    """Obligation rule, identifier catalogue and markers for ``--policy`` (built-in
    defaults without it). Raises :class:`InputError` when the policy cannot be loaded."""
    if name is None:
        return default_obligations, None, markers
    try:
        from .policy import ConfigError, load_policy
        from .policy.obligations import PolicyObligations
    except ImportError as exc:  # pragma: no cover - the policy layer ships with the package
        raise InputError(f"--policy is not available in this build: {exc}") from None
    try:
        policy = load_policy(name)
    except ConfigError as exc:
        raise InputError(f"--policy {name}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--policy {name}: {exc}") from None
    catalog: object | None = None
    if policy.detector_rules or policy.disabled or policy.allowlist:
        from .policy.detectors import policy_catalog

        catalog = policy_catalog(policy)
    if not markers_given and getattr(policy, "markers", "agents") != "agents":
        from .policy import markers_path

        m = str(policy.markers)
        try:
            markers = load_markers(markers_path(m))
        except (OSError, MarkersError) as exc:
            raise InputError(f"--policy {name}: markers {m!r}: {exc}") from None
    return PolicyObligations(policy), catalog, markers


# --------------------------------------------------------------------------- text output

_WHY: dict[str, str] = {
    "alembic_revision": "the revision to downgrade to (or the one that was applied)",
    "django_migration": "the migration to roll back to",
    "flyway_version": "the schema version to undo to",
    "upload_id": "needed to resume, complete or abort the multipart upload",
    "transaction_id": "needed to commit, roll back or look up the transaction",
    "lock_id": "needed to release the lock",
    "session_id": "needed to resume the session",
    "git_sha": "the commit to reset or restore to",
    "oci_digest": "the exact image to roll back to",
    "oci_image": "the exact image to roll back to",
    "aws_arn": "the resource created or changed; needed to restore, inspect or delete it",
    "aws_resource_id": "the resource created or changed; needed to restore, inspect or delete it",
    "s3_uri": "where the data was written",
    "stripe_id": "the payment object acted on; needed to check or reverse it without acting twice",
    "kafka_offset": "the offset to move the consumer group back to",
    "postgres_lsn": "the WAL position to recover or compare to",
    "mysql_gtid": "the replication position to recover to",
    "terraform_address": "the resource terraform changed",
    "k8s_resource": "the object the change applied to",
    "path": "the file as the change named or created it",
    "uuid": "the object the change created or referenced",
}


#: The rules of corpus/PRINCIPLES.md §2 as the text output states them.
_RULES: dict[str, str] = {
    "2a": "minted by a step that changed something: running it again would not give it back",
    "2b": "the state before a later change (read-before-write): the only record of the prior state",
    "2c": "written by the agent into a call that changed something, from no other source",
    "2*": "re-injected by the gate after an earlier compaction: judged required while its source was visible",
}


def _why(b: LostBinding) -> str:
    base = _WHY.get(b.kind, "a value a later step needs verbatim")
    if b.rule in _RULES:
        return f"{base}; {_RULES[b.rule]} (PRINCIPLES §{b.rule})"
    if b.source.mutating is False:
        how = "read before a later change overwrote it (read-before-write): the only record of the prior state"
    elif b.source.mutating:
        how = "returned by a command that changed something: running it again would not give it back"
    else:
        how = "not regenerable without side effects"
    return f"{base}; {how}"


def _fmt_binding(b: LostBinding, out: list[str]) -> None:
    shown = b.value if b.altered_to is None else f"{b.value}  (now only as `{b.altered_to}`)"
    out.append(f"  - {shown}   [{b.kind}]")
    out.append(f"      from: {b.source.describe()}")
    if b.sensitive:
        out.append("      secret: never shown in clear nor re-injected; the proxy refuses or spills instead")
    else:
        out.append(f"      why:  {_why(b)}")


def render_text(a: Analysis, markers: Markers) -> str:
    """The analysis for a person: verdict, what is missing and from where, signals, advice."""
    agent = markers.display_name(a.agent) if a.agent else None
    what = a.transition.kind + (f" ({agent})" if agent else "")
    required = a.required_missing
    out: list[str] = []
    if a.destructive:
        out.append(f"DESTRUCTIVE: {what} lost {len(required)} required binding(s).")
    else:
        why = "nothing was lost" if not a.lost_region else "every required binding survived verbatim"
        out.append(f"SAFE: {what}; {why}.")
    if a.transition.reason:
        out.append(f"  transition: {a.transition.reason}")
    dropped = [b for b in a.dropped if b.required]
    altered = [b for b in a.altered if b.required]
    if dropped:
        out.append("")
        out.append("Dropped (required, not visible anywhere after the transition):")
        for b in dropped:
            _fmt_binding(b, out)
    if altered:
        out.append("")
        out.append("Altered (only a damaged copy survives, which does not count):")
        for b in altered:
            _fmt_binding(b, out)
    other = [b for b in a.dropped + a.altered if not b.required]
    if other:
        vals = ", ".join(b.value for b in other[:6]) + (" …" if len(other) > 6 else "")
        out.append("")
        out.append(f"Also gone, not required (regenerable by PRINCIPLES §3): {len(other)} — {vals}")
    if a.lost_region:
        s = a.signals
        d, o = s.density, s.obligations
        out.append("")
        out.append("Signals:")
        out.append(
            f"  binding density: {d.identifiers_retained} of {d.identifiers_lost} identifiers of the lost region kept "
            f"({d.identifier_retention:.0%}) vs {d.prose_retention:.0%} of its prose"
            + ("  -> collapse" if d.collapse else "")
        )
        out.append(
            f"  obligations: {o.obligations_open} open, {o.bindings_resolved_after} with every binding still visible"
            + ("  -> asymmetry" if o.asymmetry else "")
        )
        if s.next_action.dropped_kinds:
            out.append(
                "  next action: an invented value of kind "
                + ", ".join(sorted(s.next_action.dropped_kinds))
                + " would be a hallucinated binding"
            )
    if a.destructive:
        out.append("")
        out.append(
            "What to do: put the values above back verbatim (in the summary, or as a note right after it), "
            "or keep the messages that carry them. Running through the proxy with the `default` policy "
            "re-injects them automatically; `strict` refuses the request instead."
        )
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- entry points


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the check for parsed ``args``; returns the exit code."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        try:
            markers = load_markers(args.markers) if getattr(args, "markers", None) else default_markers()
        except (OSError, MarkersError) as exc:
            raise InputError(f"--markers: {exc}") from None
        before = load_snapshot(args.before)
        after = load_snapshot(args.after)
        rule, catalog, markers = _policy_setup(
            getattr(args, "policy", None), markers, markers_given=bool(getattr(args, "markers", None))
        )
    except InputError as exc:
        print(f"{PROG}: error: {exc}", file=stderr)
        return EXIT_USAGE
    analysis = analyze(before, after, markers=markers, catalog=catalog, obligation_rule=rule)
    if args.format == "text":
        stdout.write(render_text(analysis, markers))
    else:
        doc: dict[str, Any] = analysis.to_json()
        if getattr(args, "policy", None):
            doc["policy"] = args.policy
        json.dump(doc, stdout, indent=2, ensure_ascii=False)
        stdout.write("\n")
    return EXIT_DESTRUCTIVE if analysis.destructive else EXIT_SAFE


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m proxy.check BEFORE AFTER …`` (same as ``compaction-gate check``)."""
    parser = argparse.ArgumentParser(prog=PROG)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
