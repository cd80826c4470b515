"""Plain data types of the identifier layer: where a value came from and what it is.

Contracts:
- Everything here is frozen and hashable; no I/O.
- ``Identifier.value`` is the verbatim text at ``[start:end]`` of the scanned part text
  (after trailing punctuation/quotes were trimmed by extraction).
- For a *sensitive* identifier (secrets class) ``value`` is the clear secret: it must never
  be logged, stored, shown or re-injected. ``norm`` is a fingerprint (``secret:<hash>``),
  ``context`` has the value replaced by :func:`redact`, and ``repr()`` redacts it too. Use
  :attr:`Identifier.display` for anything a human or a log may see.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "LOCATOR_KINDS",
    "SYSTEM_INDEX",
    "TOOLS_INDEX",
    "Identifier",
    "Origin",
    "Source",
    "fingerprint",
    "redact",
]

Origin = Literal["system", "user", "assistant", "tool_call", "tool_result", "thinking", "tool_def"]

#: ``Source.message_index`` of the system prompt.
SYSTEM_INDEX = -1
#: ``Source.message_index`` of the tool definitions.
TOOLS_INDEX = -2

#: Kinds that *locate* something rather than name an opaque object: they are regenerable
#: when a read-only tool listed them, are exempt from read-before-write, and may contain
#: (nest) more specific identifiers.
LOCATOR_KINDS: frozenset[str] = frozenset({"path", "url", "s3_uri"})


@dataclass(frozen=True, slots=True)
class Source:
    """Where an identifier was seen.

    ``message_index`` is the index in ``Snapshot.messages`` (``-1`` system prompt, ``-2``
    tool definitions). ``origin`` says which part of the message: prose of a role, a tool
    call's arguments, a tool's result, visible thinking, or a tool definition.
    For tool calls and tool results, ``tool_name`` / ``command`` (shell command line of a
    shell-like tool) / ``mutating`` (``None`` = unknown) describe the producing call; a
    tool result inherits them from its call.
    """

    message_index: int
    role: str
    origin: Origin
    tool_name: str | None = None
    command: str | None = None
    mutating: bool | None = None
    part_index: int = 0
    tool_call_id: str | None = None
    #: Resource domains the producing call touches (``git``, ``k8s``, ``terraform``, ``db``,
    #: ``aws:s3`` …), used by the read-before-write rule.
    domains: frozenset[str] = field(default=frozenset())
    #: Message index of the producing tool call (for tool results), else ``None``.
    call_index: int | None = None


def fingerprint(value: str) -> str:
    """Stable, non-reversible fingerprint of a secret (used as its ``norm``)."""
    return "secret:" + hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def redact(value: str) -> str:
    """Display form of a secret: its first 4 characters, an ellipsis, and a short hash.

    Example: ``sk-p…#1f2e3d4c``. Enough to tell two secrets apart, never enough to use one.
    """
    h = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{value[:4]}…#{h}"


@dataclass(frozen=True, slots=True, repr=False)
class Identifier:
    """One opaque identifier found in model-visible text.

    - ``value``: verbatim (``text[start:end] == value``); secret in clear if ``sensitive``.
    - ``norm``: identity for diffs (hex case folded, paths/URLs normalised, composite
      values canonicalised, secrets fingerprinted). Two identifiers denote the same thing
      iff ``(kind, norm)`` are equal (see :mod:`.normalize` for aliases and alterations).
    - ``kind``: what it is (``git_sha``, ``uuid``, ``upload_id`` …); ``detector``: rule id.
    - ``regenerable``: can be fetched again without side effects (see :mod:`.regen`).
    - ``context``: short one-line snippet around the value for display (secrets redacted).
    - ``why``: the rule of PRINCIPLES.md that decided ``regenerable`` (``2a`` minted by a
      state-changing step, ``2b`` prior state of a later change, ``2c`` first written
      into a state-changing call; ``3a``–``3d`` the reasons it is regenerable), set by
      :mod:`.provenance`; empty before it ran.
    """

    value: str
    norm: str
    kind: str
    detector: str
    sensitive: bool
    regenerable: bool
    source: Source
    start: int
    end: int
    context: str
    why: str = ""

    @property
    def display(self) -> str:
        """The value as it may be shown or logged (redacted when sensitive)."""
        return redact(self.value) if self.sensitive else self.value

    @property
    def key(self) -> tuple[str, str]:
        """Diff identity: ``(kind, norm)``."""
        return (self.kind, self.norm)

    def __repr__(self) -> str:
        return (
            f"Identifier(value={self.display!r}, norm={self.norm!r}, kind={self.kind!r}, "
            f"detector={self.detector!r}, sensitive={self.sensitive}, regenerable={self.regenerable}, "
            f"source={self.source!r}, start={self.start}, end={self.end})"
        )
