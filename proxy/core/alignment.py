"""Align two histories by message digest: the verbatim blocks they share and the gaps
between them.

:func:`.transition.classify` calls this only when the request does not extend the
history (the append path compares the common prefix only). The blocks are the common
prefix, the common suffix and what ``difflib`` matches in the changed middle between
them (or, with one message on a side, where the other side has it); the gaps are the
regions between blocks, each with its position, that the classification then reads
message by message. Digests only: no message text is read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

__all__ = ["gaps_between", "matching_blocks"]


def matching_blocks(old: Sequence[str], new: Sequence[str], p: int) -> list[tuple[int, int, int]]:
    """Verbatim matching blocks (old_start, new_start, size), monotonic, prefix included."""
    # Trim the common suffix too, so difflib only sees the changed middle.
    s = 0
    while s < len(old) - p and s < len(new) - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    blocks: list[tuple[int, int, int]] = [(0, 0, p)] if p else []
    mid_old, mid_new = old[p : len(old) - s], new[p : len(new) - s]
    if len(mid_old) == 1 or len(mid_new) == 1:
        # one message on a side (a replaced or edited last turn): difflib's block is the
        # first place the other side has it (its longest match, earliest in either)
        j = _first_index(mid_new, mid_old[0]) if len(mid_old) == 1 else _first_index(mid_old, mid_new[0])
        if j is not None:
            blocks.append((p, p + j, 1) if len(mid_old) == 1 else (p + j, p, 1))
    elif mid_old and mid_new:
        sm = SequenceMatcher(None, list(mid_old), list(mid_new), autojunk=False)
        for a, b, size in sm.get_matching_blocks():
            if size:
                blocks.append((p + a, p + b, size))
    if s:
        blocks.append((len(old) - s, len(new) - s, s))
    return _merged(blocks)


def _merged(blocks: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``blocks`` with adjacent ones merged."""
    merged: list[tuple[int, int, int]] = []
    for blk in blocks:
        if merged and merged[-1][0] + merged[-1][2] == blk[0] and merged[-1][1] + merged[-1][2] == blk[1]:
            a, b, size = merged[-1]
            merged[-1] = (a, b, size + blk[2])
        else:
            merged.append(blk)
    return merged


def _first_index(items: Sequence[str], item: str) -> int | None:
    for k, x in enumerate(items):
        if x == item:
            return k
    return None


def gaps_between(blocks: Sequence[tuple[int, int, int]], n_old: int, n_new: int) -> list[tuple[int, int, int, int, str]]:
    """Regions between kept blocks: ``(old_lo, old_hi, new_lo, new_hi, position)`` with
    position ``leading``, ``middle``, ``trailing`` or ``all`` (nothing kept at all)."""
    gaps: list[tuple[int, int, int, int, str]] = []
    po = pn = 0
    for i, (a, b, size) in enumerate(blocks):
        if a > po or b > pn:
            gaps.append((po, a, pn, b, "leading" if i == 0 else "middle"))
        po, pn = a + size, b + size
    if po < n_old or pn < n_new:
        gaps.append((po, n_old, pn, n_new, "trailing" if blocks else "all"))
    return gaps
