"""The identifier diff: which identifiers of the lost region the model can still see.

Input: the identifiers found in the lost region (old messages gone, or the old side of
masked / edited ones) and everything the model will see after the transition (the new
snapshot's identifiers and its visible text: system prompt, messages, tool definitions).

Survival, per distinct lost identifier (one entry per normalised value):

1. **survived** — its ``norm`` is among the new identifiers' norms, or its value occurs
   verbatim in the new text on token boundaries (hex case folded), or it is a short hex
   prefix (short SHA) of a longer hex token that does occur (a prefix alias);
2. **altered** — not verbatim, but a damaged form is there: a hex token that is a
   truncation of it (a full SHA cut to 7 characters), or a relative path that is a suffix
   of an absolute one. Altered never counts as surviving;
3. **dropped** — otherwise.

Sensitive identifiers (secrets) are never shown in clear (``value`` is redacted); whether
one is required is its provenance's decision, like any value's. A composite value
(``group topic partition offset``, an image pinned by digest) survives by its
identifying token. Pure; the cost is one lowercase copy of the new text plus a
substring search per lost identifier.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from .identifiers.model import SYSTEM_INDEX, TOOLS_INDEX, Identifier, Source, redact
from .identifiers.normalize import (
    HEX_KINDS,
    PREFIX_KINDS,
    find_altered_in_text,
    identifying_token,
    relation,
)
from .redaction import redact_secrets

_HEX = re.compile(r"^[0-9a-fA-F]+$")
_ALNUM = re.compile(r"[A-Za-z0-9]")


@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where a lost identifier came from, for people and for events."""

    message_index: int
    role: str
    origin: str
    tool_name: str | None = None
    command: str | None = None
    mutating: bool | None = None

    @classmethod
    def of(cls, s: Source) -> SourceRef:
        """The reference shown for ``s``: its command with every secret redacted (an
        event, a note to the model, the state at rest all quote it)."""
        command = _shown_command(s.command) if s.command else s.command
        return cls(s.message_index, s.role, s.origin, s.tool_name, command, s.mutating)

    def describe(self) -> str:
        """E.g. ``tool result of bash `alembic upgrade head` at message 4``."""
        if self.message_index == SYSTEM_INDEX:
            where = "the system prompt"
        elif self.message_index == TOOLS_INDEX:
            where = "the tool definitions"
        else:
            where = f"message {self.message_index}"
        if self.origin in ("tool_result", "tool_call"):
            what = "tool result" if self.origin == "tool_result" else "tool call"
            tool = self.tool_name or "a tool"
            cmd = f" `{_short(self.command)}`" if self.command else ""
            return f"{what} of {tool}{cmd} at {where}"
        if self.message_index in (SYSTEM_INDEX, TOOLS_INDEX):
            return where
        return f"{self.origin} text at {where}"

    def to_json(self) -> dict[str, object]:
        return {
            "message_index": self.message_index,
            "role": self.role,
            "origin": self.origin,
            "tool": self.tool_name,
            "command": self.command,
            "mutating": self.mutating,
        }


@lru_cache(maxsize=4096)
def _shown_command(command: str) -> str:
    return redact_secrets(command)


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


@dataclass(frozen=True, slots=True)
class LostBinding:
    """One distinct identifier of the lost region that did not survive verbatim.

    ``value`` is safe to show: redacted when ``sensitive``. ``required`` is set by the
    analysis (an open obligation needs it); ``altered_to`` is the damaged form the model
    still sees when ``status == "altered"``.
    """

    value: str
    norm: str
    kind: str
    regenerable: bool
    sensitive: bool
    source: SourceRef
    detector: str
    status: Literal["dropped", "altered"] = "dropped"
    altered_to: str | None = None
    required: bool = False
    #: Every message index of the lost region where the value appeared.
    seen_at: tuple[int, ...] = ()
    #: The rule of PRINCIPLES.md that decided whether it is required (``2a`` minted,
    #: ``2b`` prior state, ``2c`` written into a change; ``3a``–``3d`` regenerable).
    rule: str = ""
    #: The line it came from (one line, secrets redacted): what the value *is* — the
    #: ``from`` of ``Running upgrade 1a2b… -> 4f9a…`` — when a kind has several.
    context: str = ""

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "value": self.value,
            "kind": self.kind,
            "regenerable": self.regenerable,
            "required": self.required,
            "sensitive": self.sensitive,
            "status": self.status,
            "rule": self.rule,
            "source": self.source.to_json(),
            "where": self.source.describe(),
        }
        if self.context:
            out["line"] = self.context
        if self.altered_to is not None:
            out["altered_to"] = self.altered_to
        return out


@dataclass(frozen=True, slots=True)
class IdentifierDiff:
    dropped: tuple[LostBinding, ...]
    altered: tuple[LostBinding, ...]
    #: Distinct lost identifiers that survive verbatim (or as a prefix alias).
    survived: int
    #: Distinct identifiers in the lost region (``survived + len(dropped) + len(altered)``).
    considered: int


# --------------------------------------------------------------------------- survival


class VisibleText:
    """The text the model will see, prepared once for many lookups."""

    def __init__(self, text: str, identifiers: Iterable[Identifier] = ()) -> None:
        ids = list(identifiers)
        self.text = text
        self._lower: str | None = None
        self.norms: frozenset[tuple[str, str]] = frozenset(i.key for i in ids)
        self.plain_norms: frozenset[str] = frozenset(n for _, n in self.norms)
        self._by_kind: dict[str, list[Identifier]] = {}
        for i in ids:
            if not i.sensitive:
                self._by_kind.setdefault(i.kind, []).append(i)
        self._hex_tokens: list[str] | None = None
        self._sorted: dict[str, list[str]] = {}
        self._path_tails: dict[str, str] | None = None
        self._path_norms: dict[str, str] | None = None
        self._numbers: list[str] | None = None

    @property
    def lower(self) -> str:
        """The text in lower case (made when a case-insensitive look-up first needs it)."""
        if self._lower is None:
            self._lower = self.text.lower()
        return self._lower

    def of_kind(self, kind: str) -> list[Identifier]:
        """Visible (non-sensitive) identifiers of one kind."""
        return self._by_kind.get(kind, [])

    def sorted_norms(self, kind: str) -> list[str]:
        """Norms of one kind, sorted (for prefix searches with :mod:`bisect`)."""
        if kind not in self._sorted:
            self._sorted[kind] = sorted({i.norm for i in self.of_kind(kind)})
        return self._sorted[kind]

    def path_norms(self) -> dict[str, str]:
        """Visible path norm → its verbatim value."""
        if self._path_norms is None:
            self._path_norms = {i.norm: i.value for i in self.of_kind("path")}
        return self._path_norms

    def path_tails(self) -> dict[str, str]:
        """Every component-boundary tail of a visible absolute path (``a/b.py`` and
        ``b.py`` for ``/srv/a/b.py``) → that path's value."""
        if self._path_tails is None:
            tails: dict[str, str] = {}
            for norm, value in self.path_norms().items():
                if norm.startswith("/"):
                    comps = norm.strip("/").split("/")
                    for k in range(1, len(comps)):
                        tails.setdefault("/".join(comps[k:]), value)
            self._path_tails = tails
        return self._path_tails

    def hex_tokens(self) -> list[str]:
        if self._hex_tokens is None:
            self._hex_tokens = re.findall(r"(?<![0-9a-z])[0-9a-f]{7,64}(?![0-9a-z])", self.lower)
        return self._hex_tokens

    def contains(self, value: str, case_insensitive: bool) -> bool:
        """``value`` occurs verbatim with no letter or digit glued on either side."""
        hay = self.lower if case_insensitive else self.text
        needle = value.lower() if case_insensitive else value
        if not needle:
            return False
        start = 0
        while True:
            i = hay.find(needle, start)
            if i < 0:
                return False
            j = i + len(needle)
            before_ok = i == 0 or not _ALNUM.match(hay[i - 1]) or not _ALNUM.match(needle[0])
            after_ok = j == len(hay) or not _ALNUM.match(hay[j]) or not _ALNUM.match(needle[-1])
            if before_ok and after_ok:
                return True
            start = i + 1

    def contains_token(self, token: str, qualifier: str | None = None) -> bool:
        """The identifying token of a composite value is visible (case folded, on token
        boundaries); a short one (under 6 characters) only with its qualifier shortly
        before it (``partition 3 … offset 12``), so that a bare small number is not
        taken for it."""
        if len(token) >= 6 or qualifier is None:
            return self.contains(token, case_insensitive=True) if len(token) >= 4 else False
        pat = re.compile(r"(?<![0-9A-Za-z])" + re.escape(qualifier) + r"(?![0-9A-Za-z])[^\n]{0,40}?(?<![0-9A-Za-z])" + re.escape(token) + r"(?![0-9A-Za-z])")
        return pat.search(self.text) is not None

    def numbers(self) -> list[str]:
        """Every run of 4+ digits of the text (for damaged copies of numeric tokens)."""
        if self._numbers is None:
            self._numbers = re.findall(r"(?<![0-9A-Za-z])[0-9]{4,}(?![0-9A-Za-z])", self.text)
        return self._numbers

    def prefix_alias(self, value: str) -> bool:
        """A short hex id that is the prefix of a longer hex token that is visible."""
        v = value.lower()
        if not (7 <= len(v) < 64 and _HEX.match(v)):
            return False
        return re.search(r"(?<![0-9a-z])" + re.escape(v) + r"[0-9a-f]+(?![0-9a-z])", self.lower) is not None


#: Kinds whose alterations are not visible from lengths alone (segment swaps, other offsets).
_PAIRWISE_KINDS = frozenset({"uuid", "mysql_gtid", "kafka_offset", "git_sha"})


def _may_relate(a: str, o: str, kind: str) -> bool:
    """Cheap pre-filter for :func:`relation`: only pairs where one norm is a prefix or
    suffix of the other (ellipsis removed) or of similar length can be an alias or an
    alteration; everything else is unrelated without running the edit distance."""
    if kind in _PAIRWISE_KINDS:
        return True
    oc = o.replace("…", "").replace("...", "")
    if abs(len(a) - len(oc)) <= max(1, max(len(a), len(oc)) // 8):
        return True
    return a.startswith(oc) or a.endswith(oc) or oc.startswith(a) or oc.endswith(a)


def _is_hexish(ident: Identifier) -> bool:
    return ident.kind in HEX_KINDS or bool(_HEX.match(ident.value)) or ident.norm == ident.value.lower()


def survives(ident: Identifier, visible: VisibleText) -> bool:
    """Whether the model can still see ``ident`` verbatim or as an alias (a short SHA of a
    visible full one, a relative path that a visible absolute path ends with)."""
    if ident.norm in visible.plain_norms:
        return True
    key = None if ident.sensitive else identifying_token(ident.kind, ident.norm)
    if key is not None and visible.contains_token(*key):
        return True
    if ident.sensitive:
        return visible.contains(ident.value, case_insensitive=False)
    if visible.contains(ident.value, case_insensitive=_is_hexish(ident)):
        return True
    if visible.prefix_alias(ident.value):
        return True
    # An alias counts only when the visible copy is at least as specific: a full SHA
    # whose 7-character abbreviation alone is visible was truncated (``altered``).
    kind, norm = ident.kind, ident.norm
    if kind == "path":
        return not norm.startswith("/") and norm in visible.path_tails()
    if kind in PREFIX_KINDS or kind == "django_migration":
        names = visible.sorted_norms(kind)
        i = bisect_left(names, norm)
        while i < len(names) and names[i].startswith(norm):
            if len(names[i]) > len(norm) and relation(norm, names[i], kind) == "alias":
                return True
            i += 1
    return False


_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/@+=~-")


def truncated_in_text(value: str, visible: VisibleText, min_len: int = 12) -> str | None:
    """A long value cut short: the visible text has a token that is a proper prefix of
    ``value`` (at least ``min_len`` and a third of it), possibly followed by an ellipsis.
    One substring scan for the first ``min_len`` characters, then per-hit checks."""
    if len(value) < 16:
        return None
    head = value[:min_len]
    floor = max(min_len, len(value) // 3)
    text = visible.text
    best: str | None = None
    i = text.find(head)
    while i >= 0:
        if i == 0 or text[i - 1] not in _TOKEN_CHARS:
            k = min_len
            while k < len(value) and i + k < len(text) and text[i + k] == value[k]:
                k += 1
            nxt = text[i + k] if i + k < len(text) else " "
            after = text[i + k + 1] if i + k + 1 < len(text) else " "
            ends = (
                nxt not in _TOKEN_CHARS
                or text.startswith(("…", "..."), i + k)
                or (nxt in ".,:;" and after not in _TOKEN_CHARS)  # sentence punctuation
            )
            if floor <= k < len(value) and ends and (best is None or k > len(best)):
                best = text[i : i + k]
        i = text.find(head, i + 1)
    return best


def altered_form(ident: Identifier, visible: VisibleText) -> str | None:
    """The damaged form of ``ident`` the model sees instead, if any (never for secrets):
    a truncated or elided SHA, an absolute path made relative, a one-character typo."""
    if ident.sensitive:
        return None
    key = identifying_token(ident.kind, ident.norm)
    if key is not None:
        dmg = _damaged_token(key[0], visible)
        if dmg is not None:
            return dmg
    if ident.kind == "path":
        if ident.norm.startswith("/"):  # made relative: a visible path is one of its tails
            rel = visible.path_norms()
            comps = ident.norm.strip("/").split("/")
            for k in range(1, len(comps)):
                tail = "/".join(comps[k:])
                if tail in rel and ("/" in tail or "." in tail):
                    return rel[tail]
    else:
        for other in visible.of_kind(ident.kind):
            if _may_relate(ident.norm, other.norm, ident.kind) and relation(ident.norm, other.norm, ident.kind) == "altered":
                return other.value
    frag = find_altered_in_text(ident.norm, ident.kind, visible.text)
    if frag is not None:
        return frag
    v = ident.value
    cut = truncated_in_text(v, visible)
    if cut is not None:
        return cut
    if _HEX.match(v) and len(v) >= 12:  # a truncated hex id detected under another kind
        lv = v.lower()
        best = None
        for tok in visible.hex_tokens():
            if tok != lv and len(tok) >= 7 and lv.startswith(tok) and (best is None or len(tok) > len(best)):
                best = tok
        if best is not None:
            return best
    return None


def _damaged_token(token: str, visible: VisibleText) -> str | None:
    """A visible copy of a composite's identifying token that is cut short or has one
    character changed (PRINCIPLES §4: altered, not kept)."""
    if token.isdigit():
        for n in visible.numbers():
            if n == token:
                continue
            if len(n) < len(token) and token.startswith(n) and len(n) >= max(4, len(token) - 3):
                return n
            if len(n) == len(token) and sum(a != b for a, b in zip(n, token, strict=True)) == 1:
                return n
        return None
    body = token.split(":", 1)[-1]
    frag = find_altered_in_text(body, "hex_digest", visible.text) if _HEX.match(body) else None
    return frag


# --------------------------------------------------------------------------- diff


def _rank(i: Identifier) -> tuple[int, int, int]:
    """Pick the representative occurrence: non-regenerable tool results first."""
    return (0 if not i.regenerable else 1, 0 if i.source.origin == "tool_result" else 1, i.source.message_index)


def group_by_norm(identifiers: Iterable[Identifier]) -> dict[tuple[str, str], list[Identifier]]:
    groups: dict[tuple[str, str], list[Identifier]] = {}
    for i in identifiers:
        groups.setdefault(i.key, []).append(i)
    return groups


def _merge_kinds(groups: dict[tuple[str, str], list[Identifier]]) -> dict[str, list[Identifier]]:
    """One entry per normalised value even when two detectors gave it different kinds."""
    by_norm: dict[str, list[Identifier]] = {}
    for (_, norm), occ in groups.items():
        by_norm.setdefault(norm, []).extend(occ)
    return by_norm


def diff_identifiers(lost: Sequence[Identifier], visible: VisibleText) -> IdentifierDiff:
    """Diff the lost region's identifiers against what stays visible (see module doc).

    An identifier is non-regenerable if *any* of its lost occurrences is: a value that
    was once returned by a mutating call stays a binding even if later listed again.
    """
    dropped: list[LostBinding] = []
    altered: list[LostBinding] = []
    survived = 0
    by_norm = _merge_kinds(group_by_norm(lost))
    for occ in by_norm.values():
        occ.sort(key=_rank)
        rep = occ[0]
        if any(survives(i, visible) for i in occ):
            survived += 1
            continue
        regenerable = all(i.regenerable for i in occ)
        sensitive = any(i.sensitive for i in occ)
        to = altered_form(rep, visible)
        entry = LostBinding(
            value=redact(rep.value) if sensitive else rep.value,
            norm=rep.norm,
            kind=rep.kind,
            regenerable=regenerable,
            sensitive=sensitive,
            source=SourceRef.of(rep.source),
            detector=rep.detector,
            status="altered" if to is not None else "dropped",
            altered_to=to,
            seen_at=tuple(sorted({i.source.message_index for i in occ})),
            rule=next((i.why for i in occ if not i.regenerable and i.why), rep.why),
            context=rep.context,
        )
        (altered if to is not None else dropped).append(entry)
    order = lambda b: (b.regenerable, b.source.message_index, b.value)
    return IdentifierDiff(
        dropped=tuple(sorted(dropped, key=order)),
        altered=tuple(sorted(altered, key=order)),
        survived=survived,
        considered=len(by_norm),
    )
