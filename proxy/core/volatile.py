"""Per-request parts of a system prompt that carry no identity.

Some clients put request metadata into the system prompt itself: Claude Code's first
system block is a billing line ``x-anthropic-billing-header: cc_version=2.1.332.fa7;
cc_entrypoint=sdk-cli;`` whose suffix changes from request to request (it changed across
every compaction observed). Such a line is metadata in header form (``x-<…>-header:``),
not instructions, so it must not make two requests of one conversation look like two
conversations (content matching keys on the system prompt), nor count as a system prompt
rewrite. :func:`stable_system` is the system prompt with those lines removed; conversation
matching (its hash) and the transition's ``system_changed`` use it. Pure.
"""

from __future__ import annotations

import re

__all__ = ["stable_system"]

#: A whole line of header-shaped request metadata: ``x-<vendor>-…-header: …``.
_HEADER_LINE = re.compile(r"^x-[a-z0-9]+(?:-[a-z0-9]+)*-header:[^\n]*(?:\n|$)", re.IGNORECASE | re.MULTILINE)


def stable_system(system: str) -> str:
    """``system`` without its header-shaped metadata lines (unchanged when it has none)."""
    if "-header:" not in system:
        return system
    return _HEADER_LINE.sub("", system)
