"""The scanner's per-text index: facts about one text, each computed lazily and once
and shared by every rule that asks — its ASCII bytes and their lower-cased copy, its set
of words (snake/kebab/camel pieces included), the positions of a literal (as a substring
or as a word), and its character runs for the named prefilters (:data:`PREFILTERS`).

Separate from :mod:`.scanner` because it knows nothing of rules or catalogues: it answers
questions about one text with C-speed ``bytes`` operations.
"""
from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["PREFILTERS", "TextIndex", "Window"]

Window = tuple[int, int]


# --------------------------------------------------------------------------- character runs
#
# All prefilters work on ``text.encode("ascii", "replace")``: one byte per character
# (every non-ASCII character becomes ``?``), so byte offsets are character offsets and
# the C-speed ``bytes`` methods (translate, find, lower, split) apply.

_MARK = 1
_LEAD = 2
_NON_MARK = re.compile(b"[^\x01]")


def _table(chars: str, lead: str = "") -> bytes:
    t = bytearray(range(256))
    for i in range(256):
        if i in (_MARK, _LEAD):
            t[i] = 0
    for c in chars:
        t[ord(c)] = _MARK
    for c in lead:
        t[ord(c)] = _LEAD
    return bytes(t)


_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_HEX_T = _table("0123456789abcdefABCDEF")
_ALNUM_T = _table(_ALNUM)
_US_ALNUM_T = _table(_ALNUM, "_")
_DIGIT_T = _table("0123456789")


def _runs(ab: bytes, table: bytes, min_len: int, lead: bool = False) -> list[Window]:
    """Spans of runs of ≥ ``min_len`` marked bytes (optionally right after a lead byte,
    which the span then includes)."""
    t = ab.translate(table)
    needle = (bytes([_LEAD]) if lead else b"") + bytes([_MARK]) * min_len
    out: list[Window] = []
    find = t.find
    pos = 0
    while True:
        i = find(needle, pos)
        if i < 0:
            return out
        m = _NON_MARK.search(t, i + len(needle))
        j = m.start() if m else len(t)
        out.append((i, j))
        pos = j


#: ``-`` and five lower-case letters or digits ending a name: where a generated suffix
#: can be (``migrate-23mt8``).
_DASH5 = re.compile(rb"-[a-z0-9]{5}(?![\w\-])")
_HEX_COLON_T = _table("0123456789abcdefABCDEF", ":")
_PAIRS = (bytes([_MARK, _MARK, _LEAD]) * 7) + bytes([_MARK, _MARK])
_NON_PAIR = re.compile(b"[^\x01\x02]")


def _hex_pairs(ab: bytes) -> list[Window]:
    """Spans of eight or more colon-separated hex pairs (a serial number, a fingerprint),
    found by substring search on the translated text."""
    t = ab.translate(_HEX_COLON_T)
    out: list[Window] = []
    pos = 0
    while (i := t.find(_PAIRS, pos)) >= 0:
        m = _NON_PAIR.search(t, i + len(_PAIRS))
        j = m.start() if m else len(t)
        out.append((i, j))
        pos = j
    return out


def _spans(pattern: re.Pattern[bytes]) -> Callable[[bytes], list[Window]]:
    return lambda ab: [m.span() for m in pattern.finditer(ab)]


PREFILTERS: dict[str, Callable[[bytes], list[Window]]] = {
    "hex": lambda ab: _runs(ab, _HEX_T, 7),
    "alnum26": lambda ab: _runs(ab, _ALNUM_T, 26),
    "underscore8": lambda ab: _runs(ab, _US_ALNUM_T, 8, lead=True),
    "digit4": lambda ab: _runs(ab, _DIGIT_T, 4),
    "dash5": _spans(_DASH5),
    "hexpairs": _hex_pairs,
}


# --------------------------------------------------------------------------- per-text index

_TOKEN_TABLE = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in range(256))
_CAMEL_PIECE = re.compile(rb"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_IS_ALNUM = [chr(c).isalnum() and c < 128 for c in range(256)]
_IS_UPPER = [65 <= c <= 90 for c in range(256)]


class TextIndex:
    """Lazily computed, shared facts about one text."""

    __slots__ = ("_has", "_pos", "_rev", "_runs", "_tokens", "_wpos", "ab", "low", "n", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.ab = text.encode("ascii", "replace")
        self.low = self.ab.lower()
        self.n = len(text)
        self._tokens: frozenset[bytes] | None = None
        self._pos: dict[str, list[int]] = {}
        self._wpos: dict[str, list[int]] = {}
        self._runs: dict[str, list[Window]] = {}
        self._rev: bytes | None = None
        self._has: dict[tuple[str, bool], bool] = {}

    def tokens(self) -> frozenset[bytes]:
        """Lower-cased ASCII words of the text (split on non-alphanumerics and camelCase)."""
        if self._tokens is None:
            raw = set(self.ab.translate(_TOKEN_TABLE).split())
            out: set[bytes] = set()
            for t in raw:
                low = t.lower()
                out.add(low)
                if t != low and not t.isupper():
                    out.update(p.lower() for p in _CAMEL_PIECE.findall(t))
            self._tokens = frozenset(out)
        return self._tokens

    def has(self, literal: str, word: bool) -> bool:
        """Whether ``literal`` (lower case) occurs as a word (``word``) or a substring."""
        key = (literal, word)
        r = self._has.get(key)
        if r is None:
            if word:
                r = literal.encode("ascii", "replace") in self.tokens()
            else:
                r = bool(self.positions(literal))
            self._has[key] = r
        return r

    def positions(self, literal: str) -> list[int]:
        """Every substring occurrence of ``literal`` (lower case) in the lower-cased text."""
        hit = self._pos.get(literal)
        if hit is None:
            hit = []
            lit = literal.encode("ascii", "replace")
            find = self.low.find
            i = find(lit)
            while i >= 0:
                hit.append(i)
                i = find(lit, i + 1)
            self._pos[literal] = hit
        return hit

    def word_positions(self, word: str) -> list[int]:
        """Occurrences of ``word`` as a word: not inside a longer lower-case run
        (``upload`` in ``upload_id``, ``UploadId``, ``--upload-id``; not in ``uploads``)."""
        hit = self._wpos.get(word)
        if hit is None:
            ab, n, ln = self.ab, self.n, len(word)
            alnum, upper = _IS_ALNUM, _IS_UPPER
            hit = []
            for i in self.positions(word):
                if i > 0 and alnum[ab[i - 1]] and not (upper[ab[i]] and not upper[ab[i - 1]]):
                    continue
                j = i + ln
                if j < n and alnum[ab[j]] and not (upper[ab[j]] and not upper[ab[j - 1]]):
                    continue
                hit.append(i)
            self._wpos[word] = hit
        return hit

    def runs(self, name: str) -> list[Window]:
        r = self._runs.get(name)
        if r is None:
            r = PREFILTERS[name](self.ab)
            self._runs[name] = r
        return r

    def reversed(self) -> bytes:
        if self._rev is None:
            self._rev = self.ab[::-1]
        return self._rev
