"""The three signals of DESIGN §3, computed for one transition.

1. :class:`DensitySignal` — binding density collapse: the share of distinct identifiers
   of the lost region that survive vs the share of its prose tokens that the replacement
   (summary, placeholders) carries.
2. :class:`ObligationSignal` — obligation–binding asymmetry: obligations open vs
   obligations whose bindings all survive. Obligations come from a pluggable
   :class:`ObligationRule`; the default (:func:`default_obligations`) says every
   identifier its provenance made non-regenerable stays required,
   one obligation per message part. Policies refine this later (opened by a tool that binds
   some kinds, closed by one that consumes them, plan items …).
3. :class:`NextActionSignal` — what the tripwire needs to judge the first action after
   the compaction: the dropped kinds, the values it probably needs, and every norm seen.
   Checking the action itself happens on the response (``interventions.tripwire``).

Pure functions; the token counter is injected (default: tiktoken ``cl100k_base`` via
:mod:`proxy.tokenizer`, or a word count when that is unavailable — both deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .diff import IdentifierDiff, SourceRef
from .identifiers.model import Identifier
from .messages import Snapshot

TokenCounter = Callable[[str], int]

#: Density collapses when identifier retention < COLLAPSE_FACTOR × prose retention.
COLLAPSE_FACTOR = 0.5

_WORDS = re.compile(r"\w+|[^\w\s]")


def count_words(text: str) -> int:
    """Cheap deterministic stand-in for a tokenizer: words and punctuation marks."""
    return len(_WORDS.findall(text))


_COUNTER: list[tuple[str, TokenCounter]] = []


def default_token_counter() -> tuple[str, TokenCounter]:
    """``("cl100k_base", count)`` when tiktoken works offline, else ``("words", count_words)``.
    Resolved once per process."""
    if not _COUNTER:
        try:
            from proxy.tokenizer import get_encoding

            enc = get_encoding("cl100k_base")

            def count(text: str) -> int:
                return len(enc.encode(text, disallowed_special=()))

            _COUNTER.append(("cl100k_base", count))
        except Exception:  # noqa: BLE001  # pragma: no cover - any tokenizer failure: fall back
            _COUNTER.append(("words", count_words))
    return _COUNTER[0]


# --------------------------------------------------------------------------- 1. density


@dataclass(frozen=True, slots=True)
class DensitySignal:
    identifiers_lost: int
    identifiers_retained: int
    identifier_retention: float
    prose_tokens_lost: int
    prose_tokens_replacing: int
    prose_retention: float
    collapse: bool
    token_counter: str

    def to_json(self) -> dict[str, object]:
        return {
            "identifiers_lost": self.identifiers_lost,
            "identifiers_retained": self.identifiers_retained,
            "identifier_retention": round(self.identifier_retention, 4),
            "prose_tokens_lost": self.prose_tokens_lost,
            "prose_tokens_replacing": self.prose_tokens_replacing,
            "prose_retention": round(self.prose_retention, 4),
            "collapse": self.collapse,
            "token_counter": self.token_counter,
        }


def strip_identifiers(text: str, values: Iterable[str]) -> str:
    """The prose of *text*: every identifier value removed (longest first)."""
    for v in sorted(set(values), key=len, reverse=True):
        if v:
            text = text.replace(v, " ")
    return text


def density_signal(
    diff: IdentifierDiff,
    lost_text: str,
    replacing_text: str,
    identifier_values: Iterable[str],
    counter: tuple[str, TokenCounter] | None = None,
) -> DensitySignal:
    """``lost_text``: the old content that went away; ``replacing_text``: what took its
    place (summary, placeholders, new versions of edited messages)."""
    name, count = counter or default_token_counter()
    values = list(identifier_values)
    lost_tokens = count(strip_identifiers(lost_text, values)) if lost_text else 0
    repl_tokens = count(strip_identifiers(replacing_text, values)) if replacing_text else 0
    id_ret = diff.survived / diff.considered if diff.considered else 1.0
    prose_ret = min(1.0, repl_tokens / lost_tokens) if lost_tokens else 1.0
    collapse = diff.considered > 0 and id_ret < COLLAPSE_FACTOR * prose_ret
    return DensitySignal(
        identifiers_lost=diff.considered,
        identifiers_retained=diff.survived,
        identifier_retention=id_ret,
        prose_tokens_lost=lost_tokens,
        prose_tokens_replacing=repl_tokens,
        prose_retention=prose_ret,
        collapse=collapse,
        token_counter=name,
    )


# --------------------------------------------------------------------------- 2. obligations


@dataclass(frozen=True, slots=True)
class Obligation:
    """Something the agent must still be able to do, with the bindings it needs.

    ``kind`` names it (``keep_bindings`` by default; policies use ``rollback``,
    ``complete_upload`` …); ``opened_by`` is the step that created it; ``bindings`` are the
    normalised values (``Identifier.norm``) it needs verbatim.
    """

    kind: str
    opened_by: SourceRef
    bindings: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "opened_by": self.opened_by.describe(), "bindings": len(self.bindings)}


class ObligationRule(Protocol):
    """Decides which obligations are open in the history before the transition.

    Called only when the transition lost something; ``identifiers`` are all identifiers
    of ``before`` (the whole previous history), with their regenerability resolved.
    """

    def __call__(self, identifiers: Sequence[Identifier], before: Snapshot) -> Sequence[Obligation]: ...


def default_obligations(identifiers: Sequence[Identifier], before: Snapshot) -> tuple[Obligation, ...]:
    """Every non-regenerable identifier stays required, whatever role carried it (its
    provenance decided: PRINCIPLES §2 — a tool result, pasted user text, a call's
    arguments alike); one ``keep_bindings`` obligation per message part. Secrets count
    too (a required secret makes the verdict destructive); callers never show them."""
    groups: dict[tuple[int, str | None], list[Identifier]] = {}
    for i in identifiers:
        if i.regenerable or i.source.origin == "tool_def":
            continue
        groups.setdefault((i.source.message_index, i.source.tool_call_id), []).append(i)
    out = []
    for (_idx, _cid), ids in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        out.append(
            Obligation(
                kind="keep_bindings",
                opened_by=SourceRef.of(ids[0].source),
                bindings=tuple(dict.fromkeys(i.norm for i in ids)),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ObligationSignal:
    obligations_open: int
    #: Obligations whose bindings all survive verbatim (DESIGN: bindings_resolved_after).
    bindings_resolved_after: int
    bindings_required: int
    bindings_surviving: int
    asymmetry: bool

    def to_json(self) -> dict[str, object]:
        return {
            "obligations_open": self.obligations_open,
            "bindings_resolved_after": self.bindings_resolved_after,
            "bindings_required": self.bindings_required,
            "bindings_surviving": self.bindings_surviving,
            "asymmetry": self.asymmetry,
        }


def required_norms(obligations: Iterable[Obligation]) -> frozenset[str]:
    return frozenset(n for o in obligations for n in o.bindings)


def obligation_signal(obligations: Sequence[Obligation], missing_norms: frozenset[str]) -> ObligationSignal:
    """``missing_norms``: norms of the lost identifiers that were dropped or altered."""
    required = required_norms(obligations)
    resolved = sum(1 for o in obligations if not (set(o.bindings) & missing_norms))
    return ObligationSignal(
        obligations_open=len(obligations),
        bindings_resolved_after=resolved,
        bindings_required=len(required),
        bindings_surviving=len(required - missing_norms),
        asymmetry=resolved < len(obligations),
    )


# --------------------------------------------------------------------------- 3. next action


@dataclass(frozen=True, slots=True)
class NextActionSignal:
    """Input for the tripwire on the next response. ``checked`` stays False here: the
    check runs on the response, after this analysis."""

    dropped_kinds: frozenset[str]
    #: Non-sensitive dropped/altered values per kind (what the model probably needs).
    expected_by_kind: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Every identifier norm seen before and after the transition (not serialised).
    known_norms: frozenset[str] = frozenset()
    checked: bool = False
    hallucinated: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "dropped_kinds": sorted(self.dropped_kinds),
            "checked": self.checked,
            "hallucinated": list(self.hallucinated),
        }


# --------------------------------------------------------------------------- all three


@dataclass(frozen=True, slots=True)
class Signals:
    density: DensitySignal
    obligations: ObligationSignal
    next_action: NextActionSignal

    def to_json(self) -> dict[str, object]:
        return {
            "binding_density": self.density.to_json(),
            "obligations": self.obligations.to_json(),
            "next_action": self.next_action.to_json(),
        }


#: :func:`quiet_signals` by counter name: the signals are immutable, every append of
#: every request shares one (built once instead of four objects per request).
_QUIET: dict[str, Signals] = {}


def quiet_signals(counter_name: str = "none") -> Signals:
    """The signals of a transition that lost nothing (append, reset): one shared,
    immutable value per ``counter_name``."""
    sig = _QUIET.get(counter_name)
    if sig is None:
        sig = Signals(
            density=DensitySignal(0, 0, 1.0, 0, 0, 1.0, False, counter_name),
            obligations=ObligationSignal(0, 0, 0, 0, False),
            next_action=NextActionSignal(frozenset()),
        )
        if len(_QUIET) < 64:  # counter names are a handful (tokenizer names)
            _QUIET[counter_name] = sig
    return sig
